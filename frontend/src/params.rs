//! Parameter values by name, loaded from and saved to safetensors (the format Hugging Face
//! checkpoints use, so real models load under their own names). Loading is strict: a missing,
//! unexpected, mis-shaped or wrongly typed weight is an error naming it.

use crate::error::{Error, Result};
use crate::init::ParamSpec;
use rustral_ir::DType;
use safetensors::{Dtype, SafeTensors, tensor::TensorView};
use std::collections::BTreeMap;
use std::path::Path;

/// One parameter's values, row-major, held as f64 whatever the dtype.
#[derive(Clone, Debug, PartialEq)]
pub struct ParamValue {
    /// Element type.
    pub dtype: DType,
    /// Shape.
    pub shape: Vec<usize>,
    /// Values.
    pub data: Vec<f64>,
}

/// Parameter values by full name, in name order.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ParamStore {
    values: BTreeMap<String, ParamValue>,
}

impl ParamStore {
    /// Values from each spec's initialiser under `seed`.
    pub fn init(specs: &[ParamSpec], seed: u64) -> ParamStore {
        let values = specs
            .iter()
            .map(|s| {
                (s.name.clone(), ParamValue { dtype: s.dtype, shape: s.shape.clone(), data: s.initial_values(seed) })
            })
            .collect();
        ParamStore { values }
    }

    /// Load a safetensors file, checking it against the specs. Names in the file that match
    /// an `ignore` pattern (exact, a prefix ending in `*`, or a suffix after a leading `*`)
    /// are skipped: checkpoints carry buffers and heads a traced model may not use
    /// (`embeddings.position_ids`, `pooler.*`, `*.num_batches_tracked`).
    pub fn load_safetensors(path: &Path, specs: &[ParamSpec], ignore: &[&str]) -> Result<ParamStore> {
        let bytes = std::fs::read(path).map_err(|e| file_error(path, e))?;
        Self::from_safetensors_bytes(&bytes, specs, ignore).map_err(|e| match e {
            Error::File { message, .. } => file_error(path, message),
            other => other,
        })
    }

    /// As `load_safetensors`, from bytes.
    pub fn from_safetensors_bytes(bytes: &[u8], specs: &[ParamSpec], ignore: &[&str]) -> Result<ParamStore> {
        let st = SafeTensors::deserialize(bytes).map_err(|e| file_error(Path::new("<bytes>"), e))?;
        let mut values = BTreeMap::new();
        for spec in specs {
            let view = st.tensor(&spec.name).map_err(|_| Error::Param {
                name: spec.name.clone(),
                message: format!("missing from the weights (expected {} {:?})", spec.dtype, spec.shape),
            })?;
            let value = decode(&spec.name, &view)?;
            check_value(spec, &value)?;
            values.insert(spec.name.clone(), value);
        }
        let mut names: Vec<String> = st.names().into_iter().map(|s| s.to_string()).collect();
        names.sort();
        // `prefix*` ignores names starting with the prefix, `*suffix` names ending with it.
        let ignored = |n: &str| {
            ignore.iter().any(|p| match (p.strip_suffix('*'), p.strip_prefix('*')) {
                (Some(pre), _) => n.starts_with(pre),
                (None, Some(suf)) => n.ends_with(suf),
                (None, None) => *p == n,
            })
        };
        if let Some(extra) = names.iter().find(|n| !values.contains_key(*n) && !ignored(n)) {
            let message = "in the weights but not declared by the model (ignore it explicitly if expected)".to_string();
            return Err(Error::Param { name: extra.clone(), message });
        }
        Ok(ParamStore { values })
    }

    /// Check the store against the specs as loading does: every declared parameter present
    /// with its shape and dtype, and nothing undeclared (for stores built by other readers).
    pub fn check(&self, specs: &[ParamSpec]) -> Result<()> {
        for spec in specs {
            let value = self.values.get(&spec.name).ok_or_else(|| Error::Param {
                name: spec.name.clone(),
                message: format!("missing from the weights (expected {} {:?})", spec.dtype, spec.shape),
            })?;
            check_value(spec, value)?;
        }
        if let Some(extra) = self.values.keys().find(|n| !specs.iter().any(|s| &s.name == *n)) {
            let message = "in the weights but not declared by the model".to_string();
            return Err(Error::Param { name: extra.clone(), message });
        }
        Ok(())
    }

    /// Write every parameter to a safetensors file (f32/f64/i32/i64 as their dtype says).
    pub fn save_safetensors(&self, path: &Path) -> Result<()> {
        let bytes = self.to_safetensors_bytes()?;
        std::fs::write(path, bytes).map_err(|e| file_error(path, e))
    }

    /// The safetensors encoding of every parameter.
    pub fn to_safetensors_bytes(&self) -> Result<Vec<u8>> {
        let encoded: Vec<(String, Dtype, Vec<usize>, Vec<u8>)> = self
            .values
            .iter()
            .map(|(name, v)| {
                let (dtype, bytes) = encode(name, v)?;
                Ok((name.clone(), dtype, v.shape.clone(), bytes))
            })
            .collect::<Result<_>>()?;
        let views = encoded
            .iter()
            .map(|(name, dtype, shape, bytes)| {
                TensorView::new(*dtype, shape.clone(), bytes)
                    .map(|v| (name.clone(), v))
                    .map_err(|e| Error::Param { name: name.clone(), message: e.to_string() })
            })
            .collect::<Result<Vec<_>>>()?;
        safetensors::serialize(views, None).map_err(|e| file_error(Path::new("<bytes>"), e))
    }

    /// A parameter's values.
    pub fn get(&self, name: &str) -> Option<&ParamValue> {
        self.values.get(name)
    }

    /// Set a parameter's values.
    pub fn insert(&mut self, name: &str, value: ParamValue) {
        self.values.insert(name.to_string(), value);
    }

    /// All parameters in name order.
    pub fn iter(&self) -> impl Iterator<Item = (&String, &ParamValue)> {
        self.values.iter()
    }

    /// Number of parameters.
    pub fn len(&self) -> usize {
        self.values.len()
    }

    /// True if empty.
    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }
}

fn file_error(path: &Path, e: impl std::fmt::Display) -> Error {
    Error::File { path: path.display().to_string(), message: e.to_string() }
}

fn decode(name: &str, view: &TensorView<'_>) -> Result<ParamValue> {
    let bytes = view.data();
    let (dtype, data): (DType, Vec<f64>) = match view.dtype() {
        Dtype::F32 => (
            DType::F32,
            bytes.chunks_exact(4).map(|c| f64::from(f32::from_le_bytes([c[0], c[1], c[2], c[3]]))).collect(),
        ),
        Dtype::F64 => (
            DType::F64,
            bytes.chunks_exact(8).map(|c| f64::from_le_bytes(c.try_into().expect("8-byte chunk"))).collect(),
        ),
        Dtype::I32 => (
            DType::I32,
            bytes.chunks_exact(4).map(|c| f64::from(i32::from_le_bytes([c[0], c[1], c[2], c[3]]))).collect(),
        ),
        Dtype::I64 => (
            DType::I64,
            bytes.chunks_exact(8).map(|c| i64::from_le_bytes(c.try_into().expect("8-byte chunk")) as f64).collect(),
        ),
        other => {
            return Err(Error::Param {
                name: name.into(),
                message: format!("dtype {other:?} is not supported for loading yet"),
            });
        }
    };
    Ok(ParamValue { dtype, shape: view.shape().to_vec(), data })
}

fn encode(name: &str, v: &ParamValue) -> Result<(Dtype, Vec<u8>)> {
    Ok(match v.dtype {
        DType::F32 => (Dtype::F32, v.data.iter().flat_map(|&x| (x as f32).to_le_bytes()).collect()),
        DType::F64 => (Dtype::F64, v.data.iter().flat_map(|&x| x.to_le_bytes()).collect()),
        DType::I32 => (Dtype::I32, v.data.iter().flat_map(|&x| (x as i32).to_le_bytes()).collect()),
        DType::I64 => (Dtype::I64, v.data.iter().flat_map(|&x| (x as i64).to_le_bytes()).collect()),
        other => {
            return Err(Error::Param {
                name: name.into(),
                message: format!("dtype {other} is not supported for saving yet"),
            });
        }
    })
}

/// A loaded value has its spec's shape and dtype.
fn check_value(spec: &ParamSpec, value: &ParamValue) -> Result<()> {
    if value.shape != spec.shape {
        let message = format!("shape {:?} in the weights, but the model declares {:?}", value.shape, spec.shape);
        return Err(Error::Param { name: spec.name.clone(), message });
    }
    if value.dtype != spec.dtype {
        let message = format!("dtype {} in the weights, but the model declares {}", value.dtype, spec.dtype);
        return Err(Error::Param { name: spec.name.clone(), message });
    }
    Ok(())
}
