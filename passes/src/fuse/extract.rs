//! Extraction and rebuilding. The cost of a program is the memory it writes: each op costs
//! its output's element count (symbolic dims counted as 64), reshapes, permutes, broadcasts
//! and slices cost 1 (they are views or cheap copies), leaves cost nothing. A fused op writes
//! one output where its primitive form writes many, so the cheapest program is the fused one.
//! Primitives a rewrite made cost more than the same primitives as written (see
//! [`rewrite_premium`]), so a region keeps its spelling except where a fusion replaced it.

use super::analysis::{TensorGraph, node_type};
use super::lang::{decode, decode_with};
use egg::{CostFunction, Extractor, Id, Language, SymbolLang};
use rustral_ir::{Dim, Graph, NodeId, Op, OpClass, SourceLoc, TensorType};
use std::collections::{HashMap, HashSet};

/// Memory-traffic cost, with a premium on primitives the model did not write.
pub struct TrafficCost<'a> {
    egraph: &'a TensorGraph,
    written: &'a HashSet<SymbolLang>,
}

/// What an e-node costs beyond its traffic when a rewrite made it rather than the model.
///
/// A fused op costs its traffic: building it is the point of a fusion pass. A primitive the
/// algebra rules made (`(x * y) * 0.5` for `(x * 0.5) * y`, a constant moved through a
/// matmul) costs its traffic twice over, plus a little: it is chosen only where it is part of
/// a program that saves more than it costs, never for a saving too small to pay for losing
/// the spelling a later pass matches (moving GELU's 0.5 through the next matmul writes less,
/// and leaves no GELU for `fuse-gelu` to find). Equal programs keep the one as written.
fn rewrite_premium(op: &Op, traffic: f64) -> f64 {
    if op.decl().class == OpClass::Fused { 1e-3 } else { traffic + 1e-3 }
}

impl CostFunction<SymbolLang> for TrafficCost<'_> {
    type Cost = f64;

    fn cost<C: FnMut(Id) -> f64>(&mut self, enode: &SymbolLang, mut costs: C) -> f64 {
        let own = if self.egraph.analysis.table.leaves.contains_key(&enode.op) {
            0.0
        } else {
            match node_type(self.egraph, enode) {
                None => f64::INFINITY,
                Some(t) => {
                    let rank = |c: Id| self.egraph[c].data.ty.as_ref().map(TensorType::rank);
                    let splat = |c: Id| self.egraph[c].data.splat;
                    let written = self.written.contains(enode);
                    decode_with(&self.egraph.analysis.table, enode, &rank, &splat, |op, _| {
                        let view = matches!(
                            op,
                            Op::Reshape { .. } | Op::Permute { .. } | Op::BroadcastTo { .. } | Op::Slice { .. }
                        );
                        let traffic = if view {
                            1.0
                        } else {
                            1.0 + t
                                .shape
                                .0
                                .iter()
                                .map(|d| if let Dim::Static(n) = d { *n as f64 } else { 64.0 })
                                .product::<f64>()
                        };
                        if written { traffic } else { traffic + rewrite_premium(op, traffic) }
                    })
                    .unwrap_or(f64::INFINITY)
                }
            }
        };
        enode.fold(own, |sum, id| sum + costs(id))
    }
}

/// A region's original nodes by e-class, so that a rebuilt node can name the model lines of
/// the nodes it replaces.
#[derive(Default)]
pub struct Origins {
    /// Each original node's class, canonical after saturation.
    class_of: HashMap<NodeId, Id>,
    /// The original nodes of each canonical class.
    by_class: HashMap<Id, Vec<NodeId>>,
    /// The class of each value the region reads (its leaves), canonical.
    leaf_class: HashMap<NodeId, Id>,
    /// Whether rebuilt fused nodes record what they replace.
    record: bool,
}

impl Origins {
    /// From the classes the region's nodes and leaves were added as, made canonical in
    /// `egraph`; `record` asks for contracts.
    pub fn new(
        egraph: &TensorGraph,
        added: &HashMap<NodeId, Id>,
        leaves: &HashMap<NodeId, Id>,
        record: bool,
    ) -> Origins {
        let mut origins = Origins { record, ..Origins::default() };
        origins.leaf_class = leaves.iter().map(|(&n, &c)| (n, egraph.find(c))).collect();
        let mut nodes: Vec<(&NodeId, &Id)> = added.iter().collect();
        nodes.sort();
        for (&n, &c) in nodes {
            let c = egraph.find(c);
            origins.class_of.insert(n, c);
            origins.by_class.entry(c).or_default().push(n);
        }
        origins
    }

    /// What a fused node computing `class` from the classes `args` (its operands, in order)
    /// replaced, cut out of the region as it was.
    fn replaced(&self, g: &Graph, class: Id, args: &[Id]) -> Option<crate::contract::Cut> {
        let root = *self.by_class.get(&class)?.iter().min()?;
        let arg = |n: NodeId| {
            let c = self.class_of.get(&n).or_else(|| self.leaf_class.get(&n))?;
            args.iter().position(|a| a == c)
        };
        crate::contract::cut(g, root, &arg, &|n| self.class_of.contains_key(&n))
    }

    /// The locations of the original nodes a node computing `class` from the classes
    /// `operands` replaces: those of the class, and below them every original node down to
    /// the operands' classes (a fused LayerNorm covers its mean, sub, square, rsqrt, ...).
    fn covered(&self, g: &Graph, class: Id, operands: &HashSet<Id>) -> Vec<SourceLoc> {
        let mut locs = Vec::new();
        let mut seen = HashSet::new();
        let mut stack: Vec<NodeId> = self.by_class.get(&class).cloned().unwrap_or_default();
        while let Some(n) = stack.pop() {
            if !seen.insert(n) {
                continue;
            }
            if let Some(node) = g.node(n) {
                locs.extend(node.loc.iter().cloned());
            }
            for o in g.operands(n) {
                if self.class_of.get(&o).is_some_and(|c| !operands.contains(c)) {
                    stack.push(o);
                }
            }
        }
        locs
    }
}

/// Rebuilds graph nodes from the cheapest e-nodes, sharing common classes.
pub struct Rebuild<'a> {
    egraph: &'a TensorGraph,
    extractor: Extractor<'a, TrafficCost<'a>, SymbolLang, super::analysis::TensorAnalysis>,
    built: HashMap<Id, NodeId>,
    provenance: &'a HashMap<Id, String>,
    origins: &'a Origins,
    /// Each fused node built, with what it replaced (when the origins record).
    pub replaced: Vec<(NodeId, crate::contract::Cut)>,
}

impl<'a> Rebuild<'a> {
    /// Prepare extraction over `egraph`; `provenance` names each original class's module,
    /// `written` holds the e-nodes the model wrote (canonical ids), `origins` the region's
    /// original nodes (whose source locations each rebuilt node collects).
    pub fn new(
        egraph: &'a TensorGraph,
        provenance: &'a HashMap<Id, String>,
        written: &'a HashSet<SymbolLang>,
        origins: &'a Origins,
    ) -> Rebuild<'a> {
        let extractor = Extractor::new(egraph, TrafficCost { egraph, written });
        Rebuild { egraph, extractor, built: HashMap::new(), provenance, origins, replaced: Vec::new() }
    }

    /// The classes built so far: the program the region is rebuilt as.
    pub fn classes(&self) -> impl Iterator<Item = Id> + '_ {
        self.built.keys().copied()
    }

    /// The graph node computing class `id`'s cheapest program, or why it cannot be built (an
    /// e-node no op declaration reads, or an op the graph refuses): then the caller leaves the
    /// region as it was and records the reason.
    pub fn build(&mut self, g: &mut Graph, id: Id) -> Result<NodeId, String> {
        self.build_within(g, id, "")
    }

    /// [`Rebuild::build`], a class no original node was in (a rewrite made it: `x * 0.5`
    /// regrouped) taking the module of the node that uses it, so it stays in its layer's
    /// region for the passes after this one.
    fn build_within(&mut self, g: &mut Graph, id: Id, user: &str) -> Result<NodeId, String> {
        let id = self.egraph.find(id);
        if let Some(&n) = self.built.get(&id) {
            return Ok(n);
        }
        let enode = self.extractor.find_best_node(id).clone();
        let node = if let Some(leaf) = self.egraph.analysis.table.leaves.get(&enode.op) {
            leaf.node
        } else {
            let rank = |c: Id| self.egraph[c].data.ty.as_ref().map(TensorType::rank);
            let splat = |c: Id| self.egraph[c].data.splat;
            let (op, operands) = decode(&self.egraph.analysis.table, &enode, &rank, &splat)
                .ok_or_else(|| format!("no op reads the symbol `{}`", enode.op))?;
            let prov = self.provenance.get(&id).cloned().unwrap_or_else(|| user.to_string());
            let mut args = Vec::with_capacity(operands);
            for &c in &enode.children[..operands] {
                args.push(self.build_within(g, c, &prov)?);
            }
            let fused = op.is_fused();
            let new = g.add(op, &args, &prov).map_err(|e| e.to_string())?;
            let children: HashSet<Id> = enode.children.iter().map(|&c| self.egraph.find(c)).collect();
            g.set_loc(new, self.origins.covered(g, id, &children));
            if fused && self.origins.record {
                let operands: Vec<Id> = enode.children[..operands].iter().map(|&c| self.egraph.find(c)).collect();
                if let Some(p) = self.origins.replaced(g, id, &operands) {
                    self.replaced.push((new, p));
                }
            }
            new
        };
        self.built.insert(id, node);
        Ok(node)
    }
}
