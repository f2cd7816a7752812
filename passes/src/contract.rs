//! Numeric contracts of fused nodes: what each fused node replaced, kept so that a tool can
//! run the fused kernel and the primitives it stands for on the same values and say which
//! rewrite is off (`rustral-compile --check-kernels`).
//!
//! A contract is recorded when a fusion pass builds a fused node: the primitives as the graph
//! held them just before the pass, cut out as a graph of their own whose inputs are the fused
//! node's operands (`arg0`, `arg1`, ... in operand order) and whose one output (`out`) is the
//! value the fused node replaces. Recording is off unless asked for
//! ([`crate::PassManager::record_contracts`]): it copies every fused region.

use rustral_ir::{Graph, NodeId, Op};
use std::collections::HashMap;

/// What one fused node replaced.
#[derive(Clone, Debug, PartialEq)]
pub struct Contract {
    /// The pass that built the node.
    pub pass: String,
    /// The rules to blame when the node computes something else than `replaced`, each with
    /// its pass: those that fired in the node's region (the family's, not the algebra's),
    /// and those of the fused nodes it absorbed (a matmul epilogue's GELU).
    pub rules: Vec<RuleRef>,
    /// The fused op's name, to tell a contract from a later node that reuses its index.
    pub op: String,
    /// The primitives the model wrote: inputs `argK` for the fused node's operands, the
    /// output `out`. A fused node an earlier pass built among them is replaced by its own
    /// contract's primitives, so a matmul epilogue's contract holds the GELU as written.
    pub replaced: Graph,
    /// Fused nodes left in `replaced` with the graph node each was copied from, until
    /// [`Contract::inline`] replaces them by their own primitives.
    pub(crate) parts: Vec<(NodeId, NodeId)>,
}

/// A rule and the pass it belongs to.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct RuleRef {
    /// The rule's name (`gelu-tanh`, or `group` for elementwise fusion).
    pub rule: String,
    /// Its pass (`fuse-gelu`).
    pub pass: String,
}

impl Contract {
    /// A contract for a node `pass` built, with the rules that fired.
    pub(crate) fn new(pass: &str, rules: &[String], op: &str, cut: Cut) -> Contract {
        let rules = rules.iter().map(|r| RuleRef { rule: r.clone(), pass: pass.to_string() }).collect();
        Contract { pass: pass.to_string(), rules, op: op.to_string(), replaced: cut.graph, parts: cut.parts }
    }

    /// Replace the fused nodes among the primitives by what they replaced, from `earlier`
    /// (contracts by graph node), and take over their rules.
    pub(crate) fn inline(mut self, earlier: &std::collections::BTreeMap<NodeId, Contract>) -> Contract {
        let subs: HashMap<NodeId, &Contract> = self
            .parts
            .iter()
            .filter_map(|&(at, from)| {
                let inner = earlier.get(&from)?;
                (self.replaced.node(at)?.op.name() == inner.op).then_some((at, inner))
            })
            .collect();
        self.parts.clear();
        if subs.is_empty() {
            return self;
        }
        // A later pass that rebuilds its region builds the fused nodes already there anew: such
        // a node replaced one node of its own kind, and keeps that node's contract and rules.
        let computing: Vec<NodeId> =
            self.replaced.node_ids().filter(|&id| self.replaced.node(id).is_some_and(|n| !n.op.is_source())).collect();
        // (Only when it reads the same operands in the same order: then the two compute alike.)
        let in_order = |only: NodeId| {
            self.replaced.operands(only).iter().enumerate().all(|(k, &o)| {
                matches!(self.replaced.node(o).map(|n| &n.op), Some(Op::Input { name }) if *name == format!("arg{k}"))
            })
        };
        if let [only] = computing[..]
            && let Some(inner) = subs.get(&only)
            && inner.op == self.op
            && in_order(only)
        {
            return (*inner).clone();
        }
        let src = &self.replaced;
        let mut g = Graph::new("replaced");
        let mut map: HashMap<NodeId, NodeId> = HashMap::new();
        let Ok(order) = src.topo_order() else { return self };
        for id in order {
            let operands: Vec<NodeId> = src.operands(id).iter().map(|o| map[o]).collect();
            let new = match subs.get(&id) {
                Some(inner) => {
                    let Some(v) = splice(&mut g, &inner.replaced, &operands) else { return self };
                    v
                }
                None => match copy_node(&mut g, src, id, &operands) {
                    Some(v) => v,
                    None => return self,
                },
            };
            map.insert(id, new);
        }
        let Some(out) = src.outputs().first().map(|o| map[&o.node]) else { return self };
        if g.set_output("out", out).is_err() {
            return self;
        }
        for inner in subs.values() {
            self.rules.extend(inner.rules.iter().cloned());
        }
        self.rules.sort();
        self.rules.dedup();
        self.replaced = g;
        self
    }
}

/// Copy `inner` (a contract's primitives) into `g` with its inputs `argK` bound to `args[K]`;
/// returns the node of its output.
fn splice(g: &mut Graph, inner: &Graph, args: &[NodeId]) -> Option<NodeId> {
    let mut map: HashMap<NodeId, NodeId> = HashMap::new();
    for id in inner.topo_order().ok()? {
        let new = match &inner.node(id)?.op {
            Op::Input { name } => *args.get(name.strip_prefix("arg")?.parse::<usize>().ok()?)?,
            _ => {
                let operands: Vec<NodeId> = inner.operands(id).iter().map(|o| map[o]).collect();
                copy_node(g, inner, id, &operands)?
            }
        };
        map.insert(id, new);
    }
    map.get(&inner.outputs().first()?.node).copied()
}

/// Copy node `id` of `src` into `g` over `operands` (already in `g`), with its locations.
fn copy_node(g: &mut Graph, src: &Graph, id: NodeId, operands: &[NodeId]) -> Option<NodeId> {
    let node = src.node(id)?;
    let new = match &node.op {
        Op::Input { name } => g.input(name, node.ty.clone()).ok()?,
        op if op.is_source() => g.declare_with(op.clone(), operands, node.ty.clone(), &node.provenance).ok()?,
        op => g.add(op.clone(), operands, &node.provenance).ok()?,
    };
    g.set_loc(new, node.loc.clone());
    Some(new)
}

/// A computation cut out of a graph.
pub(crate) struct Cut {
    /// Inputs `argK`, the output `out`.
    pub(crate) graph: Graph,
    /// The fused nodes copied, each with the node it was copied from.
    pub(crate) parts: Vec<(NodeId, NodeId)>,
}

/// Cut out the computation of `root` in `g`: a node `arg(n)` names is input `argK`, a node
/// `inside` holds is copied with its operands, a constant or iota outside is copied, anything
/// else means the value cannot be cut out (None).
pub(crate) fn cut(
    g: &Graph,
    root: NodeId,
    arg: &dyn Fn(NodeId) -> Option<usize>,
    inside: &dyn Fn(NodeId) -> bool,
) -> Option<Cut> {
    let mut p = Graph::new("replaced");
    let mut parts = Vec::new();
    let mut constant: HashMap<NodeId, bool> = HashMap::new();
    let mut memo: HashMap<NodeId, NodeId> = HashMap::new();
    // Iterative post-order: regions hold up to a thousand nodes in a chain.
    let mut stack = vec![(root, false)];
    while let Some((n, expanded)) = stack.pop() {
        if memo.contains_key(&n) {
            continue;
        }
        let node = g.node(n)?;
        if let Some(k) = arg(n).filter(|_| n != root) {
            let name = format!("arg{k}");
            let id = match p.inputs().iter().find(|(i, _)| *i == name) {
                Some(&(_, id)) => id,
                None => p.input(&name, node.ty.clone()).ok()?,
            };
            memo.insert(n, id);
            continue;
        }
        // Outside the region only values computed from constants alone are copied (a causal
        // mask built once for every layer); any other value is not what the node replaced.
        if !inside(n) && !from_constants(g, n, &mut constant) {
            return None;
        }
        let operands = g.operands(n);
        if !expanded {
            stack.push((n, true));
            stack.extend(operands.iter().rev().map(|&o| (o, false)));
            continue;
        }
        let args: Vec<NodeId> = operands.iter().map(|o| memo.get(o).copied()).collect::<Option<_>>()?;
        let id = copy_node(&mut p, g, n, &args)?;
        if node.op.is_fused() {
            parts.push((id, n));
        }
        memo.insert(n, id);
    }
    p.set_output("out", memo[&root]).ok()?;
    Some(Cut { graph: p, parts })
}

/// Whether `n`'s value is computed from constants and iotas alone (no input, parameter or
/// random stream), remembered in `memo`.
fn from_constants(g: &Graph, n: NodeId, memo: &mut HashMap<NodeId, bool>) -> bool {
    let mut stack = vec![n];
    while let Some(&top) = stack.last() {
        if memo.contains_key(&top) {
            stack.pop();
            continue;
        }
        let Some(node) = g.node(top) else { return false };
        let verdict = match node.op {
            Op::Constant { .. } | Op::Iota { .. } => Some(true),
            Op::Input { .. } | Op::Param { .. } | Op::RandomUniform { .. } => Some(false),
            _ => {
                let operands = g.operands(top);
                let pending: Vec<NodeId> = operands.iter().copied().filter(|o| !memo.contains_key(o)).collect();
                if pending.is_empty() {
                    Some(operands.iter().all(|o| memo[o]))
                } else {
                    stack.extend(pending);
                    None
                }
            }
        };
        if let Some(v) = verdict {
            memo.insert(top, v);
            stack.pop();
        }
    }
    memo[&n]
}
