//! Helpers for the model tests: fixtures, feeds, reading reference outputs.

#![allow(dead_code)]

use ndarray::ArrayD;
use ndarray_npy::ReadNpyExt;
use rustral_frontend::{ParamStore, Traced};
use rustral_ir::DType;
use rustral_runtime::HostTensor;
use std::collections::HashMap;
use std::path::PathBuf;

/// `fixtures/<name>` in the repository.
pub fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fixtures").join(name)
}

/// A float32 `.npy` file as f64 values with its shape.
pub fn read_npy(path: &PathBuf) -> (Vec<usize>, Vec<f64>) {
    let file = std::fs::File::open(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let a = ArrayD::<f32>::read_npy(file).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    (a.shape().to_vec(), a.iter().map(|&v| f64::from(v)).collect())
}

/// Feeds for the interpreter: every parameter of the store plus the given inputs.
pub fn feeds(params: &ParamStore, inputs: Vec<(&str, HostTensor)>) -> HashMap<String, HostTensor> {
    let mut out: HashMap<String, HostTensor> = params
        .iter()
        .map(|(name, v)| (name.clone(), HostTensor::new(v.dtype, &v.shape, v.data.clone()).expect("store shapes fit")))
        .collect();
    out.extend(inputs.into_iter().map(|(n, t)| (n.to_string(), t)));
    out
}

/// Token ids as an i64 tensor `[rows, cols]`.
pub fn ids(rows: &[Vec<i64>]) -> HostTensor {
    let flat: Vec<i64> = rows.iter().flatten().copied().collect();
    HostTensor::i64(&[rows.len(), rows[0].len()], &flat).expect("rectangular ids")
}

/// Evaluate the traced graph and return its first output.
pub fn run(traced: &Traced, feeds: &HashMap<String, HostTensor>) -> HostTensor {
    rustral_runtime::reference::evaluate(&traced.graph, feeds).unwrap_or_else(|e| panic!("{e}")).remove(0).1
}

/// Largest absolute difference.
pub fn max_abs_diff(a: &[f64], b: &[f64]) -> f64 {
    assert_eq!(a.len(), b.len(), "lengths differ");
    a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0, f64::max)
}

/// An f32 tensor.
pub fn f32_tensor(shape: &[usize], values: Vec<f64>) -> HostTensor {
    HostTensor::new(DType::F32, shape, values).expect("shape fits")
}
