//! Compile statistics, serialised as `schemas/compile-stats.schema.json` describes. Maps are
//! `BTreeMap`s so the JSON is deterministic (timings aside).

use rustral_ir::{Activation, Graph, Op};
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
