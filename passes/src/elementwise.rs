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

/// The most ops one fused kernel computes. A longer chain is cut into several kernels: each
/// costs one more pass over memory, against a body (a Cranelift function, a WGSL shader) whose
/// compile time and register pressure grow with its length; cutting keeps compile time
/// linear in the graph.
pub const MAX_GROUP_OPS: usize = 256;

/// A group being gathered: its members and the distinct tensors it reads from outside, kept
/// up to date as members join, so growing a group costs what the new member reads.
struct Group {
    members: Vec<NodeId>,
    set: HashSet<NodeId>,
    /// Tensors read from outside the group (scalar constants excluded: they are literals).
    external: HashSet<NodeId>,
}

impl Group {
    fn new(g: &Graph, root: NodeId) -> Group {
        let mut group = Group { members: vec![root], set: HashSet::from([root]), external: HashSet::new() };
        group.external = group.reads(g, root).collect();
        group
    }

    /// What `n` reads from outside the group.
    fn reads<'a>(&'a self, g: &'a Graph, n: NodeId) -> impl Iterator<Item = NodeId> + 'a {
        g.operands(n).into_iter().filter(move |o| !self.set.contains(o) && !is_scalar_constant(g, *o))
    }

    /// Add `o` (an operand of a member) unless the group would then read more than
    /// `MAX_OPERANDS` tensors or compute more than `MAX_GROUP_OPS` ops.
    fn try_add(&mut self, g: &Graph, o: NodeId) -> bool {
        if self.members.len() >= MAX_GROUP_OPS || self.set.contains(&o) {
            return false;
        }
        let new: HashSet<NodeId> = self.reads(g, o).filter(|r| *r != o && !self.external.contains(r)).collect();
        let after = self.external.len() - usize::from(self.external.contains(&o)) + new.len();
        if after > MAX_OPERANDS {
            return false;
        }
        self.external.remove(&o);
        self.external.extend(new);
        self.set.insert(o);
        self.members.push(o);
        true
    }
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
        let position: HashMap<NodeId, usize> = order.iter().enumerate().map(|(i, &n)| (n, i)).collect();
        let outputs: HashSet<NodeId> = g.outputs().iter().map(|o| o.node).collect();
        // Walk consumers last-to-first; each elementwise root gathers the producers it owns.
        let mut taken: HashSet<NodeId> = HashSet::new();
        let mut groups: Vec<(NodeId, Vec<NodeId>)> = Vec::new();
        for &root in order.iter().rev() {
            if taken.contains(&root) || !is_elementwise(&g.node(root).expect("exists").op) {
                continue;
            }
            let mut group = Group::new(g, root);
            let mut i = 0;
            while i < group.members.len() {
                for o in g.operands(group.members[i]) {
                    let n = g.node(o).expect("operand exists");
                    let owned = is_elementwise(&n.op)
                        && !outputs.contains(&o)
                        && !taken.contains(&o)
                        && g.users(o).iter().all(|u| group.set.contains(u));
                    if owned {
                        group.try_add(g, o);
                    }
                }
                i += 1;
            }
            let mut members = group.members;
            taken.extend(members.iter().copied());
            if members.len() >= 2 {
                // Topological order, from the one order computed above (members of
                // different groups are disjoint and stay in the graph until fused).
                members.sort_by_key(|m| position[m]);
                groups.push((root, members));
            }
        }
        for (root, members) in &groups {
            if let Some(new) = fuse_group(g, *root, members) {
                if stats.record_contracts {
                    let args = g.operands(new);
                    let inside: HashSet<NodeId> = members.iter().copied().collect();
                    let arg = |n: NodeId| args.iter().position(|&a| a == n);
                    if let Some(replaced) = crate::contract::cut(g, *root, &arg, &|n| inside.contains(&n)) {
                        let contract =
                            crate::contract::Contract::new(PASS_NAME, &["group".into()], "fused_elementwise", replaced);
                        stats.contracts.push((new, contract));
                    }
                }
                g.replace_all_uses(*root, new);
                bump(stats, "group", 1);
                bump(stats, "ops-fused", members.len());
            }
        }
    }
}

/// Build the fused node of a group (members in topological order; `root` is its result).
fn fuse_group(g: &mut Graph, root: NodeId, members: &[NodeId]) -> Option<NodeId> {
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
    for &m in members {
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
    g.merge_loc_from(fused, members.iter().copied());
    Some(fused)
}
