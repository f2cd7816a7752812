//! Rustral: a deep-learning framework built as a compiler.
//!
//! Models are traced into a typed dataflow IR ([`ir`]), optimized by passes, lowered to
//! targets and run ([`runtime`]). This facade re-exports the crates so that users depend on
//! one; [`prelude`] holds what model code and tools use most.

pub use rustral_frontend as frontend;
pub use rustral_ir as ir;
pub use rustral_lowering as lowering;
pub use rustral_models as models;
pub use rustral_passes as passes;
pub use rustral_runtime as runtime;

/// The names most programs need.
pub mod prelude {
    pub use rustral_ir::{DType, Dim, Graph, NodeId, Op, Shape, TensorType};
    pub use rustral_runtime::HostTensor;
    pub use rustral_runtime::reference::evaluate;
}
