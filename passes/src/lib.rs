//! Rustral's graph passes. [`PassManager`] runs a named pipeline (`O0`, `O1`, `O2`) with any
//! pass switchable off by name; fusion passes saturate an e-graph per layer with egg and
//! extract the cheapest program; elementwise fusion groups what is left into single kernels.

#![deny(missing_docs)]

mod cleanup;
pub mod contract;
mod conv;
mod elementwise;
pub mod fuse;
mod fusion_report;
pub mod grad;
mod manager;
mod pipeline;
mod stats;

pub use cleanup::{CanonicalizeLayout, Cse, Dce, FoldConstants, Simplify};
pub use contract::{Contract, RuleRef};
pub use conv::{FoldBatchNorm, FuseConvEpilogue};
pub use elementwise::{FuseElementwise, MAX_GROUP_OPS, MAX_OPERANDS};
pub use fusion_report::explain_fusion;
pub use manager::{Compiled, OptLevel, Pass, PassError, PassManager};
pub use stats::{CompileStats, EggStats, NearMiss, PassStats, RegionReport, RuleReport, count_fused};
