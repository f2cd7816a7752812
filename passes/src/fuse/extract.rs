//! Extraction and rebuilding. The cost of a program is the memory it writes: each op costs
//! its output's element count (symbolic dims counted as 64), reshapes, permutes, broadcasts
//! and slices cost 1 (they are views or cheap copies), leaves cost nothing. A fused op writes
//! one output where its primitive form writes many, so the cheapest program is the fused one.

use super::analysis::{TensorGraph, node_type};
use super::lang::{decode, decode_with};
use egg::{CostFunction, Extractor, Id, Language, SymbolLang};
use rustral_ir::{Dim, Graph, NodeId, Op, TensorType};
use std::collections::HashMap;

/// Memory-traffic cost.
pub struct TrafficCost<'a> {
    egraph: &'a TensorGraph,
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
                    let view = decode_with(&self.egraph.analysis.table, enode, &rank, &splat, |op, _| {
                        matches!(
                            op,
                            Op::Reshape { .. } | Op::Permute { .. } | Op::BroadcastTo { .. } | Op::Slice { .. }
                        )
                    })
                    .unwrap_or(false);
                    if view {
                        1.0
                    } else {
                        1.0 + t
                            .shape
                            .0
                            .iter()
                            .map(|d| if let Dim::Static(n) = d { *n as f64 } else { 64.0 })
                            .product::<f64>()
                    }
                }
            }
        };
        enode.fold(own, |sum, id| sum + costs(id))
    }
}

/// Rebuilds graph nodes from the cheapest e-nodes, sharing common classes.
pub struct Rebuild<'a> {
    egraph: &'a TensorGraph,
    extractor: Extractor<'a, TrafficCost<'a>, SymbolLang, super::analysis::TensorAnalysis>,
    built: HashMap<Id, NodeId>,
    provenance: HashMap<Id, String>,
}

impl<'a> Rebuild<'a> {
    /// Prepare extraction over `egraph`; `provenance` names each original class's module.
    pub fn new(egraph: &'a TensorGraph, provenance: HashMap<Id, String>) -> Rebuild<'a> {
        let extractor = Extractor::new(egraph, TrafficCost { egraph });
        Rebuild { egraph, extractor, built: HashMap::new(), provenance }
    }

    /// The graph node computing class `id`'s cheapest program, or why it cannot be built (an
    /// e-node no op declaration reads, or an op the graph refuses): then the caller leaves the
    /// region as it was and records the reason.
    pub fn build(&mut self, g: &mut Graph, id: Id) -> Result<NodeId, String> {
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
            let mut args = Vec::with_capacity(operands);
            for &c in &enode.children[..operands] {
                args.push(self.build(g, c)?);
            }
            let prov = self.provenance.get(&id).cloned().unwrap_or_default();
            g.add(op, &args, &prov).map_err(|e| e.to_string())?
        };
        self.built.insert(id, node);
        Ok(node)
    }
}
