//! Each primitive op against values computed by hand (or by an independent loop in the test).

// Explicit index loops are the independent reference here, so they stay index loops.
#![allow(clippy::needless_range_loop)]

mod common;
use common::{assert_close, graph, run, run1, values};
use rustral_ir::DType;
use rustral_runtime::HostTensor;
use rustral_runtime::reference::EvalError;

fn unary(op: &str, x: f64) -> f64 {
    let src = format!("graph \"u\" {{\n  %0: f64[] = input \"x\"\n  %1: f64[] = {op} %0\n  output \"y\" = %1\n}}\n");
    let g = graph(&src);
    run(&g, &[("x", HostTensor::scalar(DType::F64, x))]).unwrap()[0].to_vec()[0]
}

#[test]
fn unary_ops_match_hand_values() {
    let cases: &[(&str, f64, f64)] = &[
        ("neg", 2.5, -2.5),
        ("abs", -3.0, 3.0),
        ("exp", 1.0, std::f64::consts::E),
        ("log", std::f64::consts::E, 1.0),
        ("sqrt", 6.25, 2.5),
        ("rsqrt", 4.0, 0.5),
        ("recip", 8.0, 0.125),
        ("tanh", 0.5, 0.46211715726000974), // tanh(0.5)
        ("sigmoid", 0.0, 0.5),
        ("sigmoid", 2.0, 0.8807970779778823), // 1 / (1 + e^-2)
        ("relu", -1.5, 0.0),
        ("relu", 1.5, 1.5),
        ("erf", 0.5, 0.5204998778130465), // tables of erf
        ("erf", -1.0, -0.8427007929497149),
        ("sin", std::f64::consts::FRAC_PI_2, 1.0),
        ("cos", std::f64::consts::PI, -1.0),
    ];
    for &(op, x, want) in cases {
        let got = unary(op, x);
        assert!((got - want).abs() < 1e-15, "{op}({x}) = {got}, want {want}");
    }
    assert!(unary("log", -1.0).is_nan());
    assert_eq!(unary("log", 0.0), f64::NEG_INFINITY);
}

/// numpy broadcasting: [2, 1, 3] + [4, 1] -> [2, 4, 3], checked against an explicit loop.
#[test]
fn binary_broadcasting_follows_numpy() {
    let (a, b) = (values(1, 6), values(2, 4));
    let y = run1(
        "graph \"b\" {\n  %0: f32[2, 1, 3] = input \"a\"\n  %1: f32[4, 1] = input \"b\"\n  %2: f32[2, 4, 3] = sub %0, %1\n  output \"y\" = %2\n}\n",
        &[("a", &[2, 1, 3], &a), ("b", &[4, 1], &b)],
    );
    assert_eq!(y.shape(), &[2, 4, 3]);
    let mut want = Vec::new();
    for i in 0..2 {
        for j in 0..4 {
            for k in 0..3 {
                want.push((a[i * 3 + k] as f32 as f64 - b[j] as f32 as f64) as f32 as f64);
            }
        }
    }
    assert_eq!(y.to_vec(), want);
}

#[test]
fn binary_ops_hand_values_and_integer_semantics() {
    let ops = [("add", 7.0), ("sub", -1.0), ("mul", 12.0), ("div", 0.75), ("pow", 81.0), ("max", 4.0), ("min", 3.0)];
    for (op, want) in ops {
        let src = format!(
            "graph \"b\" {{\n  %0: f32[] = input \"a\"\n  %1: f32[] = input \"b\"\n  %2: f32[] = {op} %0, %1\n  output \"y\" = %2\n}}\n"
        );
        let y = run1(&src, &[("a", &[], &[3.0]), ("b", &[], &[4.0])]);
        assert_eq!(y.to_vec(), [want], "{op}(3, 4)");
    }
    let cmp = [
        ("eq", [0.0, 1.0, 0.0]),
        ("ne", [1.0, 0.0, 1.0]),
        ("lt", [1.0, 0.0, 0.0]),
        ("le", [1.0, 1.0, 0.0]),
        ("gt", [0.0, 0.0, 1.0]),
        ("ge", [0.0, 1.0, 1.0]),
    ];
    for (op, want) in cmp {
        let src = format!(
            "graph \"c\" {{\n  %0: f32[3] = input \"a\"\n  %1: f32[3] = input \"b\"\n  %2: bool[3] = {op} %0, %1\n  output \"y\" = %2\n}}\n"
        );
        let y = run1(&src, &[("a", &[3], &[1.0, 2.0, 3.0]), ("b", &[3], &[2.0, 2.0, 2.0])]);
        assert_eq!((y.dtype, y.to_vec()), (DType::Bool, want.to_vec()), "{op}");
    }
    // Integer division truncates toward zero; division by zero is an error naming the node.
    let g = graph(
        "graph \"i\" {\n  %0: i32[4] = input \"a\"\n  %1: i32[4] = input \"b\"\n  %2: i32[4] = div %0, %1  @head.idx\n  output \"y\" = %2\n}\n",
    );
    let int = |v: &[f64]| HostTensor::new(DType::I32, &[4], v.to_vec()).unwrap();
    let y = run(&g, &[("a", int(&[7.0, -7.0, 7.0, -7.0])), ("b", int(&[2.0, 2.0, -2.0, -2.0]))]).unwrap();
    assert_eq!(y[0].to_vec(), [3.0, -3.0, -3.0, 3.0]);
    let err = run(&g, &[("a", int(&[1.0; 4])), ("b", int(&[1.0, 0.0, 1.0, 1.0]))]).unwrap_err();
    assert_eq!(err.to_string(), "%2 (div) at head.idx: integer division by zero");
    // max/min propagate NaN.
    let y = run1(
        "graph \"n\" {\n  %0: f32[2] = input \"a\"\n  %1: f32[2] = max %0, %0\n  output \"y\" = %1\n}\n",
        &[("a", &[2], &[f64::NAN, 1.0])],
    );
    assert!(y.to_vec()[0].is_nan());
}

#[test]
fn where_cast_iota_and_constants() {
    let y = run1(
        "graph \"w\" {
  %0: f32[2, 3] = input \"x\"
  %1: f32[] = const 0.0
  %2: bool[2, 3] = gt %0, %1
  %3: f32[3] = const [10.0, 20.0, 30.0]
  %4: f32[2, 3] = where %2, %0, %3
  output \"y\" = %4
}
",
        &[("x", &[2, 3], &[1.0, -1.0, 2.0, -2.0, 3.0, -3.0])],
    );
    assert_eq!(y.to_vec(), [1.0, 20.0, 2.0, 10.0, 3.0, 30.0]);

    let casts = graph(
        "graph \"c\" {
  %0: f32[5] = input \"x\"
  %1: i32[5] = cast %0 {to=i32}
  %2: bool[5] = cast %0 {to=bool}
  %3: f16[5] = cast %0 {to=f16}
  %4: bf16[5] = cast %0 {to=bf16}
  output \"i\" = %1
  output \"b\" = %2
  output \"h\" = %3
  output \"bf\" = %4
}
",
    );
    let x = HostTensor::new(DType::F32, &[5], vec![2.7, -2.7, 0.0, 1e10, 1.0 / 3.0]).unwrap();
    let out = run(&casts, &[("x", x)]).unwrap();
    assert_eq!(out[0].to_vec(), [2.0, -2.0, 0.0, f64::from(i32::MAX), 0.0], "truncate, saturate");
    assert_eq!(out[1].to_vec(), [1.0, 1.0, 0.0, 1.0, 1.0]);
    assert_eq!(out[2].to_vec()[4], 0.333251953125, "1/3 in f16 (10-bit mantissa)");
    assert_eq!(out[3].to_vec()[4], 0.333984375, "1/3 in bf16 (7-bit mantissa)");
    assert_eq!(out[2].to_vec()[3], f64::INFINITY, "1e10 overflows f16");

    let y = run1(
        "graph \"i\" {\n  %0: f32[2, 3] = iota {axis=1}\n  %1: i64[2, 3] = iota {axis=0}\n  %2: f32[2, 3] = const 1.5\n  %3: f32[2, 3] = add %0, %2\n  output \"y\" = %3\n}\n",
        &[],
    );
    assert_eq!(y.to_vec(), [1.5, 2.5, 3.5, 1.5, 2.5, 3.5]);
}

#[test]
fn reductions_over_axes() {
    let x: Vec<f64> = (0..24).map(f64::from).collect(); // shape [2, 3, 4]
    let reduce = |op: &str, axes: &str, keep: bool, out: &str| {
        let src = format!(
            "graph \"r\" {{\n  %0: f64[2, 3, 4] = input \"x\"\n  %1: f64{out} = {op} %0 {{axes={axes}, keepdim={keep}}}\n  output \"y\" = %1\n}}\n"
        );
        let g = graph(&src);
        run(&g, &[("x", HostTensor::new(DType::F64, &[2, 3, 4], x.clone()).unwrap())]).unwrap().remove(0)
    };
    let s = reduce("reduce_sum", "[1]", false, "[2, 4]");
    assert_eq!(s.to_vec(), [12.0, 15.0, 18.0, 21.0, 48.0, 51.0, 54.0, 57.0]);
    let m = reduce("reduce_mean", "[0, 2]", true, "[1, 3, 1]");
    assert_eq!(m.shape(), &[1, 3, 1]);
    assert_eq!(m.to_vec(), [7.5, 11.5, 15.5]);
    assert_eq!(reduce("reduce_max", "[2]", false, "[2, 3]").to_vec(), [3.0, 7.0, 11.0, 15.0, 19.0, 23.0]);
    assert_eq!(reduce("reduce_min", "[0, 1, 2]", false, "[]").to_vec(), [0.0]);
    assert_eq!(reduce("reduce_sum", "[0, 1, 2]", false, "[]").to_vec(), [276.0], "0 + 1 + ... + 23");
}

/// Batched matmul with broadcast batch dims against a naive triple loop.
#[test]
fn matmul_matches_naive_loop() {
    let (a, b) = (values(3, 2 * 3 * 4), values(4, 4 * 5));
    let y = run1(
        "graph \"m\" {\n  %0: f32[2, 3, 4] = input \"a\"\n  %1: f32[1, 4, 5] = input \"b\"\n  %2: f32[2, 3, 5] = matmul %0, %1\n  output \"y\" = %2\n}\n",
        &[("a", &[2, 3, 4], &a), ("b", &[1, 4, 5], &b)],
    );
    let (a32, b32): (Vec<f64>, Vec<f64>) =
        (a.iter().map(|&v| v as f32 as f64).collect(), b.iter().map(|&v| v as f32 as f64).collect());
    let mut want = vec![0.0; 2 * 3 * 5];
    for bt in 0..2 {
        for i in 0..3 {
            for j in 0..5 {
                let mut acc = 0.0;
                for k in 0..4 {
                    acc += a32[bt * 12 + i * 4 + k] * b32[k * 5 + j];
                }
                want[bt * 15 + i * 5 + j] = acc as f32 as f64;
            }
        }
    }
    assert_close(&y.to_vec(), &want, 0.0, 1e-7);
}

#[test]
fn layout_ops() {
    let x: Vec<f64> = (0..6).map(f64::from).collect(); // [[0, 1, 2], [3, 4, 5]]
    let src = "graph \"l\" {
  %0: f32[2, 3] = input \"x\"
  %1: f32[3, 2] = permute %0 {perm=[1, 0]}
  %2: f32[6] = reshape %1 {shape=[6]}
  %3: f32[2, 2, 3] = broadcast_to %0 {shape=[2, 2, 3]}
  %4: f32[2, 2] = slice %0 {axis=1, start=1, end=3}
  %5: f32[2, 5] = concat %0, %4 {axis=1}
  %6: i64[2, 2] = const [2.0, 0.0, 1.0, 1.0]
  %7: f32[2, 2, 2] = gather %0, %6 {axis=1}
  output \"perm\" = %2
  output \"bcast\" = %3
  output \"concat\" = %5
  output \"gather\" = %7
}
";
    let g = graph(src);
    let out = run(&g, &[("x", HostTensor::new(DType::F32, &[2, 3], x).unwrap())]).unwrap();
    assert_eq!(out[0].to_vec(), [0.0, 3.0, 1.0, 4.0, 2.0, 5.0]);
    assert_eq!(out[1].to_vec(), [0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 0.0, 1.0, 2.0, 3.0, 4.0, 5.0]);
    assert_eq!(out[2].to_vec(), [0.0, 1.0, 2.0, 1.0, 2.0, 3.0, 4.0, 5.0, 4.0, 5.0]);
    // take(x, [[2, 0], [1, 1]], axis=1): out[i][j][k] = x[i][idx[j][k]]
    assert_eq!(out[3].to_vec(), [2.0, 0.0, 1.0, 1.0, 5.0, 3.0, 4.0, 4.0]);
}

#[test]
fn gather_out_of_range_is_an_error_naming_the_node() {
    let g = graph(
        "graph \"e\" {\n  %0: f32[4, 2] = param \"emb\"  @embeddings.word\n  %1: i64[batch] = input \"ids\"\n  %2: f32[batch, 2] = gather %0, %1 {axis=0}  @embeddings.word\n  output \"y\" = %2\n}\n",
    );
    let emb = HostTensor::new(DType::F32, &[4, 2], values(5, 8)).unwrap();
    let ok = run(&g, &[("emb", emb.clone()), ("ids", HostTensor::i64(&[2], &[3, 0]).unwrap())]).unwrap();
    assert_eq!(ok[0].to_vec()[..2], emb.to_vec()[6..8]);
    let err = run(&g, &[("emb", emb), ("ids", HostTensor::i64(&[2], &[1, 4]).unwrap())]).unwrap_err();
    assert!(matches!(err, EvalError::Runtime { .. }));
    assert_eq!(err.to_string(), "%2 (gather) at embeddings.word: index 4 out of range for axis 0 of size 4");
}

#[test]
fn results_are_rounded_to_the_dtype() {
    // In f16, 2048 + 1 is not representable and rounds to 2048 (ties to even).
    let g = graph(
        "graph \"h\" {\n  %0: f16[] = input \"a\"\n  %1: f16[] = const 1.0\n  %2: f16[] = add %0, %1\n  output \"y\" = %2\n}\n",
    );
    let y = run(&g, &[("a", HostTensor::scalar(DType::F16, 2048.0))]).unwrap();
    assert_eq!(y[0].to_vec(), [2048.0]);
    // In f32, 1 + 2^-30 rounds to 1; in f64 it does not.
    let one_plus = |dt: &str| {
        let g = graph(&format!(
            "graph \"p\" {{\n  %0: {dt}[] = const 1.0\n  %1: {dt}[] = const 9.313225746154785e-10\n  %2: {dt}[] = add %0, %1\n  output \"y\" = %2\n}}\n"
        ));
        run(&g, &[]).unwrap()[0].to_vec()[0]
    };
    assert_eq!(one_plus("f32"), 1.0);
    assert_eq!(one_plus("f64"), 1.0 + 2f64.powi(-30));
}

#[test]
fn host_tensor_rejects_values_that_do_not_fit() {
    let err = HostTensor::new(DType::F32, &[2, 3], vec![0.0; 5]).unwrap_err();
    assert_eq!(err.to_string(), "5 values do not fill shape [2, 3] (6 elements)");
}

/// A static slice of a symbolic dim (BERT's pooler takes token 0 of `seq`) is checked when run.
#[test]
fn static_slice_of_symbolic_dim_is_checked_at_run_time() {
    let g = graph(
        "graph \"p\" {\n  %0: f32[batch, seq, 2] = input \"h\"\n  %1: f32[batch, 1, 2] = slice %0 {axis=1, start=0, end=1}  @pooler\n  output \"cls\" = %1\n}\n",
    );
    let h = HostTensor::new(DType::F32, &[1, 3, 2], values(1, 6)).unwrap();
    assert_eq!(run(&g, &[("h", h.clone())]).unwrap()[0].to_vec(), h.to_vec()[..2]);
    let empty = HostTensor::new(DType::F32, &[1, 0, 2], vec![]).unwrap();
    let err = run(&g, &[("h", empty)]).unwrap_err();
    assert_eq!(err.to_string(), "%1 (slice) at pooler: slice 0..1 is past the end of axis 1 (size 0)");
}

/// `random_uniform` against the formula evaluated independently (Python, with 32-bit masks):
/// `[(pcg(i ^ pcg(42)) >> 8) / 2**24 for i in range(3)]`.
#[test]
fn random_uniform_matches_its_definition() {
    let src = |seed: u32| {
        format!("graph \"r\" {{\n  %0: f64[100, 100] = random_uniform {{seed={seed}}}\n  output \"u\" = %0\n}}\n")
    };
    let u = run(&graph(&src(42)), &[]).unwrap().remove(0).to_vec();
    assert_eq!(u[..3], [0.6485052108764648, 0.2051880955696106, 0.320794939994812]);
    assert!(u.iter().all(|&v| (0.0..1.0).contains(&v)));
    let mean = u.iter().sum::<f64>() / u.len() as f64;
    assert!((mean - 0.5).abs() < 0.01, "mean {mean}");
    assert_eq!(run(&graph(&src(42)), &[]).unwrap()[0].to_vec(), u, "deterministic");
    assert_ne!(run(&graph(&src(43)), &[]).unwrap()[0].to_vec(), u, "seeds differ");
}

/// With a step, the stream's key is `pcg(seed + 2654435769 * step)` (Python, 32-bit masks):
/// step 0 is the stream without a step, each other step another stream, negative steps wrap.
#[test]
fn random_uniform_with_a_step_matches_its_definition() {
    let g = graph(
        "graph \"r\" {\n  %0: i64[] = input \"step\"\n  %1: f64[100, 100] = random_uniform %0 {seed=42}\n  output \"u\" = %1\n}\n",
    );
    let at = |step: i64| run(&g, &[("step", HostTensor::i64(&[], &[step]).unwrap())]).unwrap().remove(0).to_vec();
    assert_eq!(at(3)[..3], [0.14516746997833252, 0.04322624206542969, 0.5308029055595398]);
    assert_eq!(at(-1)[..3], [0.2874070405960083, 0.47020822763442993, 0.812445342540741]);
    let plain = graph("graph \"r\" {\n  %0: f64[100, 100] = random_uniform {seed=42}\n  output \"u\" = %0\n}\n");
    assert_eq!(at(0), run(&plain, &[]).unwrap()[0].to_vec());
    let (a, b) = (at(1), at(2));
    let same = a.iter().zip(&b).filter(|(x, y)| x == y).count();
    assert!(same < 10, "{same} of 10000 values repeat between steps");
}
