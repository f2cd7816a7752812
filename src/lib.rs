//! Rustral: a deep-learning framework built as a compiler.
//!
//! Models are traced into a typed dataflow IR ([`ir`]) through [`frontend`], optimized by
//! passes, lowered to targets and run ([`runtime`]). This facade re-exports the crates so
//! that users depend on one; [`prelude`] holds what model code and tools use most.

#![deny(missing_docs)]

pub use rustral_frontend as frontend;
pub use rustral_ir as ir;
#[cfg(feature = "compiler")]
pub use rustral_lowering as lowering;
pub use rustral_models as models;
#[cfg(feature = "compiler")]
pub use rustral_passes as passes;
#[cfg(feature = "compiler")]
pub use rustral_runtime as runtime;

#[doc(hidden)]
pub mod model_file;

#[cfg(feature = "compiler")]
pub mod check_kernels;
#[cfg(feature = "compiler")]
mod session;
#[cfg(feature = "compiler")]
pub use session::{CompileOptions, Session, State, Target, host_params};
#[cfg(feature = "generate")]
pub mod generate;
#[cfg(feature = "compiler")]
pub mod gradcheck;
#[cfg(feature = "npy")]
pub mod npy;
#[cfg(feature = "compiler")]
pub mod train;

/// Any error a Rustral program can meet, from tracing to running.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A session method asked of a target that does not have it.
    #[error("{0}")]
    Usage(String),
    /// Tracing or parameter handling failed.
    #[error(transparent)]
    Frontend(#[from] rustral_frontend::Error),
    /// An IR error (parse, verify, decode).
    #[error(transparent)]
    Ir(#[from] rustral_ir::IrError),
    /// Evaluation failed.
    #[cfg(feature = "compiler")]
    #[error(transparent)]
    Eval(#[from] rustral_runtime::reference::EvalError),
    /// A collective of a data-parallel run failed (a rank timed out, the ranks' programs
    /// differ), or the launcher's environment cannot be used.
    #[cfg(feature = "compiler")]
    #[error(transparent)]
    Collective(#[from] rustral_runtime::collective::CollectiveError),
    /// A data-parallel schedule asked for an output the program cannot sum.
    #[cfg(feature = "compiler")]
    #[error(transparent)]
    Schedule(#[from] rustral_lowering::ScheduleError),
    /// The pass pipeline failed (an unknown pass name, a pass that broke the graph).
    #[cfg(feature = "compiler")]
    #[error(transparent)]
    Passes(#[from] rustral_passes::PassError),
    /// Differentiation failed (an op without a gradient, a loss that is not a scalar).
    #[cfg(feature = "compiler")]
    #[error(transparent)]
    Grad(Box<rustral_passes::grad::GradError>),
    /// Lowering failed.
    #[cfg(feature = "compiler")]
    #[error(transparent)]
    Lower(#[from] rustral_lowering::LowerError),
    /// The CPU target failed.
    #[cfg(feature = "compiler")]
    #[error(transparent)]
    Cpu(#[from] rustral_runtime::cpu::CpuError),
    /// The Candle target failed.
    #[cfg(feature = "candle")]
    #[error(transparent)]
    Candle(#[from] rustral_runtime::candle::CandleError),
    /// WGSL lowering failed (an op the target cannot express, or a shader naga rejected).
    #[cfg(feature = "wgsl")]
    #[error(transparent)]
    Wgsl(#[from] rustral_lowering::wgsl::WgslError),
    /// The WGSL target's runtime failed (no adapter, a limit, a kernel's data error).
    #[cfg(feature = "wgsl")]
    #[error(transparent)]
    Wgpu(#[from] rustral_runtime::wgpu::WgpuError),
}

#[cfg(feature = "compiler")]
impl From<rustral_passes::grad::GradError> for Error {
    fn from(e: rustral_passes::grad::GradError) -> Error {
        Error::Grad(Box::new(e))
    }
}

/// Rustral's result type; model files return `rustral::Result<Vec<Tensor>>`.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The names most programs need: `use rustral::prelude::*;`.
pub mod prelude {
    #[cfg(feature = "compiler")]
    pub use crate::{CompileOptions, Session, Target};
    pub use rustral_frontend::nn::Module;
    pub use rustral_frontend::{
        ForwardCtx, Init, Mode, ParamStore, ShapePolicy, Tensor, TraceOptions, trace, trace_model,
    };
    pub use rustral_ir::{DType, Dim, Graph, NodeId, Op, Shape, TensorType};
    #[cfg(feature = "compiler")]
    pub use rustral_passes::OptLevel;
    #[cfg(feature = "compiler")]
    pub use rustral_runtime::HostTensor;
    #[cfg(feature = "compiler")]
    pub use rustral_runtime::reference::evaluate;
}
