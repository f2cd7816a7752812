//! naga's parse and validation of every generated shader, with WebGPU's default capabilities
//! (nothing beyond what every WebGPU implementation offers), before it leaves the compiler.
//!
//! With `RUSTRAL_WGSL_DUMP=DIR` set, every validated shader is also written to `DIR`, one file
//! per distinct text (comments aside), so a second validator can check all that a run
//! emitted: `scripts/test.sh` has Tint (Dawn) compile every shader the tests made
//! (`scripts/tint-check.sh`), since naga and Tint disagree on what they accept.

use super::{WgslError, WgslKernel};
use naga::valid::{Capabilities, ValidationFlags, Validator};

/// Parse and validate a kernel's shader; a failure is a compiler bug reported with the shader.
pub(crate) fn check(k: &WgslKernel) -> Result<(), WgslError> {
    let invalid = |message: String| WgslError::Invalid {
        kernel: k.name.clone(),
        op: k.op.clone(),
        provenance: k.provenance.clone(),
        message,
        shader: k.source.clone(),
    };
    let module = naga::front::wgsl::parse_str(&k.source).map_err(|e| invalid(e.emit_to_string(&k.source)))?;
    Validator::new(ValidationFlags::all(), Capabilities::default())
        .validate(&module)
        .map_err(|e| invalid(e.emit_to_string(&k.source)))?;
    if let Some(dir) = std::env::var_os("RUSTRAL_WGSL_DUMP") {
        dump(std::path::Path::new(&dir), &k.source);
    }
    Ok(())
}

/// Write `source` into `dir` under a name derived from its text without comment lines.
fn dump(dir: &std::path::Path, source: &str) {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    for line in super::code_lines(source) {
        line.hash(&mut h);
    }
    let path = dir.join(format!("{:016x}.wgsl", h.finish()));
    if !path.exists()
        && let Err(e) = std::fs::create_dir_all(dir).and_then(|_| std::fs::write(&path, source))
    {
        eprintln!("RUSTRAL_WGSL_DUMP: cannot write {}: {e}", path.display());
    }
}
