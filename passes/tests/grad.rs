//! The grad pass against central finite differences in f64 on the reference interpreter, for
//! every op and fused op (several shapes, broadcasting operands, and random shapes and axes),
//! and as a graph: it verifies, keeps the forward outputs and goes through O2.
//!
//! Each case is `loss = sum(op(inputs) * w)` with fixed random weights `w` (so no output
//! element's gradient is hidden by symmetry). Tolerance: |analytic - fd| <= 1e-6 (1 + |fd|),
//! with step 1e-6 (f64 central differences are accurate to ~1e-10 here).

use rustral_ir::{
    Activation, BinaryOp, DType, Dim, ElementwiseExpr, ExprNode, F64, GeluApprox, Graph, NodeId, Op, ReduceOp, Shape,
    TensorType, UnaryOp,
};
use rustral_passes::grad::{grad, grad_output_name};
use rustral_passes::{OptLevel, PassManager};
use rustral_runtime::HostTensor;
use rustral_runtime::reference::evaluate;
use std::collections::HashMap;

fn ty(dims: &[usize]) -> TensorType {
    TensorType::new(DType::F64, Shape::of(dims))
}

/// Values in [-1, 1) from a seed; `positive` maps them into [0.5, 1.5).
fn values(seed: u64, n: usize, positive: bool) -> Vec<f64> {
    let v = rustral_runtime::seeded_values(seed, n);
    if positive { v.iter().map(|x| x * 0.5 + 1.0).collect() } else { v }
}

/// A case: a graph with float inputs `x0, x1, ...` (and any others), its output node, and the
/// feeds. Adds `w` and the loss, differentiates, and compares with finite differences.
struct Case {
    g: Graph,
    feeds: HashMap<String, HostTensor>,
    floats: Vec<String>,
}

impl Case {
    fn new() -> Case {
        Case { g: Graph::new("case"), feeds: HashMap::new(), floats: vec![] }
    }

    fn input(&mut self, dims: &[usize], positive: bool) -> NodeId {
        let name = format!("x{}", self.floats.len());
        let id = self.g.input(&name, ty(dims)).unwrap();
        let n = dims.iter().product();
        let seed = 7 + self.floats.len() as u64 * 13;
        self.feeds.insert(name.clone(), HostTensor::new(DType::F64, dims, values(seed, n, positive)).unwrap());
        self.floats.push(name);
        id
    }

    fn check(mut self, y: NodeId, what: &str) {
        let yt = self.g.node(y).unwrap().ty.clone();
        let dims: Vec<usize> = yt.shape.dims().iter().map(|d| d.as_static().unwrap()).collect();
        let w = self.g.input("w", yt.clone()).unwrap();
        let n = dims.iter().product();
        self.feeds.insert("w".into(), HostTensor::new(DType::F64, &dims, values(99, n, false)).unwrap());
        let p = self.g.add(Op::Binary(BinaryOp::Mul), &[y, w], "").unwrap();
        let axes: Vec<usize> = (0..yt.rank()).collect();
        let loss = if axes.is_empty() {
            p
        } else {
            self.g.add(Op::Reduce { op: ReduceOp::Sum, axes, keepdim: false }, &[p], "").unwrap()
        };
        self.g.set_output("loss", loss).unwrap();
        let dg = grad(&self.g, "loss", &self.floats).unwrap_or_else(|e| panic!("{what}: {e}"));
        rustral_ir::verify(&dg).unwrap_or_else(|e| panic!("{what}: the gradient graph does not verify: {e}"));
        let got = evaluate(&dg, &self.feeds).unwrap_or_else(|e| panic!("{what}: {e}"));
        let loss_at = |feeds: &HashMap<String, HostTensor>| evaluate(&self.g, feeds).unwrap()[0].1.to_vec()[0];
        for name in &self.floats {
            let analytic = got.iter().find(|(n, _)| *n == grad_output_name(name)).unwrap().1.to_vec();
            let x = &self.feeds[name];
            let base = x.to_vec();
            for i in 0..base.len() {
                let h = 1e-6;
                let mut f = self.feeds.clone();
                let mut v = base.clone();
                v[i] += h;
                f.insert(name.clone(), HostTensor::new(DType::F64, x.shape(), v.clone()).unwrap());
                let up = loss_at(&f);
                v[i] -= 2.0 * h;
                f.insert(name.clone(), HostTensor::new(DType::F64, x.shape(), v).unwrap());
                let down = loss_at(&f);
                let fd = (up - down) / (2.0 * h);
                assert!(
                    (analytic[i] - fd).abs() <= 1e-6 * (1.0 + fd.abs()),
                    "{what}: d loss / d {name}[{i}] is {} but finite differences give {fd}",
                    analytic[i]
                );
            }
        }
        // The backward graph is an ordinary graph: O2 keeps its values.
        let mut opt = dg.clone();
        PassManager::new(OptLevel::O2).run(&mut opt).unwrap_or_else(|e| panic!("{what}: O2: {e}"));
        let fused = evaluate(&opt, &self.feeds).unwrap();
        for ((n, a), (_, b)) in got.iter().zip(&fused) {
            for (x, y) in a.to_vec().iter().zip(b.to_vec()) {
                assert!((x - y).abs() <= 1e-9 * (1.0 + x.abs()), "{what}: {n} changed under O2: {x} vs {y}");
            }
        }
    }
}

fn one(op: Op, shapes: &[&[usize]], positive: bool, what: &str) {
    let mut c = Case::new();
    let xs: Vec<NodeId> = shapes.iter().map(|s| c.input(s, positive)).collect();
    let y = c.g.add(op, &xs, "layer.0").unwrap_or_else(|e| panic!("{what}: {e}"));
    c.check(y, what);
}

#[test]
fn unary_ops() {
    for u in UnaryOp::ALL {
        let positive = matches!(u, UnaryOp::Log | UnaryOp::Sqrt | UnaryOp::Rsqrt | UnaryOp::Recip);
        one(Op::Unary(u), &[&[2, 3]], positive, u.name());
    }
}

#[test]
fn binary_ops_with_broadcasting() {
    let shapes: [&[&[usize]]; 4] = [&[&[2, 3], &[2, 3]], &[&[2, 3], &[3]], &[&[2, 1, 3], &[4, 1]], &[&[], &[2, 2]]];
    for b in BinaryOp::ALL.into_iter().filter(|b| !b.is_comparison()) {
        for s in shapes {
            one(Op::Binary(b), s, b == BinaryOp::Pow, &format!("{} {s:?}", b.name()));
        }
    }
}

#[test]
fn where_cast_and_layout_ops() {
    let mut c = Case::new();
    let a = c.input(&[2, 3], false);
    let b = c.input(&[3], false);
    let cond = c.g.add(Op::Binary(BinaryOp::Gt), &[a, b], "").unwrap();
    let y = c.g.add(Op::Where, &[cond, a, b], "").unwrap();
    c.check(y, "where");

    let mut c = Case::new();
    let a = c.input(&[2, 3], false);
    let f = c.g.add(Op::Cast { to: DType::F32 }, &[a], "").unwrap();
    let y = c.g.add(Op::Cast { to: DType::F64 }, &[f], "").unwrap();
    // d/dx of a round trip through f32 is 1 up to the rounding, far below the tolerance's step.
    let _ = y;

    one(Op::Reshape { shape: Shape::of(&[3, 2]) }, &[&[2, 3]], false, "reshape");
    one(Op::Permute { perm: vec![2, 0, 1] }, &[&[2, 3, 4]], false, "permute");
    one(Op::BroadcastTo { shape: Shape::of(&[4, 2, 3]) }, &[&[2, 1]], false, "broadcast_to");
    one(Op::Slice { axis: 1, start: 1, end: Dim::Static(3) }, &[&[2, 4]], false, "slice");
    one(Op::Slice { axis: 0, start: 0, end: Dim::Static(2) }, &[&[3, 2]], false, "slice prefix");
    one(Op::Concat { axis: 1 }, &[&[2, 1], &[2, 3]], false, "concat");
}

#[test]
fn reductions() {
    for r in ReduceOp::ALL {
        for (axes, keepdim) in [(vec![1], true), (vec![0, 2], false), (vec![0, 1, 2], false)] {
            let op = Op::Reduce { op: r, axes: axes.clone(), keepdim };
            one(op, &[&[2, 3, 2]], false, &format!("{} {axes:?} keepdim={keepdim}", r.name()));
        }
    }
}

#[test]
fn matmul_with_batch_broadcasting() {
    one(Op::MatMul, &[&[3, 4], &[4, 2]], false, "matmul 2d");
    one(Op::MatMul, &[&[2, 3, 4], &[4, 5]], false, "matmul batched @ 2d");
    one(Op::MatMul, &[&[1, 3, 4], &[2, 4, 5]], false, "matmul broadcast batch");
}

#[test]
fn gather_embeddings() {
    for axis in [0, 1] {
        let mut c = Case::new();
        let table = c.input(&[5, 3], false);
        let idx = c.g.input("idx", TensorType::new(DType::I64, Shape::of(&[2, 2]))).unwrap();
        c.feeds.insert("idx".into(), HostTensor::new(DType::I64, &[2, 2], vec![1.0, 2.0, 1.0, 0.0]).unwrap());
        let y = c.g.add(Op::Gather { axis }, &[table, idx], "").unwrap();
        c.check(y, &format!("gather axis {axis}"));
    }
}

#[test]
fn fused_cross_entropy() {
    // Rows of 4 classes, batch dims of rank 0, 1 and 2, logits spread wide enough that the
    // softmax is far from uniform; the targets (integers) get no gradient.
    for (dims, targets) in
        [(&[4][..], vec![2.0]), (&[3, 4], vec![0.0, 3.0, 1.0]), (&[2, 2, 4], vec![3.0, 0.0, 2.0, 2.0])]
    {
        let mut c = Case::new();
        let x = c.input(dims, false);
        let mut column = dims[..dims.len() - 1].to_vec();
        column.push(1);
        let t = c.g.input("t", TensorType::new(DType::I32, Shape::of(&column))).unwrap();
        c.feeds.insert("t".into(), HostTensor::new(DType::I32, &column, targets).unwrap());
        let logits = c.g.add(Op::Binary(BinaryOp::Mul), &[x, x], "").unwrap();
        let logits = c.g.add(Op::Binary(BinaryOp::Add), &[logits, x], "").unwrap();
        let y = c.g.add(Op::CrossEntropy, &[logits, t], "").unwrap();
        c.check(y, &format!("cross_entropy {dims:?}"));
    }
}

#[test]
fn fused_norms_softmax_and_activations() {
    one(Op::LayerNorm { eps: F64(1e-5) }, &[&[2, 3, 4], &[4], &[4]], false, "layer_norm");
    one(Op::LayerNorm { eps: F64(1e-5) }, &[&[3, 4]], false, "layer_norm without affine");
    one(Op::RmsNorm { eps: F64(1e-6) }, &[&[2, 4], &[4]], false, "rms_norm");
    one(Op::Softmax { axis: 1 }, &[&[2, 3, 4]], false, "softmax axis 1");
    one(Op::Softmax { axis: 2 }, &[&[2, 3, 4]], false, "softmax last axis");
    one(Op::Gelu { approx: GeluApprox::Erf }, &[&[2, 3]], false, "gelu erf");
    one(Op::Gelu { approx: GeluApprox::Tanh }, &[&[2, 3]], false, "gelu tanh");
    one(Op::Silu, &[&[2, 3]], false, "silu");
}

#[test]
fn fused_matmul_epilogues() {
    for act in Activation::ALL {
        one(Op::MatMulEpilogue { activation: act }, &[&[2, 3, 4], &[4, 5], &[5]], false, act.name());
    }
    one(Op::MatMulEpilogue { activation: Activation::Relu }, &[&[3, 4], &[4, 2]], false, "epilogue without bias");
}

/// Convolution (strided, padded, dilated, grouped, with and without bias), its fused
/// epilogue, the poolings and the im2col pair.
#[test]
fn sliding_window_ops() {
    let conv = |stride: [usize; 2], padding: [usize; 2], dilation: [usize; 2], groups| Op::Conv2d {
        stride: stride.to_vec(),
        padding: padding.to_vec(),
        dilation: dilation.to_vec(),
        groups,
    };
    one(conv([1, 1], [1, 1], [1, 1], 1), &[&[2, 3, 5, 4], &[4, 3, 3, 3], &[4]], false, "conv2d");
    one(conv([2, 1], [1, 0], [1, 2], 2), &[&[1, 4, 7, 6], &[6, 2, 3, 2]], false, "conv2d strided dilated grouped");
    one(conv([2, 2], [1, 1], [1, 1], 3), &[&[1, 3, 5, 5], &[3, 1, 3, 3]], false, "depthwise conv2d");
    let epilogue = Op::Conv2dEpilogue {
        stride: vec![1, 1],
        padding: vec![1, 1],
        dilation: vec![1, 1],
        groups: 1,
        activation: Activation::Tanh,
    };
    one(epilogue, &[&[1, 2, 4, 4], &[3, 2, 3, 3], &[3]], false, "conv2d_epilogue tanh");
    let pool = |max: bool, k: [usize; 2], s: [usize; 2], p: [usize; 2]| {
        let (kernel, stride, padding) = (k.to_vec(), s.to_vec(), p.to_vec());
        if max { Op::MaxPool2d { kernel, stride, padding } } else { Op::AvgPool2d { kernel, stride, padding } }
    };
    one(pool(true, [3, 3], [2, 2], [1, 1]), &[&[2, 2, 6, 5]], false, "max_pool2d");
    one(pool(true, [2, 2], [1, 1], [0, 0]), &[&[1, 2, 4, 4]], false, "overlapping max_pool2d");
    one(pool(false, [3, 2], [2, 1], [1, 1]), &[&[2, 2, 5, 4]], false, "avg_pool2d");
    let window = (vec![2, 3], vec![1, 2], vec![1, 0], vec![2, 1]);
    let unfold = Op::Unfold {
        kernel: window.0.clone(),
        stride: window.1.clone(),
        padding: window.2.clone(),
        dilation: window.3.clone(),
    };
    one(unfold, &[&[2, 2, 6, 5]], false, "unfold");
    let fold = Op::Fold { size: vec![6, 5], kernel: window.0, stride: window.1, padding: window.2, dilation: window.3 };
    one(fold, &[&[2, 12, 12]], false, "fold");
}

#[test]
fn fused_attention() {
    let q: &[usize] = &[2, 2, 3, 4];
    one(Op::Attention { scale: F64(0.5), causal: false }, &[q, q, q], false, "attention");
    one(Op::Attention { scale: F64(0.5), causal: true }, &[q, q, q], false, "causal attention");
    one(Op::Attention { scale: F64(0.5), causal: false }, &[q, q, q, &[2, 1, 1, 3]], false, "masked attention");
    // Grouped keys and values broadcast over the query heads; more keys than queries.
    one(
        Op::Attention { scale: F64(0.3), causal: true },
        &[&[1, 4, 2, 4], &[1, 1, 3, 4], &[1, 1, 3, 2]],
        false,
        "causal GQA attention",
    );
    // q = k = v: the fan-out is accumulated.
    let mut c = Case::new();
    let x = c.input(&[2, 3, 4], false);
    let y = c.g.add(Op::Attention { scale: F64(0.5), causal: true }, &[x, x, x], "").unwrap();
    c.check(y, "self-attention of one value");
}

#[test]
fn fused_elementwise_bodies() {
    let body = ElementwiseExpr {
        nodes: vec![
            ExprNode::Arg(0),
            ExprNode::Arg(1),
            ExprNode::Binary(BinaryOp::Mul, 0, 1),
            ExprNode::Unary(UnaryOp::Tanh, 2),
            ExprNode::Const { value: F64(0.5), dtype: DType::F64 },
            ExprNode::Binary(BinaryOp::Add, 3, 4),
            ExprNode::Unary(UnaryOp::Exp, 0),
            ExprNode::Binary(BinaryOp::Div, 5, 6),
        ],
    };
    one(Op::FusedElementwise { body }, &[&[2, 3], &[3]], false, "fused elementwise");
}

/// Fan-out, an unused parameter, and the errors that name what was wrong.
#[test]
fn fan_out_unused_sources_and_errors() {
    let mut c = Case::new();
    let a = c.input(&[3], false);
    let s = c.g.add(Op::Unary(UnaryOp::Sin), &[a], "").unwrap();
    let m = c.g.add(Op::Binary(BinaryOp::Mul), &[s, a], "").unwrap();
    let y = c.g.add(Op::Binary(BinaryOp::Add), &[m, s], "").unwrap();
    c.input(&[2], false); // unused: its gradient is zero
    c.check(y, "fan-out");

    let mut g = Graph::new("g");
    let x = g.input("x", ty(&[2])).unwrap();
    g.set_output("y", x).unwrap();
    assert!(grad(&g, "y", &["x".into()]).unwrap_err().to_string().contains("must be a float scalar"));
    assert!(grad(&g, "nope", &["x".into()]).unwrap_err().to_string().contains("no output \"nope\""));
    let s = g.add(Op::Reduce { op: ReduceOp::Sum, axes: vec![0], keepdim: false }, &[x], "").unwrap();
    g.set_output("s", s).unwrap();
    assert!(grad(&g, "s", &["w".into()]).unwrap_err().to_string().contains("\"w\" is not an input or parameter"));
}

/// Random shapes: rank 0 to 3 with dims 1 to 3, the second operand of a binary op broadcasting
/// (dims set to 1 and leading dims left out at random, on either side), axes and reductions
/// drawn at random, for every op family that has a gradient.
fn random_case(dims: &[usize], ones: u8, drop: usize, pick: u16) {
    let r = dims.len();
    let mut small: Vec<usize> =
        dims.iter().enumerate().map(|(k, &d)| if (ones >> k) & 1 == 1 { 1 } else { d }).collect();
    small.drain(..drop.min(r));
    let axis = (pick as usize / 16) % r.max(1);
    let last = dims.last().copied().unwrap_or(1);
    let what = format!("shape {dims:?}, other {small:?}, pick {pick}");
    match pick % 16 {
        0 | 1 => {
            let u = UnaryOp::ALL[pick as usize / 2 % UnaryOp::ALL.len()];
            let positive = matches!(u, UnaryOp::Log | UnaryOp::Sqrt | UnaryOp::Rsqrt | UnaryOp::Recip);
            one(Op::Unary(u), &[dims], positive, &format!("{} {what}", u.name()));
        }
        2..=4 => {
            let arithmetic: Vec<BinaryOp> = BinaryOp::ALL.into_iter().filter(|b| !b.is_comparison()).collect();
            let b = arithmetic[pick as usize / 4 % arithmetic.len()];
            let shapes: [&[usize]; 2] = if pick.is_multiple_of(2) { [dims, &small] } else { [&small, dims] };
            one(Op::Binary(b), &shapes, b == BinaryOp::Pow, &format!("{} {what}", b.name()));
        }
        5 if r > 0 => {
            let axes: Vec<usize> = (0..r).filter(|k| (ones >> (4 + k)) & 1 == 1).collect();
            let axes = if axes.is_empty() { vec![axis] } else { axes };
            let op = ReduceOp::ALL[pick as usize / 32 % 4];
            one(Op::Reduce { op, axes, keepdim: ones & 1 == 0 }, &[dims], false, &format!("{} {what}", op.name()));
        }
        6 if r > 0 => one(Op::Softmax { axis }, &[dims], false, &format!("softmax {what}")),
        7 if r > 0 => {
            one(Op::LayerNorm { eps: F64(1e-5) }, &[dims, &[last], &[last]], false, &format!("layer_norm {what}"))
        }
        8 if r > 0 => one(Op::RmsNorm { eps: F64(1e-6) }, &[dims, &[last]], false, &format!("rms_norm {what}")),
        9 => {
            let approx = if pick.is_multiple_of(2) { GeluApprox::Erf } else { GeluApprox::Tanh };
            one(Op::Gelu { approx }, &[dims], false, &format!("gelu {what}"));
        }
        10 => one(Op::Silu, &[dims], false, &format!("silu {what}")),
        11 => one(Op::Permute { perm: (0..r).rev().collect() }, &[dims], false, &format!("permute {what}")),
        12 if r >= 2 => {
            // b[..., k, 2] with the batch dims of the broadcasting operand.
            let batch = &small[..small.len().saturating_sub(2)];
            let mut b = batch.to_vec();
            b.extend([last, 2]);
            one(Op::MatMul, &[dims, &b], false, &format!("matmul {what}, b {b:?}"));
        }
        13 if r >= 2 => {
            let act = Activation::ALL[pick as usize / 16 % Activation::ALL.len()];
            let b = [last, 3];
            one(Op::MatMulEpilogue { activation: act }, &[dims, &b, &[3]], false, &format!("{} {what}", act.name()));
        }
        14 if r >= 2 => {
            let causal = pick.is_multiple_of(2);
            let op = Op::Attention { scale: F64(0.7), causal };
            one(op, &[dims, dims, dims], false, &format!("attention causal={causal} {what}"));
        }
        15 if r > 0 => {
            let mut c = Case::new();
            let x = c.input(dims, false);
            let mut column = dims[..r - 1].to_vec();
            column.push(1);
            let n: usize = column.iter().product();
            let t = c.g.input("t", TensorType::new(DType::I64, Shape::of(&column))).unwrap();
            let labels = (0..n).map(|k| ((k * 7 + pick as usize) % last) as f64).collect();
            c.feeds.insert("t".into(), HostTensor::new(DType::I64, &column, labels).unwrap());
            let y = c.g.add(Op::CrossEntropy, &[x, t], "").unwrap();
            c.check(y, &format!("cross_entropy {what}"));
        }
        _ => one(Op::Unary(UnaryOp::Tanh), &[dims], false, &format!("tanh {what}")),
    }
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig {
        cases: 128,
        failure_persistence: None,
        ..proptest::prelude::ProptestConfig::default()
    })]

    #[test]
    fn random_shapes_and_broadcasting(
        dims in proptest::collection::vec(1usize..4, 0..4),
        ones in proptest::prelude::any::<u8>(),
        drop in 0usize..4,
        pick in proptest::prelude::any::<u16>(),
    ) {
        random_case(&dims, ones, drop, pick);
    }
}

/// An embedding looked up by a batch of symbolic size: the table's gradient sums each
/// looked-up row's adjoint into its id's row, checked against that sum written out by hand,
/// for two batch sizes of one graph.
#[test]
fn gather_with_a_symbolic_batch_of_ids() {
    let mut g = Graph::new("embed");
    let table = g.input("table", ty(&[5, 4])).unwrap();
    let idx = g.input("idx", TensorType::new(DType::I64, Shape(vec![Dim::sym("batch"), Dim::Static(3)]))).unwrap();
    let w = g
        .input("w", TensorType::new(DType::F64, Shape(vec![Dim::sym("batch"), Dim::Static(3), Dim::Static(4)])))
        .unwrap();
    let y = g.add(Op::Gather { axis: 0 }, &[table, idx], "").unwrap();
    let p = g.add(Op::Binary(BinaryOp::Mul), &[y, w], "").unwrap();
    let loss = g.add(Op::Reduce { op: ReduceOp::Sum, axes: vec![0, 1, 2], keepdim: false }, &[p], "").unwrap();
    g.set_output("loss", loss).unwrap();
    let d = grad(&g, "loss", &["table".to_string()]).unwrap();
    for batch in [2usize, 3] {
        let ids: Vec<f64> = (0..batch * 3).map(|i| ((i * 7 + 1) % 5) as f64).collect();
        let wv = values(5, batch * 12, false);
        let feeds: HashMap<String, HostTensor> = [
            ("table".to_string(), HostTensor::new(DType::F64, &[5, 4], values(3, 20, false)).unwrap()),
            ("idx".to_string(), HostTensor::new(DType::I64, &[batch, 3], ids.clone()).unwrap()),
            ("w".to_string(), HostTensor::new(DType::F64, &[batch, 3, 4], wv.clone()).unwrap()),
        ]
        .into();
        let out = evaluate(&d, &feeds).unwrap();
        let got = out.iter().find(|(n, _)| *n == grad_output_name("table")).unwrap().1.to_vec();
        let mut want = vec![0.0; 20];
        for (k, &id) in ids.iter().enumerate() {
            for c in 0..4 {
                want[id as usize * 4 + c] += wv[k * 4 + c];
            }
        }
        for (a, b) in got.iter().zip(&want) {
            assert!((a - b).abs() <= 1e-12, "batch {batch}: {got:?} against {want:?}");
        }
    }
}
