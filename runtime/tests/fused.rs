//! Fused ops against their primitive decompositions, evaluated by the same interpreter, and the
//! identities that define them (softmax rows sum to 1, LayerNorm rows have zero mean and unit
//! variance). The decompositions are written out in text so the reader sees both sides.

mod common;
use common::{assert_close, graph, run, values};
use rustral_ir::{DType, Graph, samples};
use rustral_runtime::HostTensor;

/// Feed every input and param of `g` with seeded values (same seed per name, so two graphs
/// with the same names get the same data).
fn feeds(g: &Graph, shapes: &[(&str, &[usize])]) -> Vec<(String, HostTensor)> {
    g.inputs()
        .into_iter()
        .chain(g.params())
        .map(|(name, id)| {
            let dtype = g.node(id).unwrap().ty.dtype;
            let shape = shapes.iter().find(|(n, _)| *n == name).unwrap_or_else(|| panic!("no shape for {name}")).1;
            let seed = name.bytes().fold(7u64, |h, b| h.wrapping_mul(31).wrapping_add(u64::from(b)));
            let data = values(seed, shape.iter().product()).into_iter().map(|v| v * 2.0).collect();
            (name.clone(), HostTensor::new(dtype, shape, data).unwrap())
        })
        .collect()
}

fn eval(g: &Graph, shapes: &[(&str, &[usize])]) -> Vec<f64> {
    let f = feeds(g, shapes);
    let f: Vec<(&str, HostTensor)> = f.iter().map(|(n, t)| (n.as_str(), t.clone())).collect();
    run(g, &f).unwrap_or_else(|e| panic!("{e}")).remove(0).to_vec()
}

#[test]
fn layer_norm_equals_its_primitive_form() {
    let fused = graph(
        "graph \"ln\" {
  %0: f32[batch, seq, 32] = input \"x\"
  %1: f32[32] = param \"ln.weight\"
  %2: f32[32] = param \"ln.bias\"
  %3: f32[batch, seq, 32] = layer_norm %0, %1, %2 {eps=1e-5}
  output \"y\" = %3
}
",
    );
    let shapes: &[(&str, &[usize])] = &[("x", &[2, 3, 32]), ("ln.weight", &[32]), ("ln.bias", &[32])];
    let primitive = samples::layer_norm_primitives().unwrap();
    // The primitive form rounds each step to f32; the fused op rounds once.
    assert_close(&eval(&fused, shapes), &eval(&primitive, shapes), 2e-6, 2e-6);
}

#[test]
fn layer_norm_rows_have_zero_mean_and_unit_variance() {
    let g = graph(
        "graph \"ln\" {\n  %0: f64[4, 16] = input \"x\"\n  %1: f64[4, 16] = layer_norm %0 {eps=0.0}\n  output \"y\" = %1\n}\n",
    );
    let y = eval(&g, &[("x", &[4, 16])]);
    for row in y.chunks(16) {
        let mean = row.iter().sum::<f64>() / 16.0;
        let var = row.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / 16.0;
        assert!(mean.abs() < 1e-12 && (var - 1.0).abs() < 1e-12, "mean {mean}, var {var}");
    }
}

#[test]
fn rms_norm_equals_its_primitive_form() {
    let shapes: &[(&str, &[usize])] = &[("x", &[3, 8]), ("w", &[8])];
    let fused = graph(
        "graph \"r\" {\n  %0: f64[n, 8] = input \"x\"\n  %1: f64[8] = param \"w\"\n  %2: f64[n, 8] = rms_norm %0, %1 {eps=1e-6}\n  output \"y\" = %2\n}\n",
    );
    let primitive = graph(
        "graph \"r\" {
  %0: f64[n, 8] = input \"x\"
  %1: f64[8] = param \"w\"
  %2: f64[n, 8] = mul %0, %0
  %3: f64[n, 1] = reduce_mean %2 {axes=[1], keepdim=true}
  %4: f64[] = const 1e-6
  %5: f64[n, 1] = add %3, %4
  %6: f64[n, 1] = rsqrt %5
  %7: f64[n, 8] = mul %0, %6
  %8: f64[n, 8] = mul %7, %1
  output \"y\" = %8
}
",
    );
    assert_close(&eval(&fused, shapes), &eval(&primitive, shapes), 1e-14, 1e-14);
}

#[test]
fn softmax_along_any_axis_equals_primitive_form_and_sums_to_one() {
    let shapes: &[(&str, &[usize])] = &[("x", &[2, 5, 3])];
    let fused = graph(
        "graph \"s\" {\n  %0: f64[2, 5, 3] = input \"x\"\n  %1: f64[2, 5, 3] = softmax %0 {axis=1}\n  output \"y\" = %1\n}\n",
    );
    let primitive = graph(
        "graph \"s\" {
  %0: f64[2, 5, 3] = input \"x\"
  %1: f64[2, 1, 3] = reduce_max %0 {axes=[1], keepdim=true}
  %2: f64[2, 5, 3] = sub %0, %1
  %3: f64[2, 5, 3] = exp %2
  %4: f64[2, 1, 3] = reduce_sum %3 {axes=[1], keepdim=true}
  %5: f64[2, 5, 3] = div %3, %4
  output \"y\" = %5
}
",
    );
    let y = eval(&fused, shapes);
    assert_close(&y, &eval(&primitive, shapes), 1e-15, 1e-14);
    for b in 0..2 {
        for k in 0..3 {
            let sum: f64 = (0..5).map(|i| y[b * 15 + i * 3 + k]).sum();
            assert!((sum - 1.0).abs() < 1e-14, "column sum {sum}");
        }
    }
    // Softmax is invariant to adding a constant, and stable for large inputs.
    let big = graph(
        "graph \"s\" {\n  %0: f64[1, 3] = const [1000.0, 1001.0, 1002.0]\n  %1: f64[1, 3] = softmax %0 {axis=1}\n  output \"y\" = %1\n}\n",
    );
    let small = graph(
        "graph \"s\" {\n  %0: f64[1, 3] = const [0.0, 1.0, 2.0]\n  %1: f64[1, 3] = softmax %0 {axis=1}\n  output \"y\" = %1\n}\n",
    );
    assert_close(&run(&big, &[]).unwrap()[0].to_vec(), &run(&small, &[]).unwrap()[0].to_vec(), 1e-15, 0.0);
}

#[test]
fn gelu_and_silu_equal_their_formulas() {
    let shapes: &[(&str, &[usize])] = &[("x", &[64])];
    let act = |op: &str| {
        graph(&format!("graph \"a\" {{\n  %0: f64[64] = input \"x\"\n  %1: f64[64] = {op}\n  output \"y\" = %1\n}}\n"))
    };
    let erf_form = graph(
        "graph \"g\" {
  %0: f64[64] = input \"x\"
  %1: f64[] = const 0.7071067811865476
  %2: f64[64] = mul %0, %1
  %3: f64[64] = erf %2
  %4: f64[] = const 1.0
  %5: f64[64] = add %3, %4
  %6: f64[64] = mul %0, %5
  %7: f64[] = const 0.5
  %8: f64[64] = mul %6, %7
  output \"y\" = %8
}
",
    );
    let tanh_form = graph(
        "graph \"g\" {
  %0: f64[64] = input \"x\"
  %1: f64[64] = mul %0, %0
  %2: f64[64] = mul %1, %0
  %3: f64[] = const 0.044715
  %4: f64[64] = mul %2, %3
  %5: f64[64] = add %0, %4
  %6: f64[] = const 0.7978845608028654
  %7: f64[64] = mul %5, %6
  %8: f64[64] = tanh %7
  %9: f64[] = const 1.0
  %10: f64[64] = add %8, %9
  %11: f64[64] = mul %0, %10
  %12: f64[] = const 0.5
  %13: f64[64] = mul %11, %12
  output \"y\" = %13
}
",
    );
    let silu_form = graph(
        "graph \"s\" {\n  %0: f64[64] = input \"x\"\n  %1: f64[64] = sigmoid %0\n  %2: f64[64] = mul %0, %1\n  output \"y\" = %2\n}\n",
    );
    assert_close(&eval(&act("gelu %0 {approx=erf}"), shapes), &eval(&erf_form, shapes), 1e-15, 1e-14);
    assert_close(&eval(&act("gelu %0 {approx=tanh}"), shapes), &eval(&tanh_form, shapes), 1e-15, 1e-14);
    assert_close(&eval(&act("silu %0"), shapes), &eval(&silu_form, shapes), 1e-15, 1e-14);
    // The two GELU forms agree to about 1e-3 (the tanh form's known error), not exactly.
    let d: f64 = eval(&act("gelu %0 {approx=erf}"), shapes)
        .iter()
        .zip(eval(&act("gelu %0 {approx=tanh}"), shapes))
        .map(|(a, b)| (a - b).abs())
        .fold(0.0, f64::max);
    assert!(d > 1e-7 && d < 1e-3, "max difference {d}");
}

/// Attention with an additive mask and a causal mask where lq != lk (bottom-right aligned:
/// query i sees key j when j <= i + lk - lq), against matmul/softmax primitives with the
/// causal mask built from iota.
#[test]
fn attention_equals_its_primitive_form() {
    let shapes: &[(&str, &[usize])] =
        &[("q", &[2, 2, 3, 4]), ("k", &[2, 2, 5, 4]), ("v", &[2, 2, 5, 6]), ("m", &[2, 1, 1, 5])];
    let header = "  %0: f64[b, 2, 3, 4] = input \"q\"
  %1: f64[b, 2, 5, 4] = input \"k\"
  %2: f64[b, 2, 5, 6] = input \"v\"
  %3: f64[b, 1, 1, 5] = input \"m\"
";
    let scores = "  %4: f64[b, 2, 4, 5] = permute %1 {perm=[0, 1, 3, 2]}
  %5: f64[b, 2, 3, 5] = matmul %0, %4
  %6: f64[] = const 0.5
  %7: f64[b, 2, 3, 5] = mul %5, %6
  %8: f64[b, 2, 3, 5] = add %7, %3
";
    let plain = format!(
        "graph \"a\" {{\n{header}{scores}  %9: f64[b, 2, 3, 5] = softmax %8 {{axis=3}}
  %10: f64[b, 2, 3, 6] = matmul %9, %2
  output \"y\" = %10
}}
"
    );
    let causal = format!(
        "graph \"a\" {{\n{header}{scores}  %9: f64[3, 1] = iota {{axis=0}}
  %10: f64[1, 5] = iota {{axis=1}}
  %11: f64[] = const 2.0
  %12: f64[3, 1] = add %9, %11
  %13: bool[3, 5] = le %10, %12
  %14: f64[] = const -inf
  %15: f64[b, 2, 3, 5] = where %13, %8, %14
  %16: f64[b, 2, 3, 5] = softmax %15 {{axis=3}}
  %17: f64[b, 2, 3, 6] = matmul %16, %2
  output \"y\" = %17
}}
"
    );
    for (is_causal, primitive) in [(false, plain), (true, causal)] {
        let fused = graph(&format!(
            "graph \"a\" {{\n{header}  %4: f64[b, 2, 3, 6] = attention %0, %1, %2, %3 {{scale=0.5, causal={is_causal}}}\n  output \"y\" = %4\n}}\n"
        ));
        let (f, p) = (eval(&fused, shapes), eval(&graph(&primitive), shapes));
        assert_close(&f, &p, 1e-14, 1e-13);
        if is_causal {
            // Query row 0 sees keys 0..=2 only, so it differs from the unmasked result.
            let unmasked = graph(&format!(
                "graph \"a\" {{\n{header}  %4: f64[b, 2, 3, 6] = attention %0, %1, %2, %3 {{scale=0.5, causal=false}}\n  output \"y\" = %4\n}}\n"
            ));
            assert!(eval(&unmasked, shapes)[..6].iter().zip(&f[..6]).any(|(a, b)| (a - b).abs() > 1e-6));
        }
    }
}

#[test]
fn matmul_epilogue_equals_matmul_bias_activation() {
    let shapes: &[(&str, &[usize])] = &[("a", &[3, 4]), ("w", &[4, 5]), ("b", &[5])];
    let head = "  %0: f64[3, 4] = input \"a\"\n  %1: f64[4, 5] = param \"w\"\n  %2: f64[5] = param \"b\"\n";
    let acts = [
        ("none", None),
        ("relu", Some("relu %4")),
        ("gelu_tanh", Some("gelu %4 {approx=tanh}")),
        ("gelu_erf", Some("gelu %4 {approx=erf}")),
        ("silu", Some("silu %4")),
        ("tanh", Some("tanh %4")),
        ("sigmoid", Some("sigmoid %4")),
    ];
    for (act, prim) in acts {
        let fused = graph(&format!(
            "graph \"e\" {{\n{head}  %3: f64[3, 5] = matmul_epilogue %0, %1, %2 {{activation={act}}}\n  output \"y\" = %3\n}}\n"
        ));
        let tail = match prim {
            Some(line) => format!("  %5: f64[3, 5] = {line}\n  output \"y\" = %5\n"),
            None => "  output \"y\" = %4\n".to_string(),
        };
        let primitive = graph(&format!(
            "graph \"e\" {{\n{head}  %3: f64[3, 5] = matmul %0, %1\n  %4: f64[3, 5] = add %3, %2\n{tail}}}\n"
        ));
        assert_close(&eval(&fused, shapes), &eval(&primitive, shapes), 1e-15, 1e-14);
    }
}

#[test]
fn fused_elementwise_equals_its_body_as_nodes() {
    let shapes: &[(&str, &[usize])] = &[("x", &[2, 3]), ("y", &[3])];
    let fused = graph(
        "graph \"f\" {
  %0: f32[2, 3] = input \"x\"
  %1: f32[3] = input \"y\"
  %2: f16[2, 3] = fused_elementwise %0, %1 {t0 = arg 0; t1 = arg 1; t2 = const 2.0 f32; t3 = mul t0, t2; t4 = tanh t3; t5 = gt t4, t1; t6 = where t5, t4, t1; t7 = cast t6 to f16}
  output \"z\" = %2
}
",
    );
    let nodes = graph(
        "graph \"f\" {
  %0: f32[2, 3] = input \"x\"
  %1: f32[3] = input \"y\"
  %2: f32[] = const 2.0
  %3: f32[2, 3] = mul %0, %2
  %4: f32[2, 3] = tanh %3
  %5: bool[2, 3] = gt %4, %1
  %6: f32[2, 3] = where %5, %4, %1
  %7: f16[2, 3] = cast %6 {to=f16}
  output \"z\" = %7
}
",
    );
    assert_eq!(eval(&fused, shapes), eval(&nodes, shapes), "same ops, same rounding: bit-identical");
    let g = graph(
        "graph \"d\" {\n  %0: f32[4] = input \"x\"\n  %1: f32[4] = fused_elementwise %0 {t0 = arg 0; t1 = exp t0}\n  output \"y\" = %1\n}\n",
    );
    assert_eq!(
        run(&g, &[("x", HostTensor::new(DType::F32, &[4], vec![0.0; 4]).unwrap())]).unwrap()[0].to_vec(),
        [1.0; 4]
    );
}

/// Causally hidden keys are left out of the sum: a NaN in the value of a key that query 0
/// cannot see does not reach query 0's output (it does reach the last query's).
#[test]
fn causal_attention_excludes_hidden_values() {
    let g = graph(
        "graph \"a\" {\n  %0: f64[1, 3, 2] = input \"q\"\n  %1: f64[1, 3, 2] = input \"v\"\n  %2: f64[1, 3, 2] = attention %0, %0, %1 {scale=1.0, causal=true}\n  output \"y\" = %2\n}\n",
    );
    let q = HostTensor::new(DType::F64, &[1, 3, 2], values(3, 6)).unwrap();
    let mut v = values(4, 6);
    v[4] = f64::NAN; // key 2's value
    let y =
        run(&g, &[("q", q), ("v", HostTensor::new(DType::F64, &[1, 3, 2], v.clone()).unwrap())]).unwrap()[0].to_vec();
    assert_eq!(y[..2], v[..2], "query 0 sees only key 0, so its output is value 0");
    assert!(y[2..4].iter().all(|x| x.is_finite()), "query 1 sees keys 0 and 1");
    assert!(y[4].is_nan(), "query 2 sees key 2");
}

#[test]
fn cross_entropy_equals_negative_log_softmax_at_the_target_and_is_stable() {
    let fused = graph(
        "graph \"ce\" {
  %0: f64[2, 3, 5] = input \"x\"
  %1: i32[2, 3, 1] = input \"t\"
  %2: f64[2, 3] = cross_entropy %0, %1
  output \"y\" = %2
}
",
    );
    let primitive = graph(
        "graph \"ce\" {
  %0: f64[2, 3, 5] = input \"x\"
  %1: i32[2, 3, 1] = input \"t\"
  %2: f64[2, 3, 1] = reduce_max %0 {axes=[2], keepdim=true}
  %3: f64[2, 3, 5] = sub %0, %2
  %4: f64[2, 3, 5] = exp %3
  %5: f64[2, 3, 1] = reduce_sum %4 {axes=[2], keepdim=true}
  %6: f64[2, 3, 1] = log %5
  %7: f64[2, 3, 5] = sub %3, %6
  %8: i32[2, 3, 5] = iota {axis=2}
  %9: bool[2, 3, 5] = eq %8, %1
  %10: f64[2, 3, 5] = cast %9 {to=f64}
  %11: f64[2, 3, 5] = mul %7, %10
  %12: f64[2, 3] = reduce_sum %11 {axes=[2], keepdim=false}
  %13: f64[2, 3] = neg %12
  output \"y\" = %13
}
",
    );
    let x = HostTensor::new(DType::F64, &[2, 3, 5], values(3, 30).iter().map(|v| v * 4.0).collect()).unwrap();
    let t = HostTensor::new(DType::I32, &[2, 3, 1], vec![0.0, 4.0, 2.0, 1.0, 3.0, 4.0]).unwrap();
    let feeds = [("x", x), ("t", t.clone())];
    let y = run(&fused, &feeds).unwrap()[0].to_vec();
    assert_close(&y, &run(&primitive, &feeds).unwrap()[0].to_vec(), 1e-14, 1e-14);
    // Equal logits: every class has probability 1/5, so the loss is ln 5 whatever the target.
    let flat = [("x", HostTensor::new(DType::F64, &[2, 3, 5], vec![0.25; 30]).unwrap()), ("t", t.clone())];
    assert_close(&run(&fused, &flat).unwrap()[0].to_vec(), &[5f64.ln(); 6], 1e-15, 0.0);
    // Logits of 1e4 (exp overflows f64 without the max subtraction) give the loss of the same
    // logits shifted down by 1e4.
    let shifted: Vec<f64> = values(3, 30).iter().map(|v| v * 4.0).collect();
    let big = [
        ("x", HostTensor::new(DType::F64, &[2, 3, 5], shifted.iter().map(|v| v + 1e4).collect()).unwrap()),
        ("t", t.clone()),
    ];
    let small = [("x", HostTensor::new(DType::F64, &[2, 3, 5], shifted).unwrap()), ("t", t)];
    let (yb, ys) = (run(&fused, &big).unwrap()[0].to_vec(), run(&fused, &small).unwrap()[0].to_vec());
    assert!(yb.iter().all(|v| v.is_finite()), "{yb:?}");
    assert_close(&yb, &ys, 1e-9, 1e-9);
}

#[test]
fn cross_entropy_target_out_of_range_is_an_error_naming_the_node() {
    let g = graph(
        "graph \"ce\" {\n  %0: f32[2, 3] = input \"x\"\n  %1: i64[2, 1] = input \"t\"\n  %2: f32[2] = cross_entropy %0, %1  @loss\n  output \"y\" = %2\n}\n",
    );
    let x = HostTensor::new(DType::F32, &[2, 3], values(1, 6)).unwrap();
    let err = run(&g, &[("x", x), ("t", HostTensor::i64(&[2, 1], &[0, 3]).unwrap())]).unwrap_err();
    assert_eq!(err.to_string(), "%2 (cross_entropy) at loss: target 3 out of range for 3 classes");
}
