//! A WGSL program on disk: `program.json` (see `schemas/wgsl-program.schema.json`), one
//! `<kernel>.wgsl` per kernel, and `params.safetensors` with every parameter and dense
//! constant stored as the words the buffers hold (F32, I32 or U32; U8 for `bytes` storage,
//! unpadded), so any WebGPU host can upload them as they are.

use super::{WgpuError, values, words};
use crate::tensor::HostTensor;
use rustral_lowering::wgsl::{FORMAT, Role, Storage, VERSION, WgslProgram};
use safetensors::{Dtype, SafeTensors, tensor::TensorView};
use std::collections::{BTreeMap, HashMap};
use std::path::Path;

/// The parameter file's name.
pub const PARAMS: &str = "params.safetensors";

fn io(path: &Path, e: impl std::fmt::Display) -> WgpuError {
    WgpuError::Disk { path: path.display().to_string(), message: e.to_string() }
}

/// Write `program` and its parameters into `dir` (created if missing). Files are
/// byte-identical for identical inputs.
pub fn save(dir: &Path, program: &WgslProgram, params: &HashMap<String, HostTensor>) -> Result<(), WgpuError> {
    std::fs::create_dir_all(dir).map_err(|e| io(dir, e))?;
    let json = dir.join("program.json");
    let mut text = serde_json::to_string_pretty(program).map_err(|e| io(&json, e))?;
    text.push('\n');
    std::fs::write(&json, text).map_err(|e| io(&json, e))?;
    for k in &program.kernels {
        let path = dir.join(format!("{}.wgsl", k.name));
        std::fs::write(&path, &k.source).map_err(|e| io(&path, e))?;
    }
    // A folder written before by another program keeps no shader of that one: kernel files
    // (`k000_op.wgsl`) not in this program go; other files are the user's and stay.
    let ours: std::collections::BTreeSet<String> = program.kernels.iter().map(|k| format!("{}.wgsl", k.name)).collect();
    for entry in std::fs::read_dir(dir).map_err(|e| io(dir, e))? {
        let path = entry.map_err(|e| io(dir, e))?.path();
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or_default().to_string();
        if is_kernel_file(&name) && !ours.contains(&name) {
            std::fs::remove_file(&path).map_err(|e| io(&path, e))?;
        }
    }
    let mut tensors: BTreeMap<String, (Storage, Vec<usize>, Vec<u8>)> = BTreeMap::new();
    for (b, buf) in program.buffers.iter().enumerate() {
        let (name, shape, data) = match &buf.role {
            Role::Param { name } => {
                let v = params.get(name).ok_or_else(|| io(dir, format!("no value for parameter {name:?}")))?;
                (name.clone(), v.shape().to_vec(), v.to_vec())
            }
            Role::Constant { tensor } => {
                let data =
                    program.constants.get(&b).ok_or_else(|| io(dir, format!("no data for constant {tensor}")))?;
                (tensor.clone(), buf.shape.iter().map(|d| d.as_static().unwrap_or(0)).collect(), data.clone())
            }
            _ => continue,
        };
        let mut bytes: Vec<u8> = words(buf.storage, &data, &name)?.iter().flat_map(|w| w.to_le_bytes()).collect();
        // Bytes are stored unpadded (a U8 tensor); the last word's padding is not data.
        if buf.storage == Storage::Bytes {
            bytes.truncate(data.len());
        }
        tensors.insert(name, (buf.storage, shape, bytes));
    }
    let path = dir.join(PARAMS);
    let views: Vec<(String, TensorView)> = tensors
        .iter()
        .map(|(n, (s, shape, bytes))| {
            Ok((n.clone(), TensorView::new(dtype(*s), shape.clone(), bytes).map_err(|e| io(&path, e))?))
        })
        .collect::<Result<_, WgpuError>>()?;
    let bytes = safetensors::serialize(views, None).map_err(|e| io(&path, e))?;
    std::fs::write(&path, bytes).map_err(|e| io(&path, e))
}

/// Read a program written by [`save`], with its parameters by name (dense constants go back
/// into the program).
pub fn load(dir: &Path) -> Result<(WgslProgram, HashMap<String, HostTensor>), WgpuError> {
    let json = dir.join("program.json");
    let text = std::fs::read_to_string(&json).map_err(|e| io(&json, e))?;
    let mut program: WgslProgram = serde_json::from_str(&text).map_err(|e| io(&json, e))?;
    if program.format != FORMAT || program.version != VERSION {
        return Err(io(
            &json,
            format!("format {} version {} (this reads {FORMAT} version {VERSION})", program.format, program.version),
        ));
    }
    for k in &mut program.kernels {
        let path = dir.join(format!("{}.wgsl", k.name));
        k.source = std::fs::read_to_string(&path).map_err(|e| io(&path, e))?;
    }
    let path = dir.join(PARAMS);
    let bytes = std::fs::read(&path).map_err(|e| io(&path, e))?;
    let file = SafeTensors::deserialize(&bytes).map_err(|e| io(&path, e))?;
    let mut params = HashMap::new();
    for b in 0..program.buffers.len() {
        let buf = &program.buffers[b];
        let name = match &buf.role {
            Role::Param { name } => name.clone(),
            Role::Constant { tensor } => tensor.clone(),
            _ => continue,
        };
        let t = file.tensor(&name).map_err(|e| io(&path, format!("{name}: {e}")))?;
        if t.dtype() != dtype(buf.storage) {
            return Err(io(&path, format!("{name} is {:?}, the program stores {:?}", t.dtype(), buf.storage)));
        }
        let stored: Vec<u32> = t
            .data()
            .chunks(4)
            .map(|c| c.iter().enumerate().fold(0u32, |w, (j, &b)| w | (u32::from(b) << (8 * j))))
            .collect();
        let data = values(buf.storage, &stored, t.shape().iter().product());
        if matches!(buf.role, Role::Constant { .. }) {
            program.constants.insert(b, data);
        } else {
            let v = HostTensor::new(buf.dtype, t.shape(), data).map_err(|e| io(&path, format!("{name}: {e}")))?;
            params.insert(name, v);
        }
    }
    Ok((program, params))
}

/// Write named host tensors as a safetensors file holding the words a program's buffers hold
/// for their dtypes (F32 for floats, I32 for integers, U32 for bool, U8 unpadded): inputs a
/// WebGPU host uploads as they are, or outputs it compares with (`web/test/parity.js`).
/// Byte-identical for identical tensors.
pub fn save_tensors(path: &Path, tensors: &[(String, HostTensor)]) -> Result<(), WgpuError> {
    let stored: Vec<(String, Storage, Vec<usize>, Vec<u8>)> = tensors
        .iter()
        .map(|(name, t)| {
            let storage = Storage::of(t.dtype);
            let data = t.to_vec();
            let mut bytes: Vec<u8> = words(storage, &data, name)?.iter().flat_map(|w| w.to_le_bytes()).collect();
            if storage == Storage::Bytes {
                bytes.truncate(data.len());
            }
            Ok((name.clone(), storage, t.shape().to_vec(), bytes))
        })
        .collect::<Result<_, WgpuError>>()?;
    let views: Vec<(String, TensorView)> = stored
        .iter()
        .map(|(n, s, shape, bytes)| {
            Ok((n.clone(), TensorView::new(dtype(*s), shape.clone(), bytes).map_err(|e| io(path, e))?))
        })
        .collect::<Result<_, WgpuError>>()?;
    let bytes = safetensors::serialize(views, None).map_err(|e| io(path, e))?;
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|e| io(dir, e))?;
    }
    std::fs::write(path, bytes).map_err(|e| io(path, e))
}

fn dtype(s: Storage) -> Dtype {
    match s {
        Storage::F32 => Dtype::F32,
        Storage::I32 => Dtype::I32,
        Storage::U32 => Dtype::U32,
        Storage::Bytes => Dtype::U8,
    }
}

/// A kernel's shader file name as lowering names them: `k`, three or more digits, `_`, `.wgsl`.
fn is_kernel_file(name: &str) -> bool {
    let Some(stem) = name.strip_suffix(".wgsl").and_then(|n| n.strip_prefix('k')) else { return false };
    let digits = stem.chars().take_while(char::is_ascii_digit).count();
    digits >= 3 && stem[digits..].starts_with('_')
}

#[cfg(test)]
mod tests {
    #[test]
    fn only_kernel_shaders_are_taken_for_stale() {
        assert!(super::is_kernel_file("k000_matmul.wgsl") && super::is_kernel_file("k1234_add.wgsl"));
        for mine in ["my.wgsl", "k00_x.wgsl", "kernel.wgsl", "k000_matmul.txt", "k000.wgsl"] {
            assert!(!super::is_kernel_file(mine), "{mine}");
        }
    }
}
