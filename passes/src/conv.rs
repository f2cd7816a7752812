//! Convolution passes. Batch norm at inference is a per-channel affine map of the
//! convolution before it (`(y - mean) * inv * gamma + beta`), so it folds into that
//! convolution's weights and bias: `conv(x, w) * s + t = conv(x, w * s) + t`. The fold is a
//! parameter transform (the new weights are computed from parameters alone: once per bind on
//! the WGSL target, as a tiny elementwise kernel on the CPU), counted in the statistics'
//! `rules` as `affine-into-conv`. Then an activation of a convolution becomes one
//! `conv2d_epilogue` kernel that applies it while the output is hot.

use crate::cleanup::bump;
use crate::contract::{Contract, cut};
use crate::manager::Pass;
use crate::stats::PassStats;
use rustral_ir::{Activation, BinaryOp, Dim, Graph, NodeId, Op, Shape, UnaryOp};
use std::collections::{HashMap, HashSet};

/// Fold per-channel affine ops after a convolution into its weights and bias.
pub struct FoldBatchNorm;

/// Fold a convolution's activation into a `conv2d_epilogue`.
pub struct FuseConvEpilogue;

/// Whether `n` is computed from parameters and constants alone (its value is fixed once the
/// parameters are bound), remembered in `memo`.
fn fixed(g: &Graph, n: NodeId, memo: &mut HashMap<NodeId, bool>) -> bool {
    if let Some(&v) = memo.get(&n) {
        return v;
    }
    let v = match g.node(n).map(|node| &node.op) {
        Some(Op::Param { .. } | Op::Constant { .. } | Op::Iota { .. }) => true,
        Some(Op::Input { .. } | Op::RandomUniform { .. }) | None => false,
        Some(_) => g.operands(n).into_iter().all(|o| fixed(g, o, memo)),
    };
    memo.insert(n, v);
    v
}

/// A fixed operand `v` of an op on `y: [n, o, h, w]` that is one value per channel (or one
/// value): as a `[o]` vector, built in `g`.
fn per_channel(g: &mut Graph, v: NodeId, o: usize, prov: &str) -> Option<NodeId> {
    let ty = g.node(v)?.ty.clone();
    let dims = &ty.shape.0;
    if dims.len() > 4 {
        return None;
    }
    // Right-aligned against [n, o, h, w]: every dim 1 but the channel's, which is o or 1.
    let at_channel = dims.len().checked_sub(3);
    let ok = dims
        .iter()
        .enumerate()
        .all(|(k, d)| if Some(k) == at_channel { *d == Dim::Static(o) || d.is_one() } else { d.is_one() });
    if !ok {
        return None;
    }
    let vector = Shape(vec![Dim::Static(o)]);
    if ty.shape.static_numel() == Some(o) {
        g.add(Op::Reshape { shape: vector }, &[v], prov).ok()
    } else {
        let one = g.add(Op::Reshape { shape: Shape(vec![Dim::Static(1)]) }, &[v], prov).ok()?;
        g.add(Op::BroadcastTo { shape: vector }, &[one], prov).ok()
    }
}

impl Pass for FoldBatchNorm {
    fn name(&self) -> &'static str {
        "fold-batch-norm"
    }

    fn run(&self, g: &mut Graph, stats: &mut PassStats) {
        let Ok(order) = g.topo_order() else { return };
        let mut memo = HashMap::new();
        let outputs: HashSet<NodeId> = g.outputs().iter().map(|o| o.node).collect();
        for conv in order {
            let Some(node) = g.node(conv) else { continue };
            let Op::Conv2d { .. } = node.op else { continue };
            let (conv_op, prov, ty) = (node.op.clone(), node.provenance.clone(), node.ty.clone());
            let Some(o) = ty.shape.0.get(1).and_then(Dim::as_static) else { continue };
            // Walk the chain of single-use per-channel affine ops, accumulating `y * scale + shift`.
            let (mut y, mut scale, mut shift) = (conv, None::<NodeId>, None::<NodeId>);
            let mut absorbed = Vec::new();
            loop {
                let users = g.users(y);
                if users.len() != 1 || outputs.contains(&y) {
                    break;
                }
                let u = users[0];
                let Some(Op::Binary(b)) = g.node(u).map(|n| n.op.clone()) else { break };
                let operands = g.operands(u);
                if g.node(u).map(|n| &n.ty) != Some(&ty) || operands.len() != 2 || operands[0] != y {
                    break;
                }
                let v = operands[1];
                if !matches!(b, BinaryOp::Add | BinaryOp::Sub | BinaryOp::Mul | BinaryOp::Div)
                    || !fixed(g, v, &mut memo)
                {
                    break;
                }
                let Some(c) = per_channel(g, v, o, &prov) else { break };
                let combine = |g: &mut Graph, op: BinaryOp, a: Option<NodeId>, c: NodeId| match a {
                    Some(a) => g.add(Op::Binary(op), &[a, c], &prov).ok(),
                    None => Some(c),
                };
                let step = match b {
                    BinaryOp::Add => combine(g, BinaryOp::Add, shift, c).map(|t| (scale, Some(t))),
                    BinaryOp::Sub => {
                        let neg = g.add(Op::Unary(UnaryOp::Neg), &[c], &prov).ok();
                        neg.and_then(|n| combine(g, BinaryOp::Add, shift, n)).map(|t| (scale, Some(t)))
                    }
                    _ => {
                        let c = if b == BinaryOp::Div {
                            match g.add(Op::Unary(UnaryOp::Recip), &[c], &prov) {
                                Ok(r) => r,
                                Err(_) => break,
                            }
                        } else {
                            c
                        };
                        let s = combine(g, BinaryOp::Mul, scale, c);
                        let t = match shift {
                            Some(t) => g.add(Op::Binary(BinaryOp::Mul), &[t, c], &prov).ok().map(Some),
                            None => Some(None),
                        };
                        s.zip(t).map(|(s, t)| (Some(s), t))
                    }
                };
                let Some((s, t)) = step else { break };
                (scale, shift) = (s, t);
                absorbed.push(u);
                y = u;
            }
            if absorbed.is_empty() {
                continue;
            }
            let Some(new) = refold(g, conv, &conv_op, o, scale, shift, &prov) else { continue };
            g.merge_loc_from(new, std::iter::once(conv).chain(absorbed.iter().copied()));
            g.replace_all_uses(y, new);
            bump(stats, "affine-into-conv", 1);
            bump(stats, "ops-folded", absorbed.len());
        }
    }
}

/// The convolution of `conv`'s input with `w * scale` and bias `b * scale + shift`.
fn refold(
    g: &mut Graph,
    conv: NodeId,
    op: &Op,
    o: usize,
    scale: Option<NodeId>,
    shift: Option<NodeId>,
    prov: &str,
) -> Option<NodeId> {
    let operands = g.operands(conv);
    let (x, mut w, mut b) = (operands[0], operands[1], operands.get(2).copied());
    if let Some(s) = scale {
        let column = g.add(Op::Reshape { shape: Shape([o, 1, 1, 1].map(Dim::Static).to_vec()) }, &[s], prov).ok()?;
        w = g.add(Op::Binary(BinaryOp::Mul), &[w, column], prov).ok()?;
        b = match b {
            Some(b) => Some(g.add(Op::Binary(BinaryOp::Mul), &[b, s], prov).ok()?),
            None => None,
        };
    }
    b = match (b, shift) {
        (Some(b), Some(t)) => Some(g.add(Op::Binary(BinaryOp::Add), &[b, t], prov).ok()?),
        (b, t) => b.or(t),
    };
    let args: Vec<NodeId> = [Some(x), Some(w), b].into_iter().flatten().collect();
    g.add(op.clone(), &args, prov).ok()
}

impl Pass for FuseConvEpilogue {
    fn name(&self) -> &'static str {
        "fuse-conv-epilogue"
    }

    fn run(&self, g: &mut Graph, stats: &mut PassStats) {
        let Ok(order) = g.topo_order() else { return };
        let outputs: HashSet<NodeId> = g.outputs().iter().map(|o| o.node).collect();
        for conv in order {
            let Some(Op::Conv2d { stride, padding, dilation, groups }) = g.node(conv).map(|n| n.op.clone()) else {
                continue;
            };
            let users = g.users(conv);
            if users.len() != 1 || outputs.contains(&conv) {
                continue;
            }
            let act_node = users[0];
            let activation = match g.node(act_node).map(|n| &n.op) {
                Some(Op::Unary(UnaryOp::Relu)) => Activation::Relu,
                Some(Op::Unary(UnaryOp::Tanh)) => Activation::Tanh,
                Some(Op::Unary(UnaryOp::Sigmoid)) => Activation::Sigmoid,
                Some(Op::Gelu { approx: rustral_ir::GeluApprox::Erf }) => Activation::GeluErf,
                Some(Op::Gelu { approx: rustral_ir::GeluApprox::Tanh }) => Activation::GeluTanh,
                Some(Op::Silu) => Activation::Silu,
                _ => continue,
            };
            let args = g.operands(conv);
            let prov = g.node(act_node).map(|n| n.provenance.clone()).unwrap_or_default();
            let op = Op::Conv2dEpilogue { stride, padding, dilation, groups, activation };
            let Ok(new) = g.add(op, &args, &prov) else { continue };
            if stats.record_contracts {
                let arg = |n: NodeId| args.iter().position(|&a| a == n);
                let inside = [conv, act_node];
                if let Some(replaced) = cut(g, act_node, &arg, &|n| inside.contains(&n)) {
                    let rules = [format!("conv2d-{}", activation.name())];
                    stats.contracts.push((new, Contract::new(self.name(), &rules, "conv2d_epilogue", replaced)));
                }
            }
            g.merge_loc_from(new, [conv, act_node]);
            g.replace_all_uses(act_node, new);
            bump(stats, &format!("conv2d-{}", activation.name()), 1);
        }
    }
}
