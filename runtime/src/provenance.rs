//! Where a result came from: the machine and the build. Benchmark manifests and training run
//! manifests both record them.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

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
    /// The CPU's SIMD features (`crate::cpu::cpu_features`); empty in manifests
    /// written before they were recorded.
    #[serde(default)]
    pub cpu_features: Vec<String>,
    /// The CPU target's kernel path in this process: `avx512`, `avx2` or `baseline`
    /// (`RUSTRAL_CPU_KERNELS` can narrow it); empty in older manifests.
    #[serde(default)]
    pub cpu_kernels: String,
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
        let cpu_features = crate::cpu::cpu_features();
        let cpu_kernels = crate::cpu::kernel_path().to_string();
        Machine { cpu_model, cores, memory_bytes, os, cpu_features, cpu_kernels }
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
