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
mod explain;
mod extract;
mod lang;
pub mod rules;

use crate::cleanup::bump;
use crate::contract::Contract;
use crate::manager::Pass;
use crate::stats::{EggStats, PassStats, RegionReport};
use analysis::{TensorAnalysis, TensorGraph};
use egg::{Id, Language, Runner, StopReason, SymbolLang};
use lang::{Table, encode};
use rules::Rule;
use rustral_ir::{Graph, NodeId};
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::time::{Duration, Instant};

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
        let algebra: HashSet<String> = rules::algebra::rules().iter().map(|r| r.name().to_string()).collect();
        let family: BTreeSet<String> =
            rules.iter().map(|r| r.name().to_string()).filter(|n| !algebra.contains(n)).collect();
        let run = Saturation {
            rules: &rules,
            algebra: &algebra,
            family: &family,
            fuses: self.family.info().fuses,
            pass: self.name(),
        };
        let mut egg_stats = EggStats::default();
        let record = stats.record_contracts;
        let mut contracts = Vec::new();
        let mut fuse = |g: &mut Graph, label: String, window: &[NodeId], egg_stats: &mut EggStats| {
            let wanted = if record { Some(&mut contracts) } else { None };
            for (rule, n) in fuse_region(g, &label, window, &run, self.limits, egg_stats, wanted) {
                bump(stats, &rule, n);
            }
        };
        let mut split = Vec::new();
        for (key, region) in regions(g) {
            if region.len() <= MAX_REGION_NODES {
                fuse(g, key, &region, &mut egg_stats);
                continue;
            }
            let windows = region.len().div_ceil(MAX_REGION_NODES);
            for (i, window) in region.chunks(MAX_REGION_NODES).enumerate() {
                fuse(g, format!("{key} (window {} of {windows})", i + 1), window, &mut egg_stats);
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
                let windows = 1 + rest.len().div_ceil(MAX_REGION_NODES);
                fuse(g, format!("{key} (offset window 1 of {windows})"), first, &mut egg_stats);
                for (i, window) in rest.chunks(MAX_REGION_NODES).enumerate() {
                    fuse(g, format!("{key} (offset window {} of {windows})", i + 2), window, &mut egg_stats);
                }
                egg_stats.split.push(format!(
                    "region `{key}`: {before} nodes, over {MAX_REGION_NODES}: saturated in windows of \
                     {MAX_REGION_NODES} nodes, then again offset by {half} ({} nodes left)",
                    region.len()
                ));
            }
        }
        stats.egg = Some(egg_stats);
        stats.contracts = contracts;
    }
}

/// What one pass saturates each region with.
pub(crate) struct Saturation<'a> {
    /// The family's rules and the algebra rules.
    pub(crate) rules: &'a [Rule],
    /// The algebra rules' names: their firing alone fuses nothing.
    pub(crate) algebra: &'a HashSet<String>,
    /// The family's own rules' names: the ones a near miss is reported for.
    pub(crate) family: &'a BTreeSet<String>,
    /// The op kinds the family builds.
    pub(crate) fuses: &'a [&'a str],
    /// The pass's name.
    pub(crate) pass: &'static str,
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
    label: &str,
    region: &[NodeId],
    run: &Saturation<'_>,
    limits: Limits,
    stats: &mut EggStats,
    contracts: Option<&mut Vec<(NodeId, Contract)>>,
) -> BTreeMap<String, usize> {
    let start = Instant::now();
    let members: HashSet<NodeId> = region.iter().copied().collect();
    let mut egraph = TensorGraph::new(TensorAnalysis { table: Table::default() });
    let mut class_of: HashMap<NodeId, Id> = HashMap::new();
    let mut leaf_class: HashMap<NodeId, Id> = HashMap::new();
    let mut provenance: Vec<(Id, String)> = Vec::new();
    let mut written: Vec<SymbolLang> = Vec::new();
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
                    let c = egraph.add(SymbolLang::leaf(sym));
                    leaf_class.insert(*o, c);
                    c
                }
            };
            children.push(child);
        }
        let class = match encode(&node.op, rank) {
            Some(sym) => {
                let enode = SymbolLang::new(sym, children);
                written.push(enode.clone());
                egraph.add(enode)
            }
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
    let ledger = explain::Ledger::default();
    let runner = Runner::default()
        .with_egraph(egraph)
        .with_node_limit(limits.nodes)
        .with_iter_limit(limits.iterations)
        .with_time_limit(limits.time)
        .with_scheduler(explain::Timed::new(ledger.clone()))
        .run(run.rules.iter().map(|r| &r.rewrite));
    let stop = record(stats, &runner);
    let mut fired: BTreeMap<String, usize> = BTreeMap::new();
    for it in &runner.iterations {
        for (name, n) in &it.applied {
            *fired.entry(name.to_string()).or_insert(0) += n;
        }
    }
    fired.retain(|k, _| !run.algebra.contains(k));
    let mut report = RegionReport {
        region: label.to_string(),
        nodes: region.len(),
        egraph_nodes: runner.egraph.total_number_of_nodes(),
        egraph_classes: runner.egraph.number_of_classes(),
        iterations: runner.iterations.len(),
        stop: stop.to_string(),
        ..RegionReport::default()
    };
    let mut egraph = runner.egraph;
    let mut prov_of: HashMap<Id, String> = HashMap::new();
    for (class, p) in provenance.into_iter().rev() {
        prov_of.insert(egraph.find(class), p);
    }
    report.rules = std::mem::take(&mut *ledger.borrow_mut());
    report.rules.retain(|_, r| r.matches > 0);
    for (name, r) in report.rules.iter_mut() {
        r.algebra = run.algebra.contains(name);
    }
    // The classes of the program the region ends as: near misses are reported there only, not
    // in alternatives a fusion made dead. `None` while the region stays as written.
    let mut live: Option<HashSet<Id>> = None;
    let mut replacements = Vec::new();
    if !fired.is_empty() {
        // The e-nodes the model wrote, in the e-graph's final ids: extraction prefers them
        // among programs of equal cost, so a region is rebuilt as written wherever no rule
        // saved traffic.
        let written: HashSet<SymbolLang> = written.into_iter().map(|n| n.map_children(|c| egraph.find(c))).collect();
        let origins = extract::Origins::new(&egraph, &class_of, &leaf_class, contracts.is_some());
        let mut rebuild = extract::Rebuild::new(&egraph, &prov_of, &written, &origins);
        for &root in &roots {
            match rebuild.build(g, egraph.find(class_of[&root])) {
                Ok(new) => replacements.push((root, new)),
                Err(why) => {
                    let module = g.node(root).map(|n| n.provenance.clone()).unwrap_or_default();
                    stats.abandoned.push(format!("region `{module}`: {why}; left unfused"));
                    replacements.clear();
                    fired.clear();
                    break;
                }
            }
        }
        if !fired.is_empty() {
            live = Some(rebuild.classes().collect());
            if let Some(contracts) = contracts {
                let rules: Vec<String> = fired.keys().cloned().collect();
                for (node, replaced) in std::mem::take(&mut rebuild.replaced) {
                    let op = g.node(node).map(|n| n.op.name().to_string()).unwrap_or_default();
                    contracts.push((node, Contract::new(run.pass, &rules, &op, replaced)));
                }
            }
        }
    }
    report.rebuilt = !fired.is_empty();
    let at = |c: Id| prov_of.get(&c).cloned().unwrap_or_else(|| label.to_string());
    report.near_misses = explain::near_misses(&mut egraph, run, live.as_ref(), &at);
    for (old, new) in replacements {
        if old != new {
            g.replace_all_uses(old, new);
        }
    }
    report.ms = start.elapsed().as_secs_f64() * 1e3;
    stats.explained.push(report);
    fired
}

/// Count the region in `stats`; returns why saturation stopped.
fn record(stats: &mut EggStats, runner: &Runner<SymbolLang, TensorAnalysis>) -> &'static str {
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
    reason
}
