//! Checking fed values against their declared types, shared by the targets: dtype and rank
//! must match, static dims must agree, and symbolic dims are bound by the first value that
//! has them.

use crate::reference::EvalError;
use rustral_ir::{DType, Dim, TensorType};
use rustral_lowering::{BufferKind, Program};
use std::collections::BTreeMap;

/// Check every fed input against its declared type and bind the symbolic dims from the inputs
/// and the bound parameters; every fed name must be one of the program's inputs. `input`
/// gives a fed value's dtype and shape (given the declared dtype, for values whose own dtype
/// the IR cannot name), `param` a bound parameter buffer's shape.
pub(crate) fn bind_program<'a, 'n>(
    p: &Program,
    fed: impl Iterator<Item = &'n String>,
    input: impl Fn(&str, DType) -> Option<(DType, &'a [usize])>,
    param: impl Fn(usize) -> Option<&'a [usize]>,
) -> Result<BTreeMap<String, usize>, EvalError> {
    let mut binding = BTreeMap::new();
    for (b, buf) in p.buffers.iter().enumerate() {
        match &buf.kind {
            BufferKind::Input(name) => {
                let (dtype, shape) = input(name, buf.ty.dtype)
                    .ok_or_else(|| EvalError::MissingFeed { kind: "input", name: name.clone() })?;
                check(name, &buf.ty, dtype, shape, &mut binding)?;
            }
            BufferKind::Param(name) => {
                let shape = param(b).ok_or_else(|| EvalError::MissingFeed { kind: "param", name: name.clone() })?;
                bind_dims(name, &buf.ty.shape.0, shape, &mut binding)?;
            }
            _ => {}
        }
    }
    let inputs: Vec<&str> = p
        .buffers
        .iter()
        .filter_map(|b| match &b.kind {
            BufferKind::Input(n) => Some(n.as_str()),
            _ => None,
        })
        .collect();
    for name in fed {
        if !inputs.contains(&name.as_str()) {
            return Err(EvalError::UnknownFeed { name: name.clone(), known: inputs.join(", ") });
        }
    }
    Ok(binding)
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
