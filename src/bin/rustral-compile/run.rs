//! Running a compiled model: inputs (seeded, or from .npy files), timings, the check against
//! the reference interpreter, and outputs written as .npy.

use crate::args::Args;
use crate::fail::Fail;
use crate::memory::{self, Budget};
use ndarray_npy::WriteNpyExt;
use rustral::ir::{DType, Graph, Op};
use rustral::npy;
use rustral::runtime::{HostTensor, seeded_values};
use std::collections::BTreeMap;
use std::path::Path;

/// Named input values, in the graph's input order.
pub type Feeds = Vec<(String, HostTensor)>;

/// Sizes given to symbolic dims that neither --shape nor an input file sets.
pub const DEFAULT_DIM: usize = 2;

/// Inputs for every graph input: from --input files, else seeded values that fit the input
/// (token ids below the size of the table they index, masks of ones, type ids of zeros).
pub fn inputs(g: &Graph, args: &Args, budget: Option<&Budget>) -> Result<(Feeds, BTreeMap<String, usize>), Fail> {
    let mut binding: BTreeMap<String, usize> = args.shapes.iter().cloned().collect();
    let mut feeds = Vec::new();
    let mut held = 0u64;
    let declared = g.inputs();
    for (name, file) in &args.feeds {
        let Some((_, id)) = declared.iter().find(|(n, _)| n == name) else {
            let known: Vec<&str> = declared.iter().map(|(n, _)| n.as_str()).collect();
            return Err(Fail::user(format!(
                "--input {name}: the model has no input {name:?} (inputs: {})",
                known.join(", ")
            )));
        };
        let ty = &g.node(*id).expect("inputs exist").ty;
        let t = read_npy(file, ty.dtype, budget)?;
        held = held.saturating_add(t.data.len() as u64 * memory::held(ty.dtype));
        for (d, &n) in ty.shape.dims().iter().zip(t.shape()) {
            if let rustral::ir::Dim::Sym(sym) = d {
                binding.entry(sym.clone()).or_insert(n);
            }
        }
        feeds.push((name.clone(), t));
    }
    for (i, (name, id)) in declared.iter().enumerate() {
        if feeds.iter().any(|(n, _)| n == name) {
            continue;
        }
        let ty = &g.node(*id).expect("inputs exist").ty;
        for d in ty.shape.dims() {
            if let rustral::ir::Dim::Sym(sym) = d {
                binding.entry(sym.clone()).or_insert(DEFAULT_DIM);
            }
        }
        let bytes = memory::tensor_bytes(&ty.shape, &binding, memory::held(ty.dtype));
        let total = bytes.and_then(|b| held.checked_add(b));
        Budget::check(budget, &format!("input {name} ({})", ty.shape.substitute(&binding)), total)?;
        held = total.unwrap_or(u64::MAX);
        let shape = ty.shape.resolve(|s| binding[s]);
        let n: usize = shape.iter().product();
        let values: Vec<f64> = if ty.dtype == DType::Bool || name.contains("mask") {
            vec![1.0; n]
        } else if name.contains("type") {
            vec![0.0; n]
        } else if ty.dtype.is_int() {
            let bound = index_bound(g, *id).unwrap_or(16) as f64;
            seeded_values(args.seed + i as u64 + 1, n).iter().map(|v| ((v + 1.0) / 2.0 * bound).floor()).collect()
        } else {
            seeded_values(args.seed + i as u64 + 1, n)
        };
        let t = HostTensor::new(ty.dtype, &shape, values).map_err(|e| Fail::Internal(format!("input {name}: {e}")))?;
        feeds.push((name.clone(), t));
    }
    Ok((feeds, binding))
}

/// The row count of a table this input indexes (a gather's axis), or the class count of a
/// one-hot it is compared with (`eq` against an iota, through reshapes), so that seeded ids and
/// labels are in range.
fn index_bound(g: &Graph, input: rustral::ir::NodeId) -> Option<usize> {
    g.users(input).into_iter().find_map(|user| {
        let node = g.node(user)?;
        let operands = g.operands(user);
        match node.op {
            Op::Gather { axis } if operands.get(1) == Some(&input) => {
                g.node(operands[0])?.ty.shape.dims().get(axis)?.as_static()
            }
            Op::Reshape { .. } => index_bound(g, user),
            Op::Binary(rustral::ir::BinaryOp::Eq) => operands.iter().find_map(|&o| match g.node(o)?.op {
                Op::Iota { axis } if o != input => g.node(o)?.ty.shape.dims().get(axis)?.as_static(),
                _ => None,
            }),
            _ => None,
        }
    })
}

fn read_npy(file: &Path, dtype: DType, budget: Option<&Budget>) -> Result<HostTensor, Fail> {
    let fail = |e: String| Fail::user(format!("{}: {e}", file.display()));
    let mut f = std::fs::File::open(file).map_err(|e| fail(e.to_string()))?;
    let header = npy::header(&mut f).map_err(fail)?;
    let elements = header.shape.iter().try_fold(1u64, |n, &d| n.checked_mul(d));
    let bytes = elements.and_then(|n| n.checked_mul(memory::held(dtype) + header.item));
    Budget::check(budget, &format!("{} ({} {:?})", file.display(), header.descr, header.shape), bytes)?;
    let (shape, values) = npy::values(f, &header, dtype).map_err(fail)?;
    HostTensor::new(dtype, &shape, values).map_err(|e| fail(e.to_string()))
}

/// Write `t` as NAME.npy in `dir` (floats as f32 unless f64, integers as i64).
pub fn save(dir: &Path, name: &str, t: &HostTensor) -> Result<(), Fail> {
    crate::emit::folder(dir, "--save-outputs")?;
    let path = dir.join(file_name(name)?);
    let file = std::fs::File::create(&path).map_err(|e| Fail::user(format!("{}: {e}", path.display())))?;
    let written = match t.dtype {
        DType::F64 => t.data.write_npy(file),
        d if d.is_int() || d == DType::Bool => t.data.mapv(|v| v as i64).write_npy(file),
        _ => t.data.mapv(|v| v as f32).write_npy(file),
    };
    written.map_err(|e| Fail::user(format!("{}: {e}", path.display())))
}

/// `NAME.npy` for output `name`, which must be a plain file name: an output named `../x` or
/// `/abs` would otherwise be written outside the folder.
fn file_name(name: &str) -> Result<String, Fail> {
    let plain = !name.is_empty()
        && !name.starts_with('.')
        && name.chars().all(|c| c.is_alphanumeric() || matches!(c, '_' | '-' | '.'));
    if !plain {
        return Err(Fail::user(format!(
            "output {name:?} cannot be saved as a file name (--save-outputs takes names of letters, digits, '_', '-' and '.', not starting with '.')"
        )));
    }
    Ok(format!("{name}.npy"))
}

/// Errors of `got` against `want`, per output: (max absolute, max relative to `1 + |want|`).
pub fn errors(want: &[(String, HostTensor)], got: &[(String, HostTensor)]) -> Result<Vec<(String, f64, f64)>, Fail> {
    want.iter()
        .zip(got)
        .map(|((name, w), (gname, g))| {
            if name != gname || w.shape() != g.shape() {
                return Err(Fail::Internal(format!(
                    "output {name}{:?} of the reference vs {gname}{:?} of the target",
                    w.shape(),
                    g.shape()
                )));
            }
            let (mut abs, mut rel) = (0.0f64, 0.0f64);
            for (&a, &b) in w.data.iter().zip(g.data.iter()) {
                let (e, r) = rustral::check_kernels::difference(a, b);
                abs = abs.max(e);
                rel = rel.max(r);
            }
            Ok((name.clone(), abs, rel))
        })
        .collect()
}

/// One line about an output: shape, dtype and a few statistics.
pub fn summary(name: &str, t: &HostTensor) -> String {
    let v = &t.data;
    let n = v.len().max(1) as f64;
    let mean = v.iter().sum::<f64>() / n;
    let min = v.iter().copied().fold(f64::INFINITY, f64::min);
    let max = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    format!("{name}: {}{:?}  mean {mean:.6}  min {min:.6}  max {max:.6}", t.dtype, t.shape())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_names_stay_in_their_folder() {
        assert_eq!(file_name("grad.transformer.wte").unwrap(), "grad.transformer.wte.npy");
        for bad in ["../x", "/abs/path", "a/b", "..", "", ".hidden", "a\\b"] {
            assert!(file_name(bad).is_err(), "{bad:?}");
        }
    }
}
