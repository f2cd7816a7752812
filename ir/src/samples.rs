//! Small hand-built graphs that show the IR's shape: used by the README, the quickstart
//! example, snapshot tests and the interpreter's tests. They are built op by op, as the
//! frontend will trace them, so the primitive spellings that fusion must recognise appear.

use crate::{BinaryOp, DType, Dim, F64, Graph, IrError, Literal, NodeId, Op, ReduceOp, Shape, TensorType, UnaryOp};

fn f32_ty(dims: &[Dim]) -> TensorType {
    TensorType::new(DType::F32, dims.to_vec())
}

fn bin(g: &mut Graph, op: BinaryOp, a: NodeId, b: NodeId, prov: &str) -> Result<NodeId, IrError> {
    g.add(Op::Binary(op), &[a, b], prov)
}

fn scalar(g: &mut Graph, v: f64, prov: &str) -> Result<NodeId, IrError> {
    g.declare(Op::Constant { value: Literal::Splat(F64(v)) }, f32_ty(&[]), prov)
}

/// `x @ w + b` with parameters named `{prov}.weight` and `{prov}.bias`.
fn linear(g: &mut Graph, x: NodeId, din: usize, dout: usize, prov: &str) -> Result<NodeId, IrError> {
    let w = g.param(&format!("{prov}.weight"), f32_ty(&[din.into(), dout.into()]), prov)?;
    let b = g.param(&format!("{prov}.bias"), f32_ty(&[dout.into()]), prov)?;
    let xw = g.add(Op::MatMul, &[x, w], prov)?;
    bin(g, BinaryOp::Add, xw, b, prov)
}

/// A two-layer perceptron: `relu(x @ w1 + b1) @ w2 + b2`, x of shape `[batch, 8]`.
pub fn mlp() -> Result<Graph, IrError> {
    let mut g = Graph::new("mlp");
    let x = g.input("x", f32_ty(&[Dim::sym("batch"), 8.into()]))?;
    let h = linear(&mut g, x, 8, 16, "fc1")?;
    let h = g.add(Op::Unary(UnaryOp::Relu), &[h], "fc1")?;
    let y = linear(&mut g, h, 16, 4, "fc2")?;
    g.set_output("logits", y)?;
    Ok(g)
}

/// LayerNorm over the last axis written from primitives, as model code writes it:
/// `(x - mean) * rsqrt(mean((x - mean)^2) + eps) * gamma + beta`, x of shape `[batch, seq, 32]`.
pub fn layer_norm_primitives() -> Result<Graph, IrError> {
    let mut g = Graph::new("layer_norm");
    let x = g.input("x", f32_ty(&[Dim::sym("batch"), Dim::sym("seq"), 32.into()]))?;
    let y = layer_norm(&mut g, x, 32, "ln")?;
    g.set_output("y", y)?;
    Ok(g)
}

fn layer_norm(g: &mut Graph, x: NodeId, d: usize, prov: &str) -> Result<NodeId, IrError> {
    let last = g.node(x).map_or(0, |n| n.ty.rank() - 1);
    let mean_op = || Op::Reduce { op: ReduceOp::Mean, axes: vec![last], keepdim: true };
    let mean = g.add(mean_op(), &[x], prov)?;
    let xc = bin(g, BinaryOp::Sub, x, mean, prov)?;
    let sq = bin(g, BinaryOp::Mul, xc, xc, prov)?;
    let var = g.add(mean_op(), &[sq], prov)?;
    let eps = scalar(g, 1e-5, prov)?;
    let var_eps = bin(g, BinaryOp::Add, var, eps, prov)?;
    let inv = g.add(Op::Unary(UnaryOp::Rsqrt), &[var_eps], prov)?;
    let normed = bin(g, BinaryOp::Mul, xc, inv, prov)?;
    let gamma = g.param(&format!("{prov}.weight"), f32_ty(&[d.into()]), prov)?;
    let beta = g.param(&format!("{prov}.bias"), f32_ty(&[d.into()]), prov)?;
    let scaled = bin(g, BinaryOp::Mul, normed, gamma, prov)?;
    bin(g, BinaryOp::Add, scaled, beta, prov)
}

/// BERT-style multi-head self-attention (4 heads of 8 over a width of 32) with an additive
/// padding mask, written from primitives: projections, head reshape/permute, scaled scores,
/// max-subtracted softmax, context, output projection.
pub fn attention_block() -> Result<Graph, IrError> {
    let (heads, head_dim, width) = (4usize, 8usize, 32usize);
    let (batch, seq) = (Dim::sym("batch"), Dim::sym("seq"));
    let mut g = Graph::new("attention");
    let x = g.input("x", f32_ty(&[batch.clone(), seq.clone(), width.into()]))?;
    let mask = g.input("mask", f32_ty(&[batch.clone(), 1.into(), 1.into(), seq.clone()]))?;
    let split = Shape(vec![batch.clone(), seq.clone(), heads.into(), head_dim.into()]);
    let project = |g: &mut Graph, name: &str, key_layout: bool| -> Result<NodeId, IrError> {
        let prov = format!("attention.self.{name}");
        let y = linear(g, x, width, width, &prov)?;
        let y = g.add(Op::Reshape { shape: split.clone() }, &[y], &prov)?;
        let perm = if key_layout { vec![0, 2, 3, 1] } else { vec![0, 2, 1, 3] };
        g.add(Op::Permute { perm }, &[y], &prov)
    };
    let q = project(&mut g, "query", false)?;
    let kt = project(&mut g, "key", true)?;
    let v = project(&mut g, "value", false)?;
    let prov = "attention.self";
    let scores = g.add(Op::MatMul, &[q, kt], prov)?;
    let scale = scalar(&mut g, 1.0 / (head_dim as f64).sqrt(), prov)?;
    let scores = bin(&mut g, BinaryOp::Mul, scores, scale, prov)?;
    let scores = bin(&mut g, BinaryOp::Add, scores, mask, prov)?;
    let probs = softmax_last(&mut g, scores, &format!("{prov}.softmax"))?;
    let ctx = g.add(Op::MatMul, &[probs, v], prov)?;
    let ctx = g.add(Op::Permute { perm: vec![0, 2, 1, 3] }, &[ctx], prov)?;
    let ctx = g.add(Op::Reshape { shape: Shape(vec![batch, seq, width.into()]) }, &[ctx], prov)?;
    let out = linear(&mut g, ctx, width, width, "attention.output.dense")?;
    g.set_output("y", out)?;
    Ok(g)
}

/// `exp(x - max) / sum(exp(x - max))` over the last axis.
fn softmax_last(g: &mut Graph, x: NodeId, prov: &str) -> Result<NodeId, IrError> {
    let last = g.node(x).map_or(0, |n| n.ty.rank() - 1);
    let max = g.add(Op::Reduce { op: ReduceOp::Max, axes: vec![last], keepdim: true }, &[x], prov)?;
    let shifted = bin(g, BinaryOp::Sub, x, max, prov)?;
    let e = g.add(Op::Unary(UnaryOp::Exp), &[shifted], prov)?;
    let sum = g.add(Op::Reduce { op: ReduceOp::Sum, axes: vec![last], keepdim: true }, &[e], prov)?;
    bin(g, BinaryOp::Div, e, sum, prov)
}
