//! naga's parse and validation of every generated shader, with WebGPU's default capabilities
//! (nothing beyond what every WebGPU implementation offers), before it leaves the compiler.

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
    Ok(())
}
