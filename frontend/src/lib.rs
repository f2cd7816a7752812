//! Rustral's tracing frontend. A model is a Rust function over a [`ForwardCtx`]; running it
//! records every tensor op into a typed `rustral_ir::Graph`, with the module path of each node.
//! Layers in [`nn`] trace primitives only (LayerNorm is mean, sub, mul, rsqrt, ...): finding
//! the big ops is the passes' job, so with fusion off a program really runs the primitives.

#![deny(missing_docs)]

mod ctx;
mod error;
pub mod gguf;
mod init;
pub mod nn;
mod params;
mod tensor;

pub use ctx::{
    ForwardCtx, KvCache, Mode, PAST, POSITION, PRESENT, Profiler, RNG_STEP, ShapePolicy, TraceEvent, TraceOptions,
    Traced, UPDATE, trace, trace_model, trace_named,
};
pub use error::{Error, Result};
pub use init::{Init, ParamSpec};
pub use params::{ParamStore, ParamValue};
pub use rustral_ir::{DType, Dim, QuantFormat};
pub use tensor::{Tensor, Window};
