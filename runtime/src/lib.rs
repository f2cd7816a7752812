//! Rustral runtimes. For now this holds the reference interpreter, the oracle that defines the
//! meaning of every IR op and that every pass and lowering is tested against.

#![deny(missing_docs)]

#[cfg(feature = "candle")]
pub mod candle;
pub mod cpu;
mod feeds;
pub mod provenance;
pub mod reference;
mod tensor;
#[cfg(feature = "wgpu")]
pub mod wgpu;

pub use tensor::{HostTensor, ValuesDoNotFit, round_to, seeded_values};
