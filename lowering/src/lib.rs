//! Lowering: a verified graph becomes a [`Program`], the unit every target runs. A Program is
//! typed buffers (shapes symbolic where the graph's are), one kernel per remaining node, the
//! schedule, and a memory plan that lets buffers share storage once their values are dead.
//! Kernels carry the IR op they compute; each target maps ops to its own implementations.

#![deny(missing_docs)]

mod plan;
mod program;

pub use plan::{MemoryPlan, PlanReport};
pub use program::{Buffer, BufferKind, Collective, Kernel, LowerError, Program, ScheduleError, lower};

#[cfg(feature = "wgsl")]
pub mod wgsl;
