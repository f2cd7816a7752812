//! Fusion by equality saturation. The graph is cut into regions (one per layer: the module
//! path up to its first numeric component, `encoder.layer.3`), so saturation cost grows with
//! depth linearly. Each region becomes an e-graph whose leaves are the values it reads; the
//! pass's rule family runs under node, iteration and time limits; a cost model of memory
//! traffic picks the cheapest equivalent program; the region's results are rebuilt from it.
//! A limit that is hit is recorded and the best program found is used: never an error.
//!
//! A region larger than `MAX_REGION_NODES` (many layers in one module, a long unrolled
//! loop) is saturated in windows of that many nodes, so that every window fits the e-graph's
//! node limit and saturation cost stays linear in the region's size.

mod analysis;
mod extract;
mod lang;
pub mod rules;

use crate::cleanup::bump;
use crate::manager::Pass;
use crate::stats::{EggStats, PassStats};
use analysis::{TensorAnalysis, TensorGraph};
use egg::{Id, Runner, StopReason, SymbolLang};
use lang::{Table, encode};
use rules::Rule;
use rustral_ir::{Graph, NodeId};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::Duration;

/// Saturation limits for one region.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Most e-nodes.
    pub nodes: usize,
    /// Most iterations.
    pub iterations: usize,
    /// Most time.
    pub time: Duration,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits { nodes: 20_000, iterations: 16, time: Duration::from_secs(2) }
    }
}

/// The most graph nodes one e-graph starts from. A larger region is cut, in topological
/// order, into windows of this many nodes, and cut again offset by half a window once the
/// first windows have fused: a pattern of at most half a window that the first cut split is
/// whole in a second window. The e-graph of a window this size stays well under
/// `Limits::default().nodes` with every family's rules.
pub const MAX_REGION_NODES: usize = 1_000;

/// Which rules a fusion pass runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Family {
    /// LayerNorm with and without affine.
    LayerNorm,
    /// RMSNorm.
    RmsNorm,
    /// Softmax along any axis.
    Softmax,
    /// Cross-entropy: log-softmax picked by a one-hot of the targets.
    CrossEntropy,
    /// Scaled dot-product attention.
    Attention,
    /// GELU, both forms.
    Gelu,
    /// SiLU.
    Silu,
    /// Matmul bias and activation epilogues.
    MatMulEpilogue,
}

/// What a fusion family is: its pass, its rules and the ops they build.
#[derive(Clone, Copy, Debug)]
pub struct FamilyInfo {
    /// The pass name: the dump label and the `--disable-pass` switch.
    pub pass: &'static str,
    /// The family's own rules (the algebra rules come with every family).
    pub rules: fn() -> Vec<Rule>,
    /// The op kinds its rules build, as the op declarations name them: what the compile
    /// statistics count and the benchmark report attributes to the pass.
    pub fuses: &'static [&'static str],
}

impl Family {
    /// Every family, in the order the O2 pipeline runs them (attention after softmax, which it
    /// reads; epilogues last, so GELU and SiLU are fused first and then folded into matmuls).
    pub const ALL: [Family; 8] = [
        Family::LayerNorm,
        Family::RmsNorm,
        Family::Softmax,
        Family::CrossEntropy,
        Family::Attention,
        Family::Gelu,
        Family::Silu,
        Family::MatMulEpilogue,
    ];

    /// The family table: one row per family.
    pub fn info(self) -> FamilyInfo {
        let row = |pass, rules, fuses| FamilyInfo { pass, rules, fuses };
        match self {
            Family::LayerNorm => row("fuse-layer-norm", rules::norm::layer_norm, &["layer_norm"]),
            Family::RmsNorm => row("fuse-rms-norm", rules::norm::rms_norm, &["rms_norm"]),
            Family::Softmax => row("fuse-softmax", rules::softmax::rules, &["softmax"]),
            Family::CrossEntropy => row("fuse-cross-entropy", rules::loss::cross_entropy, &["cross_entropy"]),
            Family::Attention => row("fuse-attention", rules::attention::rules, &["attention"]),
            Family::Gelu => row("fuse-gelu", rules::activation::gelu, &["gelu"]),
            Family::Silu => row("fuse-silu", rules::activation::silu, &["silu"]),
            Family::MatMulEpilogue => row("fuse-matmul-epilogue", rules::epilogue::rules, &["matmul_epilogue"]),
        }
    }

    /// The pass name.
    pub fn pass_name(self) -> &'static str {
        self.info().pass
    }

    /// The family's rules (the algebra rules come with every family).
    pub fn rules(self) -> Vec<Rule> {
        let mut r = rules::algebra::rules();
        r.extend((self.info().rules)());
        r
    }
}

/// Every fusion pass of the O2 pipeline with the op kinds it builds: the families, then
/// elementwise fusion. The benchmark's ablations switch these off one at a time.
pub fn fusion_passes() -> Vec<(&'static str, &'static [&'static str])> {
    let mut passes: Vec<_> = Family::ALL.iter().map(|f| (f.info().pass, f.info().fuses)).collect();
    passes.push((crate::elementwise::PASS_NAME, &["fused_elementwise"]));
    passes
}

/// One fusion pass: a rule family saturated region by region.
pub struct Fuse {
    /// Its rules.
    pub family: Family,
    /// Saturation limits per region.
    pub limits: Limits,
}

impl Fuse {
    /// The pass for `family` with default limits.
    pub fn new(family: Family) -> Fuse {
        Fuse { family, limits: Limits::default() }
    }
}

impl Pass for Fuse {
    fn name(&self) -> &'static str {
        self.family.pass_name()
    }

    fn run(&self, g: &mut Graph, stats: &mut PassStats) {
        // Dead nodes (what an earlier fusion replaced) are not worth saturating.
        crate::cleanup::Dce.run(g, &mut PassStats::default());
        let rules = self.family.rules();
        let algebra: HashSet<String> = rules::algebra::rules().iter().map(|r| r.name.to_string()).collect();
        let mut egg_stats = EggStats::default();
        let mut fuse = |g: &mut Graph, window: &[NodeId], egg_stats: &mut EggStats| {
            for (rule, n) in fuse_region(g, window, &rules, &algebra, self.limits, egg_stats) {
                bump(stats, &rule, n);
            }
        };
        let mut split = Vec::new();
        for (key, region) in regions(g) {
            if region.len() <= MAX_REGION_NODES {
                fuse(g, &region, &mut egg_stats);
                continue;
            }
            for window in region.chunks(MAX_REGION_NODES) {
                fuse(g, window, &mut egg_stats);
            }
            split.push((key, region.len()));
        }
        if !split.is_empty() {
            // The second cut, offset by half a window, over what is left of the split regions.
            crate::cleanup::Dce.run(g, &mut PassStats::default());
            let mut left: HashMap<String, Vec<NodeId>> = regions(g).into_iter().collect();
            for (key, before) in split {
                let region = left.remove(&key).unwrap_or_default();
                let half = MAX_REGION_NODES / 2;
                let (first, rest) = region.split_at(half.min(region.len()));
                fuse(g, first, &mut egg_stats);
                for window in rest.chunks(MAX_REGION_NODES) {
                    fuse(g, window, &mut egg_stats);
                }
                egg_stats.split.push(format!(
                    "region `{key}`: {before} nodes, over {MAX_REGION_NODES}: saturated in windows of \
                     {MAX_REGION_NODES} nodes, then again offset by {half} ({} nodes left)",
                    region.len()
                ));
            }
        }
        stats.egg = Some(egg_stats);
    }
}

/// The region key of a module path: up to and including its first numeric component
/// (`encoder.layer.3.attention` -> `encoder.layer.3`), else its first component.
fn region_key(path: &str) -> &str {
    let mut end = 0;
    for (i, part) in path.split('.').enumerate() {
        end += part.len() + usize::from(i > 0);
        if !part.is_empty() && part.bytes().all(|b| b.is_ascii_digit()) {
            return &path[..end];
        }
    }
    path.split('.').next().unwrap_or("")
}

/// Non-source nodes grouped by region (with its key), each in topological order; regions in
/// order of first appearance.
fn regions(g: &Graph) -> Vec<(String, Vec<NodeId>)> {
    let Ok(order) = g.topo_order() else { return vec![] };
    let mut keys: Vec<String> = Vec::new();
    let mut groups: HashMap<String, Vec<NodeId>> = HashMap::new();
    for id in order {
        let node = g.node(id).expect("ordered node exists");
        if node.op.is_source() {
            continue;
        }
        let key = region_key(&node.provenance).to_string();
        if !groups.contains_key(&key) {
            keys.push(key.clone());
        }
        groups.entry(key).or_default().push(id);
    }
    keys.into_iter()
        .map(|k| {
            let nodes = groups.remove(&k).unwrap_or_default();
            (k, nodes)
        })
        .collect()
}

/// Saturate one region and, if a family rule (one not in `algebra`) fired, rebuild its
/// results from the cheapest program. Returns how often each family rule fired.
fn fuse_region(
    g: &mut Graph,
    region: &[NodeId],
    rules: &[Rule],
    algebra: &HashSet<String>,
    limits: Limits,
    stats: &mut EggStats,
) -> BTreeMap<String, usize> {
    let members: HashSet<NodeId> = region.iter().copied().collect();
    let mut egraph = TensorGraph::new(TensorAnalysis { table: Table::default() });
    let mut class_of: HashMap<NodeId, Id> = HashMap::new();
    let mut provenance: Vec<(Id, String)> = Vec::new();
    for &id in region {
        let node = g.node(id).expect("region node exists").clone();
        let operands = g.operands(id);
        let rank = operands.first().and_then(|&o| g.node(o)).map_or(0, |n| n.ty.rank());
        let mut children = Vec::with_capacity(operands.len());
        for o in &operands {
            let child = match class_of.get(o) {
                Some(&c) if members.contains(o) => c,
                _ => {
                    let sym = egraph.analysis.table.leaf(g, *o);
                    egraph.add(SymbolLang::leaf(sym))
                }
            };
            children.push(child);
        }
        let class = match encode(&node.op, rank) {
            Some(sym) => egraph.add(SymbolLang::new(sym, children)),
            None => {
                let sym = egraph.analysis.table.leaf(g, id);
                egraph.add(SymbolLang::leaf(sym))
            }
        };
        class_of.insert(id, class);
        provenance.push((class, node.provenance.clone()));
    }
    let roots: Vec<NodeId> = region
        .iter()
        .copied()
        .filter(|&id| g.outputs().iter().any(|o| o.node == id) || g.users(id).iter().any(|u| !members.contains(u)))
        .collect();
    let runner = Runner::default()
        .with_egraph(egraph)
        .with_node_limit(limits.nodes)
        .with_iter_limit(limits.iterations)
        .with_time_limit(limits.time)
        .run(rules);
    record(stats, &runner);
    let mut fired: BTreeMap<String, usize> = BTreeMap::new();
    for it in &runner.iterations {
        for (name, n) in &it.applied {
            *fired.entry(name.to_string()).or_insert(0) += n;
        }
    }
    fired.retain(|k, _| !algebra.contains(k));
    if fired.is_empty() {
        return BTreeMap::new();
    }
    let egraph = runner.egraph;
    let mut prov_of: HashMap<Id, String> = HashMap::new();
    for (class, p) in provenance.into_iter().rev() {
        prov_of.insert(egraph.find(class), p);
    }
    let mut rebuild = extract::Rebuild::new(&egraph, prov_of);
    let mut replacements = Vec::new();
    for root in roots {
        match rebuild.build(g, egraph.find(class_of[&root])) {
            Ok(new) => replacements.push((root, new)),
            Err(why) => {
                let module = g.node(root).map(|n| n.provenance.clone()).unwrap_or_default();
                stats.abandoned.push(format!("region `{module}`: {why}; left unfused"));
                return BTreeMap::new();
            }
        }
    }
    for (old, new) in replacements {
        if old != new {
            g.replace_all_uses(old, new);
        }
    }
    fired
}

fn record(stats: &mut EggStats, runner: &Runner<SymbolLang, TensorAnalysis>) {
    stats.regions += 1;
    stats.iterations += runner.iterations.len();
    stats.max_egraph_nodes = stats.max_egraph_nodes.max(runner.egraph.total_number_of_nodes());
    stats.max_egraph_classes = stats.max_egraph_classes.max(runner.egraph.number_of_classes());
    let reason = match &runner.stop_reason {
        Some(StopReason::Saturated) => "saturated",
        Some(StopReason::IterationLimit(_)) => "iteration_limit",
        Some(StopReason::NodeLimit(_)) => "node_limit",
        Some(StopReason::TimeLimit(_)) => "time_limit",
        _ => "other",
    };
    *stats.stop_reasons.entry(reason.to_string()).or_insert(0) += 1;
}
