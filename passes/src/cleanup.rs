//! Clean-up passes: dead-code elimination, common-subexpression elimination, constant
//! folding of splat constants, algebraic simplification and layout canonicalisation.

use crate::manager::Pass;
use crate::stats::PassStats;
use rustral_ir::{BinaryOp, DType, F64, Graph, Literal, NodeId, Op, TensorType};
use std::collections::{HashMap, HashSet};

/// Remove nodes no output depends on. Inputs and params stay: they are the interface.
pub struct Dce;

impl Pass for Dce {
    fn name(&self) -> &'static str {
        "dce"
    }

    fn run(&self, g: &mut Graph, stats: &mut PassStats) {
        let mut live: HashSet<NodeId> = HashSet::new();
        let mut stack: Vec<NodeId> = g.outputs().iter().map(|o| o.node).collect();
        while let Some(n) = stack.pop() {
            if live.insert(n) {
                stack.extend(g.operands(n));
            }
        }
        let dead: Vec<NodeId> = g
            .node_ids()
            .filter(|id| {
                !live.contains(id) && !matches!(g.node(*id).map(|n| &n.op), Some(Op::Input { .. } | Op::Param { .. }))
            })
            .collect();
        g.remove_nodes(&dead);
        bump(stats, "dead-node", dead.len());
    }
}

/// Merge nodes that compute the same op on the same operands (and equal constants).
pub struct Cse;

impl Pass for Cse {
    fn name(&self) -> &'static str {
        "cse"
    }

    fn run(&self, g: &mut Graph, stats: &mut PassStats) {
        let Ok(order) = g.topo_order() else { return };
        let mut seen: HashMap<(Op, Vec<NodeId>, TensorType), NodeId> = HashMap::new();
        let mut merged = 0;
        for id in order {
            let node = g.node(id).expect("ordered node exists");
            if matches!(node.op, Op::Input { .. } | Op::Param { .. } | Op::RandomUniform { .. }) {
                continue;
            }
            let key = (node.op.clone(), g.operands(id), node.ty.clone());
            match seen.get(&key) {
                Some(&first) => {
                    g.replace_all_uses(id, first);
                    g.merge_loc_from(first, [id]);
                    merged += 1;
                }
                None => {
                    seen.insert(key, id);
                }
            }
        }
        bump(stats, "merged", merged);
    }
}

/// Evaluate unary and binary ops whose operands are all splat constants (f32 and f64 only,
/// rounding as the op's dtype does), so `x / sqrt(64)` carries one constant.
pub struct FoldConstants;

impl Pass for FoldConstants {
    fn name(&self) -> &'static str {
        "fold-constants"
    }

    fn run(&self, g: &mut Graph, stats: &mut PassStats) {
        let Ok(order) = g.topo_order() else { return };
        let mut folded = 0;
        for id in order {
            let node = g.node(id).expect("ordered node exists").clone();
            if !matches!(node.ty.dtype, DType::F32 | DType::F64) {
                continue;
            }
            let args: Option<Vec<f64>> = g.operands(id).iter().map(|&o| splat(g, o)).collect();
            // The ops' own scalar meaning (as the reference evaluates them), in f64, then
            // rounded to the node's dtype.
            let value = match (&node.op, args.as_deref()) {
                (Op::Unary(u), Some([x])) => Some(u.eval(*x)),
                (Op::Binary(b), Some([x, y])) => Some(b.eval(*x, *y)),
                _ => None,
            };
            if let Some(v) = value {
                let v = node.ty.dtype.round(v);
                let c = g.declare(Op::Constant { value: Literal::Splat(F64(v)) }, node.ty.clone(), &node.provenance);
                if let Ok(c) = c {
                    g.merge_loc_from(c, [id]);
                    g.replace_all_uses(id, c);
                    folded += 1;
                }
            }
        }
        bump(stats, "folded", folded);
    }
}

/// The value of a splat constant node.
pub(crate) fn splat(g: &Graph, id: NodeId) -> Option<f64> {
    match &g.node(id)?.op {
        Op::Constant { value: Literal::Splat(v) } => Some(v.0),
        _ => None,
    }
}

/// Algebraic identities that do not change a value's type: `x * 1`, `x + 0`, `x - 0`,
/// `x / 1`, a cast to the same dtype, a reshape or broadcast to the same shape.
pub struct Simplify;

impl Pass for Simplify {
    fn name(&self) -> &'static str {
        "simplify"
    }

    fn run(&self, g: &mut Graph, stats: &mut PassStats) {
        let Ok(order) = g.topo_order() else { return };
        for id in order {
            let node = g.node(id).expect("ordered node exists");
            let ops = g.operands(id);
            let is = |i: usize, v: f64| splat(g, ops[i]) == Some(v);
            let same_type = |i: usize| g.node(ops[i]).is_some_and(|n| n.ty == node.ty);
            let (rule, keep) = match &node.op {
                Op::Binary(BinaryOp::Mul) if is(1, 1.0) && same_type(0) => ("mul-one", 0),
                Op::Binary(BinaryOp::Mul) if is(0, 1.0) && same_type(1) => ("mul-one", 1),
                Op::Binary(BinaryOp::Add) if is(1, 0.0) && same_type(0) => ("add-zero", 0),
                Op::Binary(BinaryOp::Add) if is(0, 0.0) && same_type(1) => ("add-zero", 1),
                Op::Binary(BinaryOp::Sub) if is(1, 0.0) && same_type(0) => ("sub-zero", 0),
                Op::Binary(BinaryOp::Div) if is(1, 1.0) && same_type(0) => ("div-one", 0),
                Op::Cast { .. } | Op::Reshape { .. } | Op::BroadcastTo { .. } if same_type(0) => ("no-op-layout", 0),
                _ => continue,
            };
            g.replace_all_uses(id, ops[keep]);
            bump(stats, rule, 1);
        }
    }
}

/// Layout chains: `permute(permute(x))` composes (and disappears when it is the identity),
/// `reshape(reshape(x))` keeps the last, a broadcast of a splat constant becomes a splat.
pub struct CanonicalizeLayout;

impl Pass for CanonicalizeLayout {
    fn name(&self) -> &'static str {
        "canonicalize-layout"
    }

    fn run(&self, g: &mut Graph, stats: &mut PassStats) {
        let Ok(order) = g.topo_order() else { return };
        for id in order {
            let node = g.node(id).expect("ordered node exists").clone();
            let ops = g.operands(id);
            if ops.is_empty() {
                continue;
            }
            let inner = |i: usize| g.node(ops[i]).map(|n| n.op.clone());
            let replacement = match (&node.op, inner(0)) {
                (Op::Permute { perm }, _) if perm.iter().enumerate().all(|(i, &p)| i == p) => {
                    Some(("identity-permute", ops[0]))
                }
                (Op::Permute { perm: outer }, Some(Op::Permute { perm: first })) => {
                    let composed: Vec<usize> = outer.iter().map(|&i| first[i]).collect();
                    let x = g.operands(ops[0])[0];
                    let new = if composed.iter().enumerate().all(|(i, &p)| i == p) {
                        Ok(x)
                    } else {
                        g.add(Op::Permute { perm: composed }, &[x], &node.provenance).inspect(|&n| {
                            g.merge_loc_from(n, [id, ops[0]]);
                        })
                    };
                    new.ok().map(|n| ("permute-permute", n))
                }
                (Op::Reshape { shape }, Some(Op::Reshape { .. })) => {
                    let x = g.operands(ops[0])[0];
                    g.add(Op::Reshape { shape: shape.clone() }, &[x], &node.provenance)
                        .inspect(|&n| g.merge_loc_from(n, [id, ops[0]]))
                        .ok()
                        .map(|n| ("reshape-reshape", n))
                }
                (Op::BroadcastTo { .. }, Some(Op::Constant { value: Literal::Splat(v) })) => g
                    .declare(Op::Constant { value: Literal::Splat(v) }, node.ty.clone(), &node.provenance)
                    .inspect(|&n| g.merge_loc_from(n, [id, ops[0]]))
                    .ok()
                    .map(|n| ("broadcast-splat", n)),
                _ => None,
            };
            if let Some((rule, new)) = replacement {
                g.replace_all_uses(id, new);
                bump(stats, rule, 1);
            }
        }
    }
}

pub(crate) fn bump(stats: &mut PassStats, rule: &str, n: usize) {
    if n > 0 {
        *stats.rules.entry(rule.to_string()).or_insert(0) += n;
    }
}
