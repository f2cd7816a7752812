//! Elementwise fusion: trees and chains of elementwise ops (unary, binary, where, cast, and
//! scalar constants they read) become one `fused_elementwise` node whose body is the
//! expression, so lowering emits one kernel per group. A producer joins its consumer's group
//! only when every use of it is inside that group, so nothing is computed twice.

use crate::cleanup::bump;
use crate::manager::Pass;
use crate::stats::PassStats;
use rustral_ir::{ElementwiseExpr, ExprNode, Graph, Literal, NodeId, Op};
use std::collections::{HashMap, HashSet};

/// The elementwise fusion pass.
pub struct FuseElementwise;

/// The elementwise fusion pass's name.
pub(crate) const PASS_NAME: &str = "fuse-elementwise";

/// The most tensors one fused kernel reads: WebGPU's default of 8 storage buffers per shader,
/// less the output and a status word, so that every fused kernel runs on every WebGPU host
/// (`--webgpu-limits default`). A group that would read more stops growing there.
pub const MAX_OPERANDS: usize = 6;

/// A rank-0 splat constant: written into the fused body as a literal, not read.
fn is_scalar_constant(g: &Graph, n: NodeId) -> bool {
    let node = g.node(n).expect("operand exists");
    matches!(node.op, Op::Constant { value: Literal::Splat(_) }) && node.ty.rank() == 0
}

/// The distinct tensors a group reads from outside it.
fn external(g: &Graph, set: &HashSet<NodeId>) -> usize {
    let mut read = HashSet::new();
    for &m in set {
        for o in g.operands(m) {
            if !set.contains(&o) && !is_scalar_constant(g, o) {
                read.insert(o);
            }
        }
    }
    read.len()
}

fn is_elementwise(op: &Op) -> bool {
    matches!(op, Op::Unary(_) | Op::Binary(_) | Op::Where | Op::Cast { .. })
}

impl Pass for FuseElementwise {
    fn name(&self) -> &'static str {
        PASS_NAME
    }

    fn run(&self, g: &mut Graph, stats: &mut PassStats) {
        let Ok(order) = g.topo_order() else { return };
        let outputs: HashSet<NodeId> = g.outputs().iter().map(|o| o.node).collect();
        // Walk consumers last-to-first; each elementwise root gathers the producers it owns.
        let mut taken: HashSet<NodeId> = HashSet::new();
        let mut groups: Vec<(NodeId, Vec<NodeId>)> = Vec::new();
        for &root in order.iter().rev() {
            if taken.contains(&root) || !is_elementwise(&g.node(root).expect("exists").op) {
                continue;
            }
            let mut members = vec![root];
            let mut set: HashSet<NodeId> = HashSet::from([root]);
            let mut i = 0;
            while i < members.len() {
                for o in g.operands(members[i]) {
                    let n = g.node(o).expect("operand exists");
                    let owned = is_elementwise(&n.op)
                        && !outputs.contains(&o)
                        && !taken.contains(&o)
                        && g.users(o).iter().all(|u| set.contains(u));
                    if owned && set.insert(o) {
                        if external(g, &set) > MAX_OPERANDS {
                            set.remove(&o);
                        } else {
                            members.push(o);
                        }
                    }
                }
                i += 1;
            }
            taken.extend(members.iter().copied());
            if members.len() >= 2 {
                groups.push((root, members));
            }
        }
        for (root, members) in &groups {
            if let Some(new) = fuse_group(g, *root, members) {
                g.replace_all_uses(*root, new);
                bump(stats, "group", 1);
                bump(stats, "ops-fused", members.len());
            }
        }
    }
}

/// Build the fused node of a group (members in any order; `root` is its result).
fn fuse_group(g: &mut Graph, root: NodeId, members: &[NodeId]) -> Option<NodeId> {
    let set: HashSet<NodeId> = members.iter().copied().collect();
    let order: Vec<NodeId> = g.topo_order().ok()?.into_iter().filter(|n| set.contains(n)).collect();
    let mut body = Vec::new();
    let mut slot: HashMap<NodeId, usize> = HashMap::new();
    let mut args: Vec<NodeId> = Vec::new();
    let mut value_of = |g: &Graph, n: NodeId, body: &mut Vec<ExprNode>, slot: &mut HashMap<NodeId, usize>| -> usize {
        if let Some(&s) = slot.get(&n) {
            return s;
        }
        let node = g.node(n).expect("operand exists");
        let e = match &node.op {
            Op::Constant { value: Literal::Splat(v) } if node.ty.rank() == 0 => {
                ExprNode::Const { value: *v, dtype: node.ty.dtype }
            }
            _ => {
                let a = args.iter().position(|&x| x == n).unwrap_or_else(|| {
                    args.push(n);
                    args.len() - 1
                });
                ExprNode::Arg(a)
            }
        };
        body.push(e);
        slot.insert(n, body.len() - 1);
        body.len() - 1
    };
    for &m in &order {
        let operands: Vec<usize> = g.operands(m).into_iter().map(|o| value_of(g, o, &mut body, &mut slot)).collect();
        let e = match (&g.node(m)?.op, operands.as_slice()) {
            (Op::Unary(u), [x]) => ExprNode::Unary(*u, *x),
            (Op::Binary(b), [x, y]) => ExprNode::Binary(*b, *x, *y),
            (Op::Where, [c, x, y]) => ExprNode::Where(*c, *x, *y),
            (Op::Cast { to }, [x]) => ExprNode::Cast(*to, *x),
            _ => return None,
        };
        body.push(e);
        slot.insert(m, body.len() - 1);
    }
    // The root must be the body's last node.
    if slot.get(&root) != Some(&(body.len() - 1)) {
        return None;
    }
    let prov = g.node(root)?.provenance.clone();
    let expected = g.node(root)?.ty.clone();
    let fused = g.add(Op::FusedElementwise { body: ElementwiseExpr { nodes: body } }, &args, &prov).ok()?;
    // Broadcasting inside the body must give the root's type; otherwise keep the group.
    if g.node(fused)?.ty != expected {
        g.remove(fused);
        return None;
    }
    Some(fused)
}
