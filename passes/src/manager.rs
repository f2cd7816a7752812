//! The pass manager: a named pipeline per optimisation level, any pass switched off by name
//! (what ablations do), the verifier after every pass in tests and debug builds, statistics
//! per pass, and the IR text after every pass on request.

use crate::contract::Contract;
use crate::stats::{CompileStats, PassStats};
use rustral_ir::{Graph, NodeId, VerifyErrors, print, verify};
use std::collections::BTreeMap;
use std::time::Instant;
use thiserror::Error;

/// One graph-to-graph step.
pub trait Pass {
    /// Its name: the dump label and the ablation switch (`fuse-attention`).
    fn name(&self) -> &'static str;
    /// Rewrite `g` in place, recording what happened in `stats`.
    fn run(&self, g: &mut Graph, stats: &mut PassStats);
}

/// Why a compile failed.
#[derive(Debug, Error)]
pub enum PassError {
    /// A pass name that no pipeline has.
    #[error("unknown pass {name:?}; valid passes: {}", valid.join(", "))]
    UnknownPass {
        /// The name given.
        name: String,
        /// The names that exist.
        valid: Vec<&'static str>,
    },
    /// A pass left a graph that does not verify: a compiler bug, reported with the pass.
    #[error("pass {pass} broke the graph:\n{errors}")]
    BrokenByPass {
        /// The pass.
        pass: &'static str,
        /// What the verifier found.
        errors: VerifyErrors,
    },
    /// The input graph does not verify.
    #[error("input graph does not verify:\n{0}")]
    InvalidInput(VerifyErrors),
}

/// Optimisation levels.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OptLevel {
    /// Nothing.
    O0,
    /// Clean-up only.
    O1,
    /// Everything (the default).
    O2,
}

/// A pipeline with some passes switched off.
pub struct PassManager {
    passes: Vec<Box<dyn Pass>>,
    disabled: Vec<&'static str>,
    verify_each: bool,
    dump: bool,
    contracts: bool,
}

/// The result of a compile: the statistics and, if asked for, the IR after every pass.
#[derive(Debug)]
pub struct Compiled {
    /// Per-pass and final statistics.
    pub stats: CompileStats,
    /// `(pass name, IR text)` after each pass that ran, when dumping was on.
    pub dumps: Vec<(&'static str, String)>,
    /// Each fused node of the final graph with what it replaced, when recording was on
    /// ([`PassManager::record_contracts`]).
    pub contracts: BTreeMap<NodeId, Contract>,
}

impl PassManager {
    /// The pipeline for `level`. Its pass order is the whole compiler in one screen.
    pub fn new(level: OptLevel) -> PassManager {
        let passes: Vec<Box<dyn Pass>> = match level {
            OptLevel::O0 => vec![],
            OptLevel::O1 => crate::pipeline::cleanup(),
            OptLevel::O2 => crate::pipeline::full(),
        };
        PassManager { passes, disabled: vec![], verify_each: cfg!(debug_assertions), dump: false, contracts: false }
    }

    /// A custom pipeline (tools and tests build their own).
    pub fn with_passes(passes: Vec<Box<dyn Pass>>) -> PassManager {
        PassManager { passes, disabled: vec![], verify_each: cfg!(debug_assertions), dump: false, contracts: false }
    }

    /// Names of every pass any level runs, for error messages and ablation tools.
    pub fn all_pass_names() -> Vec<&'static str> {
        let mut names: Vec<&'static str> = crate::pipeline::full().iter().map(|p| p.name()).collect();
        names.sort_unstable();
        names.dedup();
        names
    }

    /// Switch a pass off by name; an unknown name is an error listing the valid ones.
    pub fn disable(mut self, name: &str) -> Result<PassManager, PassError> {
        let valid = PassManager::all_pass_names();
        match valid.iter().find(|v| **v == name) {
            Some(v) => {
                self.disabled.push(v);
                Ok(self)
            }
            None => Err(PassError::UnknownPass { name: name.to_string(), valid }),
        }
    }

    /// Verify after every pass (on by default in debug builds).
    pub fn verify_each(mut self, on: bool) -> PassManager {
        self.verify_each = on;
        self
    }

    /// Keep the IR text after every pass (`--print-after-all`).
    pub fn dump_each(mut self, on: bool) -> PassManager {
        self.dump = on;
        self
    }

    /// Record what every fused node replaced (`Compiled::contracts`), for checking fused
    /// kernels against the primitives they stand for (off by default: it copies every fused
    /// region).
    pub fn record_contracts(mut self, on: bool) -> PassManager {
        self.contracts = on;
        self
    }

    /// The names of the passes that will run, in order.
    pub fn pipeline(&self) -> Vec<&'static str> {
        self.passes.iter().map(|p| p.name()).filter(|n| !self.disabled.contains(n)).collect()
    }

    /// Run the pipeline on `g`.
    pub fn run(&self, g: &mut Graph) -> Result<Compiled, PassError> {
        verify(g).map_err(PassError::InvalidInput)?;
        let mut stats = CompileStats::default();
        let mut dumps = Vec::new();
        let mut contracts: BTreeMap<NodeId, Contract> = BTreeMap::new();
        for pass in self.passes.iter().filter(|p| !self.disabled.contains(&p.name())) {
            let mut ps = PassStats {
                pass: pass.name().to_string(),
                nodes_before: g.len(),
                record_contracts: self.contracts,
                ..PassStats::default()
            };
            let start = Instant::now();
            pass.run(g, &mut ps);
            ps.wall_ms = start.elapsed().as_secs_f64() * 1e3;
            ps.nodes_after = g.len();
            if self.verify_each {
                verify(g).map_err(|errors| PassError::BrokenByPass { pass: pass.name(), errors })?;
            }
            if self.dump {
                dumps.push((pass.name(), print(g)));
            }
            for (id, c) in std::mem::take(&mut ps.contracts) {
                let c = c.inline(&contracts);
                contracts.insert(id, c);
            }
            // Only live nodes keep their contracts: a node this pass replaced has been inlined
            // into its replacement's above, and dropping it now, before the dead node is
            // removed and its index reused, keeps a later node from inheriting it.
            let live = |id: NodeId| !g.users(id).is_empty() || g.outputs().iter().any(|o| o.node == id);
            contracts.retain(|&id, c| g.node(id).is_some_and(|n| n.op.name() == c.op) && live(id));
            stats.passes.push(ps);
        }
        stats.pipeline = self.pipeline().iter().map(|s| s.to_string()).collect();
        stats.fused = crate::stats::count_fused(g);
        stats.nodes = g.len();
        Ok(Compiled { stats, dumps, contracts })
    }
}
