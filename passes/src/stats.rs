//! Compile statistics, serialised as `schemas/compile-stats.schema.json` describes. Maps are
//! `BTreeMap`s so the JSON is deterministic (timings aside).

use crate::contract::Contract;
use rustral_ir::{Activation, Graph, NodeId, Op};
use serde::Serialize;
use std::collections::BTreeMap;

/// Statistics of one compile.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct CompileStats {
    /// The passes that ran, in order.
    pub pipeline: Vec<String>,
    /// Per pass.
    pub passes: Vec<PassStats>,
    /// Fused op kind to its count in the final graph. `gelu` and `silu` also count the
    /// activations computed inside matmul epilogues, so "every GELU is fused" reads directly.
    pub fused: BTreeMap<String, usize>,
    /// Nodes in the final graph.
    pub nodes: usize,
}

/// Statistics of one pass.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct PassStats {
    /// Pass name.
    pub pass: String,
    /// Wall time.
    pub wall_ms: f64,
    /// Node count before.
    pub nodes_before: usize,
    /// Node count after.
    pub nodes_after: usize,
    /// How often each named rule fired (rewriting passes).
    pub rules: BTreeMap<String, usize>,
    /// Equality saturation, for the egg pass.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub egg: Option<EggStats>,
    /// Set by the manager when contracts are wanted: fusion passes then record one per fused
    /// node they build, in `contracts`.
    #[serde(skip)]
    pub record_contracts: bool,
    /// The fused nodes this pass built, each with what it replaced (when asked for).
    #[serde(skip)]
    pub contracts: Vec<(NodeId, Contract)>,
}

/// What equality saturation did, summed over the regions it ran on.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct EggStats {
    /// Regions saturated (one per layer or top-level module).
    pub regions: usize,
    /// Iterations over all regions.
    pub iterations: usize,
    /// Largest e-graph (e-nodes) of any region.
    pub max_egraph_nodes: usize,
    /// Largest number of e-classes of any region.
    pub max_egraph_classes: usize,
    /// Why saturation stopped, with how many regions stopped that way (`saturated`,
    /// `iteration_limit`, `node_limit`, `time_limit`, `other`).
    pub stop_reasons: BTreeMap<String, usize>,
    /// Regions whose fused program could not be rebuilt as graph nodes, each with why; such
    /// a region is left as it was (correct, only not fused), and this list says so.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub abandoned: Vec<String>,
    /// Regions over `fuse::MAX_REGION_NODES`, each with the windows it was saturated in.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub split: Vec<String>,
    /// Every region saturated, in order: what `rustral-compile --explain-fusion` prints.
    pub explained: Vec<RegionReport>,
}

/// What saturating one region (or one window of a split region) did.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct RegionReport {
    /// The region's key (`encoder.layer.3`), with the window for a split region.
    pub region: String,
    /// Graph nodes saturated.
    pub nodes: usize,
    /// E-nodes and e-classes when saturation stopped.
    pub egraph_nodes: usize,
    /// E-classes when saturation stopped.
    pub egraph_classes: usize,
    /// Iterations run.
    pub iterations: usize,
    /// Why saturation stopped (`saturated`, `iteration_limit`, `node_limit`, `time_limit`).
    pub stop: String,
    /// Wall time of saturation and extraction.
    pub ms: f64,
    /// True when a family rule fired and the region was rebuilt from the cheapest program.
    pub rebuilt: bool,
    /// Every rule that matched at least once, by name.
    pub rules: BTreeMap<String, RuleReport>,
    /// Family patterns that matched the region's structure but failed one condition (a
    /// constant off, a bias of the wrong shape): why a spelling that looks fused was not.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub near_misses: Vec<NearMiss>,
}

/// One rule's work in one region.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct RuleReport {
    /// True for the algebra rules (commutativity, constant motion), which run with every family.
    pub algebra: bool,
    /// Matches its pattern found, over all iterations.
    pub matches: usize,
    /// Matches that passed its conditions and were applied (new equalities, or a fusion).
    pub applied: usize,
    /// Time searching for matches.
    pub search_ms: f64,
    /// Time applying them.
    pub apply_ms: f64,
}

/// A family pattern that matched up to one condition.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct NearMiss {
    /// The rule.
    pub rule: String,
    /// The module path of the value it matched.
    pub at: String,
    /// The condition that failed (`?c = 0.044715`).
    pub wanted: String,
    /// What the variable was bound to (`0.044`, `f32[batch, 1]`).
    pub found: String,
}

/// Count the fused ops of each kind in `g` (every fused kind the op declarations list, zero
/// when absent).
pub fn count_fused(g: &Graph) -> BTreeMap<String, usize> {
    let mut counts: BTreeMap<String, usize> = Op::fused_kinds().into_iter().map(|k| (k.to_string(), 0)).collect();
    let mut bump = |k: &str| *counts.entry(k.to_string()).or_default() += 1;
    for id in g.node_ids() {
        let op = &g.node(id).expect("listed").op;
        if op.is_fused() {
            bump(op.name());
        }
        if let Op::MatMulEpilogue { activation } = op {
            match activation {
                Activation::GeluErf | Activation::GeluTanh => bump("gelu"),
                Activation::Silu => bump("silu"),
                Activation::None | Activation::Relu | Activation::Tanh | Activation::Sigmoid => {}
            }
        }
    }
    counts
}

impl CompileStats {
    /// Pretty JSON.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("stats always serialize")
    }
}
