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
    /// Vendor, family, model and stepping, with the microarchitecture where the family says
    /// it (`AuthenticAMD family 25 model 1 stepping 1 (Zen 3)`): a VM's model name alone
    /// (`AMD EPYC`) does not tell a Zen 1 from a Zen 3, whose figures differ 2x. Empty in
    /// manifests written before it was recorded.
    #[serde(default)]
    pub cpu_id: String,
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
    /// What ran the CPU target's GEMMs: `gemm crate`, or the vendor library `RUSTRAL_BLAS`
    /// named (`crate::cpu::blas`); empty in older manifests and for peers.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub gemm: String,
    /// Features /proc/cpuinfo lists that this process's CPUID does not report: a run that
    /// stands in for a narrower CPU (`bench/cpuid/avx2_only.c` hides AVX-512), so that its
    /// figures are never read as the full machine's. Empty, and not written, otherwise.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cpuid_hidden: Vec<String>,
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
        let cpu_id = cpu_id(&cpuinfo);
        let gemm = crate::cpu::gemm_library();
        let cpuid_hidden = hidden_features(&cpuinfo, &cpu_features);
        Machine { cpu_model, cpu_id, cores, memory_bytes, os, cpu_features, cpu_kernels, gemm, cpuid_hidden }
    }

    /// The model name with its `cpu_id` where recorded, as reports name the machine.
    pub fn name(&self) -> String {
        if self.cpu_id.is_empty() { self.cpu_model.clone() } else { format!("{} [{}]", self.cpu_model, self.cpu_id) }
    }
}

/// The probed features the kernel's flags (/proc/cpuinfo) list and `seen` lacks. Linux spells
/// `sse4.2` as `sse4_2` and puts an underscore after `avx512` in `avx512_vnni`, `avx512_bf16`.
fn hidden_features(cpuinfo: &str, seen: &[String]) -> Vec<String> {
    let flags: Vec<&str> = cpuinfo
        .lines()
        .find_map(|l| l.strip_prefix("flags").and_then(|r| r.split_once(':')))
        .map_or(Vec::new(), |(_, v)| v.split_whitespace().collect());
    let linux = |f: &str| match f {
        "sse4.2" => "sse4_2".to_string(),
        "avx512vnni" | "avx512bf16" => f.replacen("avx512", "avx512_", 1),
        _ => f.to_string(),
    };
    crate::cpu::PROBED_FEATURES
        .iter()
        .filter(|f| flags.contains(&linux(f).as_str()) && !seen.iter().any(|s| s == *f))
        .map(|f| f.to_string())
        .collect()
}

/// `cpu_id` from the first processor of /proc/cpuinfo; empty where it has no family line.
fn cpu_id(cpuinfo: &str) -> String {
    let field = |name: &str| {
        cpuinfo.lines().find_map(|l| {
            let (k, v) = l.split_once(':')?;
            (k.trim() == name).then(|| v.trim().to_string())
        })
    };
    let (Some(vendor), Some(family), Some(model)) = (field("vendor_id"), field("cpu family"), field("model")) else {
        return String::new();
    };
    let stepping = field("stepping").unwrap_or_else(|| "?".into());
    let arch = match (vendor.as_str(), family.parse::<u32>(), model.parse::<u32>()) {
        ("AuthenticAMD", Ok(23), Ok(m)) => Some(if m < 0x30 { "Zen/Zen+" } else { "Zen 2" }),
        ("AuthenticAMD", Ok(25), Ok(m)) => Some(if m < 0x10 || (0x20..0x60).contains(&m) { "Zen 3" } else { "Zen 4" }),
        ("AuthenticAMD", Ok(26), _) => Some("Zen 5"),
        _ => None,
    };
    let id = format!("{vendor} family {family} model {model} stepping {stepping}");
    match arch {
        Some(a) => format!("{id} ({a})"),
        None => id,
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

#[cfg(test)]
mod tests {
    #[test]
    fn cpu_ids_name_the_family_and_the_zen_generation() {
        let info = |fam: u32, model: u32| {
            format!(
                "processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: {fam}\nmodel\t\t: {model}\nmodel name\t: AMD EPYC\nstepping\t: 1\n"
            )
        };
        assert_eq!(super::cpu_id(&info(23, 1)), "AuthenticAMD family 23 model 1 stepping 1 (Zen/Zen+)");
        assert_eq!(super::cpu_id(&info(25, 1)), "AuthenticAMD family 25 model 1 stepping 1 (Zen 3)");
        assert_eq!(super::cpu_id(&info(25, 17)), "AuthenticAMD family 25 model 17 stepping 1 (Zen 4)");
        let intel = "vendor_id\t: GenuineIntel\ncpu family\t: 6\nmodel\t\t: 143\nmodel name\t: Intel Xeon\n";
        assert_eq!(super::cpu_id(intel), "GenuineIntel family 6 model 143 stepping ?");
        assert_eq!(super::cpu_id("model name\t: Apple M2\n"), "");
    }

    #[test]
    fn hidden_features_are_the_flags_cpuid_did_not_report() {
        let info = "processor\t: 0\nflags\t\t: fpu sse4_2 avx avx2 fma avx512f avx512vl avx512_vnni avx512_bf16\n";
        let seen = |fs: &[&str]| fs.iter().map(|f| f.to_string()).collect::<Vec<_>>();
        let all = seen(&["sse4.2", "avx", "avx2", "fma", "avx512f", "avx512vl", "avx512vnni", "avx512bf16"]);
        assert!(super::hidden_features(info, &all).is_empty());
        assert_eq!(
            super::hidden_features(info, &seen(&["sse4.2", "avx", "avx2", "fma"])),
            ["avx512f", "avx512vl", "avx512vnni", "avx512bf16"]
        );
        // avx512dq is probed but not in the flags: never "hidden". No flags line hides nothing.
        assert_eq!(
            super::hidden_features(info, &seen(&["sse4.2", "avx", "avx2", "fma", "avx512f", "avx512vl"])),
            ["avx512vnni", "avx512bf16"]
        );
        assert!(super::hidden_features("model name\t: x\n", &[]).is_empty());
    }
}
