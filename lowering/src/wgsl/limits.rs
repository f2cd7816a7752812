//! The WebGPU limits a program is compiled for (`--webgpu-limits`): a profile of the limits
//! that shape what the lowering may emit, with WebGPU's own names, and the check that every
//! kernel and every buffer of known size fits them. A program that does not fit fails to
//! compile, naming the kernel or buffer, the limit and the profile, rather than failing on the
//! user's device. Sizes that depend on symbolic dims are checked by the host at run time.

use super::{Role, WgslError, WgslProgram};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// WebGPU limits (a subset: those a compute program can exceed), with the names of
/// `GPUSupportedLimits`, so a browser's `adapter.limits` serialized as JSON reads as a profile.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Limits {
    /// Storage buffers one compute shader binds (its status word counts as one).
    pub max_storage_buffers_per_shader_stage: u64,
    /// Invocations in one workgroup.
    pub max_compute_invocations_per_workgroup: u64,
    /// A workgroup's x size.
    pub max_compute_workgroup_size_x: u64,
    /// Bytes of workgroup memory one shader declares.
    pub max_compute_workgroup_storage_size: u64,
    /// Bytes one storage binding covers.
    pub max_storage_buffer_binding_size: u64,
    /// Bytes of one buffer.
    pub max_buffer_size: u64,
    /// Workgroups along one dispatch dimension.
    pub max_compute_workgroups_per_dimension: u64,
    /// The alignment of a storage binding's offset: a tensor larger than one binding is bound
    /// in pieces that start at multiples of it.
    pub min_storage_buffer_offset_alignment: u64,
}

impl Default for Limits {
    /// WebGPU's default limits: what every implementation gives without being asked.
    fn default() -> Limits {
        Limits {
            max_storage_buffers_per_shader_stage: 8,
            max_compute_invocations_per_workgroup: 256,
            max_compute_workgroup_size_x: 256,
            max_compute_workgroup_storage_size: 16384,
            max_storage_buffer_binding_size: 128 << 20,
            max_buffer_size: 256 << 20,
            max_compute_workgroups_per_dimension: 65535,
            min_storage_buffer_offset_alignment: 256,
        }
    }
}

/// The named profiles `--webgpu-limits` takes besides `native` (the local adapter's, which the
/// wgpu runtime reads) and a JSON file.
pub const PROFILES: &[&str] = &["default", "chrome"];

impl Limits {
    /// A named profile: `default` (WebGPU's defaults, which every host gives) or `chrome`
    /// (what headless Chromium 156 gave on SwiftShader, its software adapter, measured with
    /// `web/tools/limits.html` into `web/limits/chromium-156-swiftshader.json`; Chrome on a
    /// real GPU reports that adapter's own limits, which the same page shows, to be saved as a
    /// FILE profile).
    pub fn profile(name: &str) -> Option<Limits> {
        match name {
            "default" => Some(Limits::default()),
            "chrome" => Some(Limits {
                max_storage_buffers_per_shader_stage: 10,
                max_compute_invocations_per_workgroup: 256,
                max_compute_workgroup_size_x: 256,
                max_compute_workgroup_storage_size: 32768,
                max_storage_buffer_binding_size: 1 << 30,
                max_buffer_size: 1 << 30,
                max_compute_workgroups_per_dimension: 65535,
                min_storage_buffer_offset_alignment: 256,
            }),
            _ => None,
        }
    }

    /// A profile from JSON: an object with WebGPU's limit names (camelCase, as
    /// `JSON.stringify` of a copy of `adapter.limits` writes them); limits it leaves out keep
    /// WebGPU's defaults and names it does not know are ignored.
    pub fn from_json(text: &str) -> Result<Limits, String> {
        serde_json::from_str(text).map_err(|e| e.to_string())
    }
}

/// Limits with the name they are reported under.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Profile {
    /// `default`, `chrome`, `native` or the file's path.
    pub name: String,
    /// The limits.
    pub limits: Limits,
}

impl Default for Profile {
    /// WebGPU's defaults: a program compiled for them runs on every WebGPU host.
    fn default() -> Profile {
        Profile { name: "default".into(), limits: Limits::default() }
    }
}

impl Profile {
    /// A named profile (see [`Limits::profile`]) or, for anything else, a JSON file of limits
    /// (`native` is the wgpu runtime's to resolve: `rustral_runtime::wgpu::Gpu::profile`).
    pub fn resolve(spec: &str) -> Result<Profile, String> {
        if let Some(limits) = Limits::profile(spec) {
            return Ok(Profile { name: spec.into(), limits });
        }
        let text = std::fs::read_to_string(spec).map_err(|e| {
            format!(
                "--webgpu-limits {spec}: {e} (a profile is one of {}, native, or a JSON file of limits)",
                PROFILES.join(", ")
            )
        })?;
        let limits = Limits::from_json(&text).map_err(|e| format!("{spec}: {e}"))?;
        Ok(Profile { name: spec.into(), limits })
    }
}

/// Check `p` against `limits`; `profile` names them in the error.
pub(crate) fn check(p: &WgslProgram, limits: &Limits, profile: &str) -> Result<(), WgslError> {
    let over = |place: String, limit: &'static str, needed: u64, allowed: u64| {
        if needed > allowed {
            Err(WgslError::Limit { place, limit, needed, allowed, profile: profile.to_string() })
        } else {
            Ok(())
        }
    };
    let none = BTreeMap::new();
    for k in &p.kernels {
        let place = || format!("kernel {} ({} at {:?})", k.name, k.op, k.provenance);
        over(
            place(),
            "maxStorageBuffersPerShaderStage",
            k.bindings.len() as u64,
            limits.max_storage_buffers_per_shader_stage,
        )?;
        let [x, y, z] = k.workgroup_size;
        over(
            place(),
            "maxComputeInvocationsPerWorkgroup",
            u64::from(x) * u64::from(y) * u64::from(z),
            limits.max_compute_invocations_per_workgroup,
        )?;
        over(place(), "maxComputeWorkgroupSizeX", u64::from(x), limits.max_compute_workgroup_size_x)?;
        over(
            place(),
            "maxComputeWorkgroupStorageSize",
            u64::from(k.workgroup_bytes),
            limits.max_compute_workgroup_storage_size,
        )?;
        // Dispatched as (min(n, max), ceil(n / max)): the second dimension must fit too.
        if let Ok(n) = k.workgroups.eval(&none) {
            let max = limits.max_compute_workgroups_per_dimension.max(1);
            over(place(), "maxComputeWorkgroupsPerDimension", n.div_ceil(max), max)?;
        }
    }
    let words = |b: usize| p.buffers[b].elements.eval(&none).ok();
    let place = |b: usize| {
        let buf = &p.buffers[b];
        match &buf.role {
            Role::Param { name } | Role::Input { name } => format!("buffer {b} ({name}, at {:?})", buf.provenance),
            _ => format!("buffer {b} ({:?})", buf.provenance),
        }
    };
    // What each binding covers: its range, or its whole buffer when that size is known.
    for k in &p.kernels {
        for bnd in &k.bindings {
            let Some(bytes) = bnd.size.or_else(|| words(bnd.buffer).map(|w| w * 4)) else { continue };
            over(place(bnd.buffer), "maxStorageBufferBindingSize", bytes, limits.max_storage_buffer_binding_size)?;
        }
    }
    for b in 0..p.buffers.len() {
        if matches!(p.buffers[b].role, Role::Alias { .. }) {
            continue;
        }
        let Some(w) = words(b) else { continue };
        over(place(b), "maxBufferSize", w * 4, limits.max_buffer_size)?;
    }
    Ok(())
}
