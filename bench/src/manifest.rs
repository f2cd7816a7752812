//! One benchmark run's manifest: what ran (workload, target, threads, the exact pass
//! pipeline), where (machine, git, toolchain), the raw timings and their statistics, and the
//! program's size. Documented by `schemas/bench-manifest.schema.json`; `validate` checks a
//! manifest against it, and the harness validates every manifest before writing it.

use crate::stats::Summary;
use crate::workloads::Kind;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

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

/// The machine.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Machine {
    /// CPU model name.
    pub cpu_model: String,
    /// Logical cores.
    pub cores: usize,
    /// Total memory in bytes.
    pub memory_bytes: u64,
    /// Operating system.
    pub os: String,
}

/// The build.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Build {
    /// `git rev-parse HEAD`, or `unknown` outside a checkout.
    pub git_sha: String,
    /// Uncommitted changes in the checkout.
    pub git_dirty: bool,
    /// `rustc --version`.
    pub rustc: String,
    /// Versions of Rustral and the crates its kernels come from.
    pub crates: BTreeMap<String, String>,
}

impl Machine {
    /// This machine, from /proc (fields it cannot read are `unknown` / 0).
    pub fn this() -> Machine {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let cpu_model = cpuinfo
            .lines()
            .find_map(|l| {
                l.strip_prefix("model name").and_then(|r| r.split_once(':')).map(|(_, v)| v.trim().to_string())
            })
            .unwrap_or_else(|| "unknown".into());
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
        let memory_bytes = meminfo
            .lines()
            .find_map(|l| l.strip_prefix("MemTotal:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .map_or(0, |kb| kb * 1024);
        let os_release = std::fs::read_to_string("/etc/os-release").unwrap_or_default();
        let os = os_release
            .lines()
            .find_map(|l| l.strip_prefix("PRETTY_NAME="))
            .map(|v| v.trim_matches('"').to_string())
            .unwrap_or_else(|| std::env::consts::OS.to_string());
        Machine { cpu_model, cores, memory_bytes, os }
    }
}

impl Build {
    /// This build: git state of `root`, the rustc on PATH, crate versions from `root`'s lock.
    pub fn this(root: &Path) -> Build {
        let run = |cmd: &str, args: &[&str]| {
            Command::new(cmd)
                .args(args)
                .current_dir(root)
                .output()
                .ok()
                .filter(|o| o.status.success())
                .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        };
        let git_sha = run("git", &["rev-parse", "HEAD"]).unwrap_or_else(|| "unknown".into());
        let git_dirty = run("git", &["status", "--porcelain", "--untracked-files=no"]).is_some_and(|s| !s.is_empty());
        let rustc = run("rustc", &["--version"]).unwrap_or_else(|| "unknown".into());
        let mut crates = BTreeMap::from([("rustral".to_string(), env!("CARGO_PKG_VERSION").to_string())]);
        let lock = std::fs::read_to_string(root.join("Cargo.lock")).unwrap_or_default();
        for block in lock.split("[[package]]") {
            let field = |key: &str| {
                block.lines().find_map(|l| {
                    l.strip_prefix(key).map(|v| v.trim().trim_start_matches('=').trim().trim_matches('"').to_string())
                })
            };
            if let (Some(name), Some(version)) = (field("name "), field("version "))
                && ["gemm", "cranelift-codegen", "egg", "rayon"].contains(&name.as_str())
            {
                crates.insert(name, version);
            }
        }
        Build { git_sha, git_dirty, rustc, crates }
    }
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
