//! One benchmark run's manifest: what ran (workload, target, threads, the exact pass
//! pipeline), where (machine, git, toolchain), the raw timings and their statistics, and the
//! program's size. Documented by `schemas/bench-manifest.schema.json`; `validate` checks a
//! manifest against it, and the harness validates every manifest before writing it.

use crate::stats::Summary;
use crate::workloads::Kind;
pub use rustral_runtime::provenance::{Build, Machine};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::Path;

/// The manifest format's version.
pub const SCHEMA_VERSION: u32 = 1;

/// The schema, carried in the binary so that it validates wherever it runs.
pub const SCHEMA: &str = include_str!("../../schemas/bench-manifest.schema.json");

/// A run's manifest.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Manifest {
    /// `SCHEMA_VERSION`.
    pub schema_version: u32,
    /// Seconds since the Unix epoch when the run finished.
    pub unix_time: u64,
    /// What ran.
    pub workload: WorkloadInfo,
    /// `cpu` for Rustral's CPU target, `torch-eager` / `torch-compile` from the Python side.
    pub target: String,
    /// Worker threads.
    pub threads: usize,
    /// The pass pipeline.
    pub pipeline: Pipeline,
    /// Every timed run, in milliseconds, in the order they ran.
    pub timings_ms: Vec<f64>,
    /// Statistics of `timings_ms`.
    pub stats: Summary,
    /// The compiled program.
    pub program: ProgramInfo,
    /// Milliseconds per op kind in one profiled run (kernels grouped by op name).
    pub kernel_ms_by_op: BTreeMap<String, f64>,
    /// The machine.
    pub machine: Machine,
    /// The build.
    pub build: Build,
}

/// Which workload.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct WorkloadInfo {
    /// Its name.
    pub name: String,
    /// Op or model.
    pub kind: Kind,
    /// What and at which shape.
    pub description: String,
}

/// The pass pipeline as run.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Pipeline {
    /// `O0`, `O2` or `O2-<disabled pass>`: how reports label the run.
    pub label: String,
    /// `O0`, `O1` or `O2`.
    pub level: String,
    /// Passes switched off.
    pub disabled: Vec<String>,
    /// The passes that ran, in order.
    pub passes: Vec<String>,
}

/// The lowered program's size.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ProgramInfo {
    /// Kernels in the program.
    pub kernels: usize,
    /// Kernels launched per run (those computed from parameters alone run once at bind time).
    pub dispatches: usize,
    /// Bytes of intermediates with the memory plan's reuse.
    pub planned_peak_bytes: usize,
    /// Bytes if every intermediate had its own storage.
    pub unplanned_bytes: usize,
    /// Kernels per op kind (`layer_norm`, `fused_elementwise`, ...).
    pub kernel_ops: BTreeMap<String, usize>,
}

/// Check `value` against the schema; the errors, one per line, name the failing path.
pub fn validate(value: &serde_json::Value) -> Result<(), String> {
    let schema: serde_json::Value = serde_json::from_str(SCHEMA).expect("the bundled schema is JSON");
    let validator = jsonschema::validator_for(&schema).expect("the bundled schema compiles");
    let errors: Vec<String> = validator.iter_errors(value).map(|e| format!("{}: {e}", e.instance_path())).collect();
    if errors.is_empty() { Ok(()) } else { Err(errors.join("\n")) }
}

/// Validate, then write `manifest` as pretty JSON to `path`.
pub fn write(manifest: &Manifest, path: &Path) -> Result<(), String> {
    let value = serde_json::to_value(manifest).map_err(|e| e.to_string())?;
    validate(&value).map_err(|e| format!("manifest for {} does not validate:\n{e}", path.display()))?;
    let text = serde_json::to_string_pretty(&value).map_err(|e| e.to_string())? + "\n";
    std::fs::write(path, text).map_err(|e| format!("{}: {e}", path.display()))
}
