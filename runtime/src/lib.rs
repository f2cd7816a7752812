//! Rustral's runtimes: the reference interpreter (the oracle that defines the meaning of every
//! IR op, which every pass and target is tested against), the shared Program executor
//! (`exec`), and the targets that run lowered programs: the CPU target (SIMD kernels, a
//! Cranelift JIT for fused elementwise bodies), the Candle target (candle-core on its CPU,
//! CUDA or Metal devices) and the WGSL target's wgpu runtime.

#![deny(missing_docs)]

#[cfg(feature = "candle")]
pub mod candle;
pub mod collective;
pub mod cpu;
pub mod exec;
mod feeds;
pub mod provenance;
pub mod reference;
mod tensor;
#[cfg(feature = "wgpu")]
pub mod wgpu;

pub use tensor::{HostTensor, ValuesDoNotFit, round_to, seeded_values};
