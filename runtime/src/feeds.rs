//! Checking fed values against their declared types, shared by the targets: dtype and rank
//! must match, static dims must agree, and symbolic dims are bound by the first value that
//! has them.

use crate::reference::EvalError;
use rustral_ir::{DType, Dim, TensorType};
use rustral_lowering::{BufferKind, Program};
use std::collections::BTreeMap;

/// Every fed name must be one of the program's inputs; the error lists them.
pub(crate) fn check_known_inputs<'a>(p: &Program, names: impl Iterator<Item = &'a String>) -> Result<(), EvalError> {
    let inputs: Vec<&str> = p
        .buffers
        .iter()
        .filter_map(|b| match &b.kind {
            BufferKind::Input(n) => Some(n.as_str()),
            _ => None,
        })
        .collect();
    for name in names {
        if !inputs.contains(&name.as_str()) {
            return Err(EvalError::UnknownFeed { name: name.clone(), known: inputs.join(", ") });
        }
    }
    Ok(())
}

/// A fed value's dtype and rank must match; its dims bind the symbols (a conflict is
/// reported as such, any other mismatch names the declared type).
pub(crate) fn check(
    name: &str,
    ty: &TensorType,
    dtype: DType,
    shape: &[usize],
    binding: &mut BTreeMap<String, usize>,
) -> Result<(), EvalError> {
    let mismatch =
        || EvalError::FeedMismatch { name: name.into(), expected: ty.to_string(), found: format!("{dtype}{shape:?}") };
    if dtype != ty.dtype || shape.len() != ty.rank() {
        return Err(mismatch());
    }
    bind_dims(name, &ty.shape.0, shape, binding).map_err(|e| match e {
        EvalError::FeedMismatch { .. } => mismatch(),
        other => other,
    })
}

pub(crate) fn bind_dims(
    name: &str,
    dims: &[Dim],
    shape: &[usize],
    binding: &mut BTreeMap<String, usize>,
) -> Result<(), EvalError> {
    for (d, &n) in dims.iter().zip(shape) {
        match d {
            Dim::Static(s) if *s != n => {
                return Err(EvalError::FeedMismatch {
                    name: name.into(),
                    expected: format!("{dims:?}"),
                    found: format!("{shape:?}"),
                });
            }
            Dim::Sym(sym) => {
                if let Some(&first) = binding.get(sym) {
                    if first != n {
                        return Err(EvalError::SymbolConflict {
                            sym: sym.clone(),
                            first,
                            second: n,
                            name: name.into(),
                        });
                    }
                } else {
                    binding.insert(sym.clone(), n);
                }
            }
            Dim::Static(_) => {}
        }
    }
    Ok(())
}
