//! Fused ops written out as the primitives they mean (the definitions in `ir/src/op.rs`), so
//! their gradients are the primitives' gradients. The forward values are recomputed in the
//! backward graph; CSE and fusion at O2 share and fuse them again.

use super::build::{Builder, R};
use super::{GradError, backprop};
use rustral_ir::{
    Activation, BinaryOp, Dim, ExprNode, GeluApprox, Graph, NodeId, Op, ReduceOp, Shape, TensorType, UnaryOp,
};

/// The adjoints of a fused node's operands.
pub(crate) fn vjp(
    g: &mut Graph,
    id: NodeId,
    op: &Op,
    xs: &[NodeId],
    dy: NodeId,
    wanted: &[bool],
) -> Result<Vec<Option<NodeId>>, GradError> {
    let prov = g.node(id).expect("a node").provenance.clone();
    let out_shape = g.node(id).expect("a node").ty.shape.clone();
    if let Op::Softmax { axis } = op {
        // y (dy - sum(dy y)): the max subtracted for stability has no gradient, so the
        // expansion's max (and its masks) is not needed.
        let mut b = Builder::new(g, &prov, id);
        let r: R<NodeId> = (|| {
            let t = b.mul(dy, id)?;
            let s = b.sum(t, vec![*axis], true)?;
            let d = b.bin(BinaryOp::Sub, dy, s)?;
            b.mul(id, d)
        })();
        return Ok(vec![Some(r.map_err(|e| b.ir_error(e))?)]);
    }
    if *op == Op::CrossEntropy {
        // (softmax(x) - onehot(t)) dy: no log-softmax kept, no exponential that overflows.
        // The targets are integers and have no adjoint.
        let mut b = Builder::new(g, &prov, id);
        let r: R<NodeId> = (|| {
            let x = b.ty(xs[0]);
            let last = x.rank() - 1;
            let p = b.op(Op::Softmax { axis: last }, &[xs[0]])?;
            let classes = b.declare(Op::Iota { axis: last }, TensorType::new(b.ty(xs[1]).dtype, x.shape.clone()))?;
            let hot = b.mask(BinaryOp::Eq, classes, xs[1], x.dtype)?;
            let d = b.bin(BinaryOp::Sub, p, hot)?;
            let column = b.reshape(dy, Builder::with_dim(&x.shape, last, Dim::Static(1)))?;
            b.mul(d, column)
        })();
        let dx = r.map_err(|e| b.ir_error(e))?;
        return Ok(vec![wanted[0].then_some(dx), None]);
    }
    let (root, created) = {
        let mut b = Builder::new(g, &prov, id);
        match expand(&mut b, op, xs, &out_shape) {
            Ok(Some(r)) => (r, b.created),
            Ok(None) => return Err(b.unsupported("no expansion into primitives")),
            Err(e) => return Err(b.ir_error(e)),
        }
    };
    if let Some(k) = xs.iter().position(|&x| x == root) {
        // The body is one of its operands: the adjoint passes straight through.
        let mut b = Builder::new(g, &prov, id);
        let d = b.unbroadcast(dy, &b.ty(root).shape).map_err(|e| b.ir_error(e))?;
        return Ok((0..xs.len()).map(|j| (j == k && wanted[j]).then_some(d)).collect());
    }
    // The operands, then the expansion in creation order: a topological order.
    let mut order: Vec<NodeId> = Vec::new();
    for &x in xs.iter().chain(&created) {
        if !order.contains(&x) {
            order.push(x);
        }
    }
    let targets: Vec<NodeId> = xs.iter().zip(wanted).filter(|(_, w)| **w).map(|(x, _)| *x).collect();
    let adjoints = backprop(g, &order, root, dy, &targets)?;
    // An operand used twice (attention's q = k = v) gets its total once, on its first slot.
    let mut seen = Vec::new();
    Ok(xs
        .iter()
        .zip(wanted)
        .map(|(x, w)| {
            let first = !seen.contains(x);
            seen.push(*x);
            (*w && first).then(|| adjoints.get(x).copied()).flatten()
        })
        .collect())
}

fn expand(b: &mut Builder, op: &Op, xs: &[NodeId], out_shape: &Shape) -> R<Option<NodeId>> {
    let dtype = b.ty(xs[0]).dtype;
    Ok(Some(match op {
        Op::LayerNorm { eps } | Op::RmsNorm { eps } => {
            let center = matches!(op, Op::LayerNorm { .. });
            let last = vec![b.ty(xs[0]).rank() - 1];
            let mean =
                |b: &mut Builder, x| b.op(Op::Reduce { op: ReduceOp::Mean, axes: last.clone(), keepdim: true }, &[x]);
            let xc = if center {
                let m = mean(b, xs[0])?;
                b.bin(BinaryOp::Sub, xs[0], m)?
            } else {
                xs[0]
            };
            let sq = b.mul(xc, xc)?;
            let var = mean(b, sq)?;
            let e = b.scalar(eps.0, dtype)?;
            let ve = b.bin(BinaryOp::Add, var, e)?;
            let inv = b.un(UnaryOp::Rsqrt, ve)?;
            let mut y = b.mul(xc, inv)?;
            if let Some(&gamma) = xs.get(1) {
                y = b.mul(y, gamma)?;
            }
            if let Some(&beta) = xs.get(2) {
                y = b.bin(BinaryOp::Add, y, beta)?;
            }
            y
        }
        Op::Softmax { axis } => {
            let m = b.op(Op::Reduce { op: ReduceOp::Max, axes: vec![*axis], keepdim: true }, &[xs[0]])?;
            let d = b.bin(BinaryOp::Sub, xs[0], m)?;
            let e = b.un(UnaryOp::Exp, d)?;
            let s = b.sum(e, vec![*axis], true)?;
            b.bin(BinaryOp::Div, e, s)?
        }
        Op::Gelu { approx } => gelu(b, *approx, xs[0])?,
        Op::Silu => {
            let s = b.un(UnaryOp::Sigmoid, xs[0])?;
            b.mul(xs[0], s)?
        }
        Op::Conv2dEpilogue { activation, .. } => {
            let Some(conv) = op.conv2d_part() else { return Ok(None) };
            let z = b.op(conv, xs)?;
            activate(b, *activation, z)?
        }
        Op::MatMulEpilogue { activation } => {
            let mut z = b.op(Op::MatMul, &xs[..2])?;
            if let Some(&bias) = xs.get(2) {
                z = b.bin(BinaryOp::Add, z, bias)?;
            }
            activate(b, *activation, z)?
        }
        Op::Attention { scale, causal } => {
            let kt = b.transpose(xs[1])?;
            let s = b.op(Op::MatMul, &[xs[0], kt])?;
            let mut s = b.scale(s, scale.0)?;
            if let Some(&mask) = xs.get(3) {
                s = b.bin(BinaryOp::Add, s, mask)?;
            }
            if *causal {
                let st = b.ty(s);
                let r = st.rank();
                let (lq, lk) = (st.shape.0[r - 2].clone(), st.shape.0[r - 1].clone());
                let offset = match (&lq, &lk) {
                    (Dim::Static(q), Dim::Static(k)) => *k as f64 - *q as f64,
                    (q, k) if q == k => 0.0,
                    _ => return Ok(None),
                };
                let grid = TensorType::new(dtype, Shape(vec![lq, lk]));
                let i = b.declare(Op::Iota { axis: 0 }, grid.clone())?;
                let j = b.declare(Op::Iota { axis: 1 }, grid)?;
                let off = b.scalar(offset, dtype)?;
                let limit = b.bin(BinaryOp::Add, i, off)?;
                let visible = b.bin(BinaryOp::Le, j, limit)?;
                // An additive mask of 0 and -inf, made from constants alone (so targets make
                // it once, and the scores' gradient needs no `where`).
                let zero = b.scalar(0.0, dtype)?;
                let hidden = b.scalar(f64::NEG_INFINITY, dtype)?;
                let causal_mask = b.op(Op::Where, &[visible, zero, hidden])?;
                s = b.bin(BinaryOp::Add, s, causal_mask)?;
            }
            let r = b.ty(s).rank();
            let p = b.op(Op::Softmax { axis: r - 1 }, &[s])?;
            b.op(Op::MatMul, &[p, xs[2]])?
        }
        Op::FusedElementwise { body } => {
            let mut vals: Vec<NodeId> = Vec::with_capacity(body.nodes.len());
            for n in &body.nodes {
                let v = match n {
                    ExprNode::Arg(i) => xs[*i],
                    ExprNode::Const { value, dtype } => b.scalar(value.0, *dtype)?,
                    ExprNode::Unary(u, x) => b.un(*u, vals[*x])?,
                    ExprNode::Binary(op, x, y) => b.bin(*op, vals[*x], vals[*y])?,
                    ExprNode::Where(c, x, y) => b.op(Op::Where, &[vals[*c], vals[*x], vals[*y]])?,
                    ExprNode::Cast(to, x) => b.op(Op::Cast { to: *to }, &[vals[*x]])?,
                };
                vals.push(v);
            }
            let Some(&root) = vals.last() else { return Ok(None) };
            if &b.ty(root).shape != out_shape && !xs.contains(&root) { b.broadcast(root, out_shape)? } else { root }
        }
        _ => return Ok(None),
    }))
}

fn gelu(b: &mut Builder, approx: GeluApprox, x: NodeId) -> R<NodeId> {
    let inner = match approx {
        GeluApprox::Erf => {
            let t = b.scale(x, std::f64::consts::FRAC_1_SQRT_2)?;
            b.un(UnaryOp::Erf, t)?
        }
        GeluApprox::Tanh => {
            let xx = b.mul(x, x)?;
            let x3 = b.mul(xx, x)?;
            let c = b.scale(x3, 0.044715)?;
            let s = b.bin(BinaryOp::Add, x, c)?;
            let t = b.scale(s, (2.0 / std::f64::consts::PI).sqrt())?;
            b.un(UnaryOp::Tanh, t)?
        }
    };
    let one = b.scalar(1.0, b.ty(x).dtype)?;
    let t = b.bin(BinaryOp::Add, one, inner)?;
    let h = b.scale(x, 0.5)?;
    b.mul(h, t)
}

/// `act(z)` as the primitive (or fused activation) op it names.
fn activate(b: &mut Builder, act: Activation, z: NodeId) -> R<NodeId> {
    Ok(match act {
        Activation::None => z,
        Activation::Relu => b.un(UnaryOp::Relu, z)?,
        Activation::GeluErf => b.op(Op::Gelu { approx: GeluApprox::Erf }, &[z])?,
        Activation::GeluTanh => b.op(Op::Gelu { approx: GeluApprox::Tanh }, &[z])?,
        Activation::Silu => b.op(Op::Silu, &[z])?,
        Activation::Tanh => b.un(UnaryOp::Tanh, z)?,
        Activation::Sigmoid => b.un(UnaryOp::Sigmoid, z)?,
    })
}
