//! The pipelines, as straight-line lists of named steps: the names are the dump labels and
//! the ablation switches.

use crate::cleanup::{CanonicalizeLayout, Cse, Dce, FoldConstants, Simplify};
use crate::conv::{FoldBatchNorm, FuseConvEpilogue};
use crate::elementwise::FuseElementwise;
use crate::fuse::{Family, Fuse};
use crate::manager::Pass;

/// `O1`: clean-up only.
pub fn cleanup() -> Vec<Box<dyn Pass>> {
    vec![
        Box::new(Dce),
        Box::new(Cse),
        Box::new(FoldConstants),
        Box::new(Simplify),
        Box::new(CanonicalizeLayout),
        Box::new(Dce),
    ]
}

/// `O2`: clean-up, batch norm folded into convolutions, fusion by equality saturation
/// (attention before the layout clean-up rewrites the transposes it matches), convolution
/// epilogues, elementwise fusion of what is left.
pub fn full() -> Vec<Box<dyn Pass>> {
    let mut passes: Vec<Box<dyn Pass>> =
        vec![Box::new(Dce), Box::new(Cse), Box::new(FoldConstants), Box::new(Simplify), Box::new(FoldBatchNorm)];
    passes.extend(Family::ALL.map(|f| Box::new(Fuse::new(f)) as Box<dyn Pass>));
    passes.extend([
        Box::new(FuseConvEpilogue) as Box<dyn Pass>,
        Box::new(Dce),
        Box::new(CanonicalizeLayout),
        Box::new(Cse),
        Box::new(FuseElementwise),
        Box::new(Dce),
    ]);
    passes
}
