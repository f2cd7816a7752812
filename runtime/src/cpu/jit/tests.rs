//! The JIT against the row interpreter (bit for bit: both run the same polynomials in the same
//! order) and against the f64 reference on special values, over flat and broadcast layouts and
//! lengths that leave a partial vector. Every case runs both compiled paths: the Cranelift
//! kernel, and the tile loops, which must give the interpreter's bits exactly.

use super::super::Elementwise;
use super::super::kernels::{binary, interpret, unary};
use super::tiles;
use crate::reference::eval_op;
use crate::tensor::HostTensor;
use proptest::prelude::*;
use rustral_ir::{BinaryOp, DType, ElementwiseExpr, ExprNode, F64, Op, UnaryOp};

/// The Cranelift kernel's values (what the tests below check), after checking that the tile
/// loops give the interpreter's bits on the same run (or, for a body too long for them and
/// for Cranelift, the same refusal).
fn run(body: &ElementwiseExpr, operands: &[(&[f32], &[usize])], out: &[usize]) -> Result<Vec<f32>, String> {
    let cranelift = super::run(body, operands, out, Elementwise::Cranelift);
    let tiled = super::run(body, operands, out, Elementwise::Tiles);
    match &tiled {
        Ok(t) if tiles::fits(body) => {
            let want = interpret(body, operands, out);
            for (i, (&g, &w)) in t.iter().zip(&want).enumerate() {
                assert!(same(g, w, false), "tiles, element {i}: {g}, interpreter {w}, body {body:?}");
            }
            assert_eq!(t.len(), want.len());
        }
        other => assert_eq!(other.is_ok(), cranelift.is_ok(), "a body too long for the tiles goes to Cranelift"),
    }
    cranelift
}

/// Same bits, or both NaN; `+0 == -0` where `signed_zero_free` (max and min may pick either).
fn same(a: f32, b: f32, signed_zero_free: bool) -> bool {
    a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan()) || (signed_zero_free && a == b)
}

const SPECIAL: [f32; 22] = [
    0.0,
    -0.0,
    1.0,
    -1.0,
    0.5,
    -0.5,
    0.03,
    -0.03,
    0.2,
    -0.3,
    2.5,
    -3.7,
    9.5,
    -12.0,
    87.0,
    -87.5,
    89.0,
    -100.0,
    f32::INFINITY,
    f32::NEG_INFINITY,
    f32::NAN,
    1e-30,
];

fn body(nodes: Vec<ExprNode>) -> ElementwiseExpr {
    ElementwiseExpr { nodes }
}

#[test]
fn every_unary_op_matches_the_interpreter_bit_for_bit() {
    for u in UnaryOp::ALL {
        let b = body(vec![ExprNode::Arg(0), ExprNode::Unary(u, 0)]);
        let got = run(&b, &[(&SPECIAL, &[SPECIAL.len()])], &[SPECIAL.len()]).expect("the JIT compiles every unary op");
        for (&x, &y) in SPECIAL.iter().zip(&got) {
            assert!(same(y, unary(u, x), false), "{u:?}({x}): jit {y}, interpreter {}", unary(u, x));
        }
    }
}

#[test]
fn every_binary_op_matches_the_interpreter_bit_for_bit() {
    let xs: Vec<f32> = SPECIAL.iter().flat_map(|&x| SPECIAL.iter().map(move |_| x)).collect();
    let ys: Vec<f32> = SPECIAL.iter().flat_map(|_| SPECIAL.iter().copied()).collect();
    for op in BinaryOp::ALL {
        let b = body(vec![ExprNode::Arg(0), ExprNode::Arg(1), ExprNode::Binary(op, 0, 1)]);
        let got = run(&b, &[(&xs, &[xs.len()]), (&ys, &[ys.len()])], &[xs.len()]).expect("compiles");
        let loose = matches!(op, BinaryOp::Max | BinaryOp::Min);
        for ((&x, &y), &z) in xs.iter().zip(&ys).zip(&got) {
            assert!(same(z, binary(op, x, y), loose), "{op:?}({x}, {y}): jit {z}, interpreter {}", binary(op, x, y));
        }
    }
}

/// The f64 reference on the special values: the polynomials' accuracy, not just agreement.
#[test]
fn transcendental_ops_are_within_a_few_ulp_of_the_reference() {
    let n = SPECIAL.len();
    for u in [UnaryOp::Exp, UnaryOp::Tanh, UnaryOp::Sigmoid, UnaryOp::Erf, UnaryOp::Log, UnaryOp::Sqrt] {
        let b = body(vec![ExprNode::Arg(0), ExprNode::Unary(u, 0)]);
        let got = run(&b, &[(&SPECIAL, &[n])], &[n]).expect("compiles");
        let x = HostTensor::new(DType::F32, &[n], SPECIAL.iter().map(|&v| v as f64).collect()).expect("tensor");
        let want = eval_op(&Op::Unary(u), &[&x], DType::F32, &[n]).expect("reference");
        for ((&x, &g), &w) in SPECIAL.iter().zip(&got).zip(&want.data) {
            let (g, w) = (g as f64, w);
            let ok = (g.is_nan() && w.is_nan()) || g == w || (g - w).abs() <= 1e-6 * w.abs().max(1e-30) + 1e-7;
            assert!(ok, "{u:?}({x}): jit {g}, reference {w}");
        }
    }
}

#[test]
fn broadcast_rows_scalars_and_partial_vectors() {
    // out = where(a > b, a * c, -a) + d with a [r, w], b [w], c [r, 1], d a scalar.
    let b = body(vec![
        ExprNode::Arg(0),
        ExprNode::Arg(1),
        ExprNode::Arg(2),
        ExprNode::Arg(3),
        ExprNode::Binary(BinaryOp::Gt, 0, 1),
        ExprNode::Binary(BinaryOp::Mul, 0, 2),
        ExprNode::Unary(UnaryOp::Neg, 0),
        ExprNode::Where(4, 5, 6),
        ExprNode::Binary(BinaryOp::Add, 7, 3),
    ]);
    for (r, w) in [(1, 1), (3, 1), (2, 3), (5, 4), (3, 7), (4, 9), (2, 33)] {
        let a: Vec<f32> = (0..r * w).map(|i| (i as f32 * 0.37).sin() * 3.0).collect();
        let bb: Vec<f32> = (0..w).map(|i| (i as f32 * 0.11).cos()).collect();
        let c: Vec<f32> = (0..r).map(|i| 1.0 + i as f32).collect();
        let d = [0.25f32];
        let got = run(&b, &[(&a, &[r, w]), (&bb, &[w]), (&c, &[r, 1]), (&d, &[1])], &[r, w]).expect("compiles");
        for i in 0..r {
            for j in 0..w {
                let x = a[i * w + j];
                let want = if x > bb[j] { x * c[i] } else { -x } + 0.25;
                assert_eq!(got[i * w + j].to_bits(), want.to_bits(), "[{r},{w}] at ({i},{j})");
            }
        }
    }
}

#[test]
fn bool_constants_and_casts_become_zero_or_one() {
    // cast<f32>(cast<bool>(x)) * true + cast<f32>(false)
    let b = body(vec![
        ExprNode::Arg(0),
        ExprNode::Cast(DType::Bool, 0),
        ExprNode::Const { value: F64(1.0), dtype: DType::Bool },
        ExprNode::Const { value: F64(0.0), dtype: DType::Bool },
        ExprNode::Cast(DType::F32, 1),
        ExprNode::Binary(BinaryOp::Mul, 4, 2),
        ExprNode::Binary(BinaryOp::Add, 5, 3),
    ]);
    let xs = [0.0f32, -0.0, 2.0, f32::NAN, -1e-30];
    let got = run(&b, &[(&xs, &[5])], &[5]).expect("compiles");
    assert_eq!(got, vec![0.0, 0.0, 1.0, 1.0, 1.0]);
}

fn arb_body() -> impl Strategy<Value = ElementwiseExpr> {
    let step = (0usize..4, any::<prop::sample::Index>(), any::<prop::sample::Index>(), any::<prop::sample::Index>());
    (prop::collection::vec(step, 1..12), -3.0f64..3.0).prop_map(|(steps, k)| {
        let mut nodes = vec![ExprNode::Arg(0), ExprNode::Arg(1), ExprNode::Const { value: F64(k), dtype: DType::F32 }];
        for (kind, a, b, c) in steps {
            let n = nodes.len();
            nodes.push(match kind {
                0 => ExprNode::Unary(UnaryOp::ALL[a.index(UnaryOp::ALL.len())], b.index(n)),
                1 | 2 => ExprNode::Binary(BinaryOp::ALL[a.index(BinaryOp::ALL.len())], b.index(n), c.index(n)),
                _ => ExprNode::Where(a.index(n), b.index(n), c.index(n)),
            });
        }
        ElementwiseExpr { nodes }
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, failure_persistence: None, ..ProptestConfig::default() })]

    /// Random bodies over a row-broadcast layout: the JIT gives the interpreter's bits.
    #[test]
    fn random_bodies_match_the_interpreter(b in arb_body(), rows in 1usize..4, width in 1usize..11, seed in 0u32..1000) {
        let x: Vec<f32> = (0..rows * width).map(|i| (((i as u32).wrapping_mul(2654435761) ^ seed) % 1000) as f32 / 125.0 - 4.0).collect();
        let y: Vec<f32> = (0..width).map(|i| (((i as u32).wrapping_mul(40503) ^ seed) % 1000) as f32 / 200.0 - 2.5).collect();
        let operands: [(&[f32], &[usize]); 2] = [(&x, &[rows, width]), (&y, &[width])];
        let got = run(&b, &operands, &[rows, width]).expect("compiles");
        let want = interpret(&b, &operands, &[rows, width]);
        let loose = b.nodes.iter().any(|n| matches!(n, ExprNode::Binary(BinaryOp::Max | BinaryOp::Min, ..)));
        for (i, (&g, &w)) in got.iter().zip(&want).enumerate() {
            prop_assert!(same(g, w, loose), "element {i}: jit {g}, interpreter {w}, body {b:?}");
        }
    }
}

/// `x^2` and `x^3` by constant exponents are inlined products: the interpreter's bits, and the
/// reference's powers within an ulp or two.
#[test]
fn constant_squares_and_cubes() {
    for k in [2.0, 3.0, 2.5] {
        let b = body(vec![
            ExprNode::Arg(0),
            ExprNode::Const { value: F64(k), dtype: DType::F32 },
            ExprNode::Binary(BinaryOp::Pow, 0, 1),
        ]);
        let got = run(&b, &[(&SPECIAL, &[SPECIAL.len()])], &[SPECIAL.len()]).expect("compiles");
        for (&x, &g) in SPECIAL.iter().zip(&got) {
            let want = binary(BinaryOp::Pow, x, k as f32);
            assert!(same(g, want, false), "{x}^{k}: jit {g}, interpreter {want}");
            let exact = (x as f64).powf(k) as f32 as f64;
            assert!(
                (g.is_nan() && exact.is_nan()) || g as f64 == exact || ((g as f64 - exact) / exact).abs() < 4e-7,
                "{x}^{k}: {g} vs {exact}"
            );
        }
    }
}

/// A body over the JIT's limit is refused (quickly, not compiled for minutes), so the caller
/// interprets it; one at the limit still compiles and agrees with the interpreter.
#[test]
fn a_body_over_the_limit_is_left_to_the_interpreter() {
    // x, then alternately `* 0.5` and `tanh`: each step one or two nodes.
    let chain = |len: usize| {
        let mut nodes = vec![ExprNode::Arg(0), ExprNode::Const { value: F64(0.5), dtype: DType::F32 }];
        while nodes.len() < len {
            let last = nodes.len() - 1;
            nodes.push(if nodes.len() % 2 == 0 {
                ExprNode::Binary(BinaryOp::Mul, last, 1)
            } else {
                ExprNode::Unary(UnaryOp::Tanh, last)
            });
        }
        body(nodes)
    };
    let xs = [0.5f32, -2.0, 3.0, 0.0, 1.5, -0.25, 7.0, 9.0, -1.0];
    let over = run(&chain(super::MAX_BODY_NODES + 1), &[(&xs, &[xs.len()])], &[xs.len()]);
    assert!(over.as_ref().is_err_and(|e| e.contains("over the JIT")), "{over:?}");
    let at = chain(super::MAX_BODY_NODES);
    let got = run(&at, &[(&xs, &[xs.len()])], &[xs.len()]).expect("a body at the limit compiles");
    let want = interpret(&at, &[(&xs, &[xs.len()])], &[xs.len()]);
    assert_eq!(
        got.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
        want.iter().map(|v| v.to_bits()).collect::<Vec<_>>()
    );
}

/// The chain the bench times, `tanh(0.75 x + b) x + 0.5 x^2` with `b` a scalar, over lengths on
/// both sides of a tile (256) and of a parallel block (16384): the tile loops give the
/// interpreter's bits (checked in `run`), and both paths the f64 formula within 1e-5.
#[test]
fn runs_across_tiles_and_blocks_with_a_scalar_operand() {
    use ExprNode::{Arg, Binary, Const, Unary};
    let k = |v: f64| Const { value: F64(v), dtype: DType::F32 };
    let b = body(vec![
        Arg(0),
        Arg(1),
        k(0.75),
        k(0.5),
        Binary(BinaryOp::Mul, 0, 2),
        Binary(BinaryOp::Add, 4, 1),
        Unary(UnaryOp::Tanh, 5),
        Binary(BinaryOp::Mul, 6, 0),
        Binary(BinaryOp::Mul, 0, 0),
        Binary(BinaryOp::Mul, 8, 3),
        Binary(BinaryOp::Add, 7, 9),
    ]);
    for n in [1usize, 7, 255, 256, 257, 1000, (1 << 14) + 300] {
        let x: Vec<f32> = (0..n).map(|i| ((i * 37 % 101) as f32 - 50.0) / 10.0).collect();
        let s = [0.3f32];
        let got = run(&b, &[(&x, &[n]), (&s, &[1])], &[n]).expect("compiles");
        for (i, (&v, &g)) in x.iter().zip(&got).enumerate() {
            let v = v as f64;
            let want = (0.75 * v + 0.3).tanh() * v + 0.5 * v * v;
            assert!((g as f64 - want).abs() <= 1e-5 * want.abs().max(1.0), "n {n}, element {i}: {g} vs {want}");
        }
    }
}

/// A body whose last node is an operand or a constant: the tile loops write their output
/// straight from that node, so each kind is checked to give its values in every tile (the
/// output starts uninitialised, so a value left unwritten would not read as the one wanted).
#[test]
fn bodies_that_end_in_an_operand_or_constant_copy_it_out() {
    use ExprNode::{Arg, Const};
    let n = 2 * tiles::TILE + 3;
    let x: Vec<f32> = (0..n).map(|i| i as f32 * 0.25 - 7.0).collect();
    let s = [0.3f32];
    let operands: [(&[f32], &[usize]); 2] = [(&x, &[n]), (&s, &[1])];
    let cases = [
        (vec![Arg(1), Arg(0)], x.clone()),
        (vec![Arg(0), Arg(1)], vec![0.3; n]),
        (vec![Arg(0), Const { value: F64(-2.5), dtype: DType::F32 }], vec![-2.5; n]),
    ];
    for (nodes, want) in cases {
        let b = body(nodes);
        let got = super::run(&b, &operands, &[n], Elementwise::Tiles).expect("runs");
        assert_eq!(got.len(), n);
        for (i, (&g, &w)) in got.iter().zip(&want).enumerate() {
            assert_eq!(g.to_bits(), w.to_bits(), "body {b:?}, element {i}");
        }
    }
}

/// Which bodies the default mode runs a tile at a time: those with a transcendental function,
/// on a CPU with vectors wider than Cranelift's, and short enough for the tile scratch.
#[test]
fn transcendental_bodies_prefer_tiles_on_wide_vector_cpus() {
    use crate::cpu::simd;
    let tanh = body(vec![ExprNode::Arg(0), ExprNode::Unary(UnaryOp::Tanh, 0)]);
    let add = body(vec![ExprNode::Arg(0), ExprNode::Arg(1), ExprNode::Binary(BinaryOp::Add, 0, 1)]);
    let mut long = vec![ExprNode::Arg(0)];
    (0..64).for_each(|i| long.push(ExprNode::Unary(UnaryOp::Exp, i)));
    assert_eq!(tiles::prefers_tiles(&tanh), simd::has_avx2() || simd::has_avx512());
    assert!(!tiles::prefers_tiles(&add));
    assert!(!tiles::prefers_tiles(&body(long)));
}
