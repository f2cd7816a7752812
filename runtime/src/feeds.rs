//! Checking fed values against their declared types, shared by the targets: dtype and rank
//! must match, static dims must agree, and symbolic dims are bound by the first value that
//! has them.

use crate::reference::EvalError;
use rustral_ir::{DType, Dim, TensorType};
use std::collections::BTreeMap;

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
