//! Proptest strategies for random well-typed graphs (feature `proptest`).
//!
//! A graph is grown from a random recipe: each step picks an op family and earlier nodes as
//! operands and asks `Graph::add` to type it; steps that do not type are skipped. Every graph
//! therefore verifies, and over many cases every op, attribute and awkward literal (NaN, -0.0,
//! infinities, names needing escapes) appears. Gather indices come from `iota`, so graphs also
//! evaluate without data-dependent errors.

use crate::{
    Activation, BinaryOp, DType, Dim, ElementwiseExpr, ExprNode, F64, GeluApprox, Graph, Literal, NodeId, Op, ReduceOp,
    Shape, TensorType, UnaryOp,
};
use proptest::prelude::*;

/// One step of a recipe: an op family and raw choices interpreted modulo what is available.
#[derive(Clone, Debug)]
pub struct Step {
    kind: u8,
    picks: [usize; 4],
    value: f64,
}

const PROVENANCES: [&str; 5] = ["", "encoder.layer.0", "decoder.block.1.mlp", "has space", "quote\"d"];
const NAMES: [&str; 4] = ["x", "tokens", "weird \"name\"", "ünï\ncode"];
const DIMS: [&str; 2] = ["batch", "seq"];
const VALUES: [f64; 9] = [0.0, -0.0, 1.0, -2.5, 0.125, 1e-5, f64::INFINITY, f64::NEG_INFINITY, f64::NAN];

fn arb_dim() -> impl Strategy<Value = Dim> {
    prop_oneof![
        3 => (1usize..4).prop_map(Dim::Static),
        1 => (0usize..DIMS.len()).prop_map(|i| Dim::sym(DIMS[i])),
    ]
}

fn arb_value() -> impl Strategy<Value = f64> {
    prop_oneof![3 => -4.0f64..4.0, 1 => (0usize..VALUES.len()).prop_map(|i| VALUES[i])]
}

fn arb_step() -> impl Strategy<Value = Step> {
    (any::<u8>(), any::<[usize; 4]>(), arb_value()).prop_map(|(kind, picks, value)| Step { kind, picks, value })
}

/// Random well-typed graphs of up to `max_steps` grown nodes over 1 to 3 f32 inputs.
pub fn arb_graph(max_steps: usize) -> impl Strategy<Value = Graph> {
    let inputs = prop::collection::vec(prop::collection::vec(arb_dim(), 0..4), 1..4);
    (inputs, prop::collection::vec(arb_step(), 1..max_steps.max(2))).prop_map(|(shapes, steps)| build(&shapes, &steps))
}

fn build(shapes: &[Vec<Dim>], steps: &[Step]) -> Graph {
    let mut g = Graph::new("random");
    let mut nodes: Vec<NodeId> = Vec::new();
    for (i, dims) in shapes.iter().enumerate() {
        let name = if i == 0 { "x".to_string() } else { format!("{}{i}", NAMES[i % NAMES.len()]) };
        let id = g.input(&name, TensorType::new(DType::F32, dims.clone())).expect("inputs with fresh names type");
        nodes.push(id);
    }
    for (i, s) in steps.iter().enumerate() {
        let pick = |k: usize| nodes[s.picks[k] % nodes.len()];
        let prov = PROVENANCES[s.picks[3] % PROVENANCES.len()];
        if let Some(id) = grow(&mut g, s, i, pick(0), pick(1), pick(2), prov) {
            nodes.push(id);
        }
    }
    let last = *nodes.last().expect("at least one input");
    g.set_output("out", last).expect("fresh output name");
    if nodes.len() > 2 {
        let _ = g.set_output("side \"out\"", nodes[nodes.len() / 2]);
    }
    g
}

/// Try one step; None when the chosen op does not type on the chosen operands.
fn grow(g: &mut Graph, s: &Step, i: usize, a: NodeId, b: NodeId, c: NodeId, prov: &str) -> Option<NodeId> {
    let ty = |id: NodeId| g.node(id).map(|n| n.ty.clone()).expect("picked node exists");
    let (ta, tb) = (ty(a), ty(b));
    let p = s.picks;
    let axis = |t: &TensorType| if t.rank() == 0 { 0 } else { p[1] % t.rank() };
    let f = F64(s.value);
    let op = match s.kind % 27 {
        0 => Op::Unary(UnaryOp::ALL[p[1] % UnaryOp::ALL.len()]),
        1 | 2 => Op::Binary(BinaryOp::ALL[p[1] % BinaryOp::ALL.len()]),
        3 => return g.add(Op::Where, &[a, b, c], prov).ok(),
        4 => Op::Cast { to: DType::ALL[p[1] % DType::ALL.len()] },
        5 => {
            let axes: Vec<usize> = (0..ta.rank()).filter(|k| (p[1] >> k) & 1 == 1).collect();
            Op::Reduce { op: ReduceOp::ALL[p[2] % 4], axes, keepdim: p[2] & 4 == 0 }
        }
        6 => Op::MatMul,
        7 => Op::Reshape { shape: flatten_last_two(&ta.shape) },
        8 => Op::Permute { perm: (0..ta.rank()).rev().collect() },
        9 => {
            let mut dims = vec![Dim::Static(2)];
            dims.extend(ta.shape.0.iter().cloned());
            Op::BroadcastTo { shape: Shape(dims) }
        }
        10 => {
            let ax = axis(&ta);
            let d = ta.shape.0.get(ax)?.as_static()?;
            Op::Slice { axis: ax, start: p[2] % (d + 1), end: Dim::Static(d) }
        }
        11 => return g.add(Op::Concat { axis: axis(&ta) }, &[a, a], prov).ok(),
        12 => {
            let ax = axis(&ta);
            let n = ta.shape.0.get(ax)?.as_static()?;
            let idx =
                g.declare(Op::Iota { axis: 0 }, TensorType::new(DType::I64, vec![Dim::Static(n.min(2))]), prov).ok()?;
            return g.add(Op::Gather { axis: ax }, &[a, idx], prov).ok();
        }
        13 => {
            let dims = ta.shape.clone();
            let dtype = if p[2].is_multiple_of(2) { DType::I32 } else { DType::F32 };
            return g.declare(Op::Iota { axis: axis(&ta) }, TensorType::new(dtype, dims), prov).ok();
        }
        14 => {
            let value = match ta.shape.static_numel() {
                Some(n) if n <= 8 && p[2].is_multiple_of(2) => {
                    Literal::Dense((0..n).map(|k| F64(s.value + k as f64)).collect())
                }
                _ => Literal::Splat(f),
            };
            return g.declare(Op::Constant { value }, ta, prov).ok();
        }
        15 => {
            let name = format!("{}{i}", NAMES[p[2] % NAMES.len()]);
            return g.param(&name, ta, prov).ok();
        }
        16 => return norm(g, a, p[2].is_multiple_of(2), prov),
        17 => Op::Softmax { axis: axis(&ta) },
        18 => Op::Gelu { approx: if p[1].is_multiple_of(2) { GeluApprox::Erf } else { GeluApprox::Tanh } },
        19 => Op::Silu,
        20 => return attention(g, a, b, p, prov),
        21 => {
            let act = Activation::ALL[p[1] % Activation::ALL.len()];
            let bias = tb.shape.0.last().cloned().map(|d| vec![d]);
            let operands = [a, b];
            let bias_node =
                bias.and_then(|dims| g.param(&format!("bias{i}"), TensorType::new(tb.dtype, dims), prov).ok());
            return match bias_node.filter(|_| p[2].is_multiple_of(2)) {
                Some(bn) => g.add(Op::MatMulEpilogue { activation: act }, &[a, b, bn], prov).ok(),
                None => g.add(Op::MatMulEpilogue { activation: act }, &operands, prov).ok(),
            };
        }
        22 => return g.add(Op::FusedElementwise { body: random_body(p, f) }, &[a, b], prov).ok(),
        23 => Op::Reshape { shape: ta.shape.clone() },
        24 => {
            let op = Op::RandomUniform { seed: p[2] as u32 };
            let ty = TensorType::new(DType::F32, ta.shape.0.clone());
            if p[1].is_multiple_of(2) {
                return g.declare(op, ty, prov).ok();
            }
            // A step: a constant here (a graph input in training).
            let value = Literal::Splat(F64((p[1] % 5) as f64));
            let step = g.declare(Op::Constant { value }, TensorType::new(DType::I64, Shape::scalar()), prov).ok()?;
            return g.declare_with(op, &[step], ty, prov).ok();
        }
        25 => return cross_entropy(g, a, p, prov),
        _ => Op::Binary(BinaryOp::ALL[p[2] % 7]),
    };
    match op.arity().0 {
        1 => g.add(op, &[a], prov).ok(),
        _ => g.add(op, &[a, b], prov).ok(),
    }
}

fn flatten_last_two(s: &Shape) -> Shape {
    let r = s.rank();
    if r < 2 {
        return s.clone();
    }
    match (s.0[r - 2].as_static(), s.0[r - 1].as_static()) {
        (Some(x), Some(y)) => {
            let mut dims = s.0[..r - 2].to_vec();
            dims.push(Dim::Static(x * y));
            Shape(dims)
        }
        _ => s.clone(),
    }
}

fn norm(g: &mut Graph, x: NodeId, layer: bool, prov: &str) -> Option<NodeId> {
    let t = g.node(x)?.ty.clone();
    let last = t.shape.0.last()?.clone();
    let pty = TensorType::new(t.dtype, vec![last]);
    let k = g.len();
    let gamma = g.param(&format!("gamma{k}"), pty.clone(), prov).ok()?;
    if layer {
        let beta = g.param(&format!("beta{k}"), pty, prov).ok()?;
        g.add(Op::LayerNorm { eps: F64(1e-5) }, &[x, gamma, beta], prov).ok()
    } else {
        g.add(Op::RmsNorm { eps: F64(1e-6) }, &[x, gamma], prov).ok()
    }
}

/// Cross-entropy of `x` (rank >= 1, static classes) against one class for every row.
fn cross_entropy(g: &mut Graph, x: NodeId, p: [usize; 4], prov: &str) -> Option<NodeId> {
    let t = g.node(x)?.ty.clone();
    let (last, rows) = t.shape.0.split_last()?;
    let classes = last.as_static().filter(|&c| c > 0)?;
    let mut column = rows.to_vec();
    column.push(Dim::Static(1));
    let dtype = if p[1].is_multiple_of(2) { DType::I64 } else { DType::I32 };
    let value = Literal::Splat(F64((p[2] % classes) as f64));
    let targets = g.declare(Op::Constant { value }, TensorType::new(dtype, column), prov).ok()?;
    g.add(Op::CrossEntropy, &[x, targets], prov).ok()
}

/// Self-attention of a rank >= 2 value with itself (q = k = v), optionally causal and masked.
fn attention(g: &mut Graph, x: NodeId, m: NodeId, p: [usize; 4], prov: &str) -> Option<NodeId> {
    let op = Op::Attention { scale: F64(0.5), causal: p[1].is_multiple_of(2) };
    if p[2].is_multiple_of(2) { g.add(op, &[x, x, x, m], prov).ok() } else { g.add(op, &[x, x, x], prov).ok() }
}

fn random_body(p: [usize; 4], f: F64) -> ElementwiseExpr {
    let u = UnaryOp::ALL[p[1] % UnaryOp::ALL.len()];
    let b = BinaryOp::ALL[p[2] % 7];
    let mut nodes = vec![
        ExprNode::Arg(0),
        ExprNode::Arg(1),
        ExprNode::Binary(b, 0, 1),
        ExprNode::Const { value: f, dtype: DType::F32 },
        ExprNode::Binary(BinaryOp::Mul, 2, 3),
        ExprNode::Unary(u, 4),
    ];
    if p[3].is_multiple_of(2) {
        nodes.push(ExprNode::Binary(BinaryOp::Gt, 5, 0));
        nodes.push(ExprNode::Where(6, 5, 1));
        nodes.push(ExprNode::Cast(DType::F16, 7));
    }
    ElementwiseExpr { nodes }
}
