//! Compile statistics, serialised as `schemas/compile-stats.schema.json` describes. Maps are
//! `BTreeMap`s so the JSON is deterministic (timings aside).

use rustral_ir::{Activation, Graph, Op};
use serde::Serialize;
use std::collections::BTreeMap;

/// The fused op kinds tools read from `fused`.
pub const FUSED_KINDS: [&str; 9] = [
    "layer_norm",
    "rms_norm",
    "softmax",
    "cross_entropy",
    "gelu",
    "silu",
    "attention",
    "matmul_epilogue",
    "fused_elementwise",
];

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
}

/// Count the fused ops of each kind in `g`.
pub fn count_fused(g: &Graph) -> BTreeMap<String, usize> {
    let mut counts: BTreeMap<String, usize> = FUSED_KINDS.iter().map(|k| (k.to_string(), 0)).collect();
    let mut bump = |k: &str| *counts.get_mut(k).expect("known kind") += 1;
    for id in g.node_ids() {
        match &g.node(id).expect("listed").op {
            Op::LayerNorm { .. } => bump("layer_norm"),
            Op::RmsNorm { .. } => bump("rms_norm"),
            Op::Softmax { .. } => bump("softmax"),
            Op::CrossEntropy => bump("cross_entropy"),
            Op::Gelu { .. } => bump("gelu"),
            Op::Silu => bump("silu"),
            Op::Attention { .. } => bump("attention"),
            Op::FusedElementwise { .. } => bump("fused_elementwise"),
            Op::MatMulEpilogue { activation } => {
                bump("matmul_epilogue");
                match activation {
                    Activation::GeluErf | Activation::GeluTanh => bump("gelu"),
                    Activation::Silu => bump("silu"),
                    _ => {}
                }
            }
            _ => {}
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
