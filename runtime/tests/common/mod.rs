//! Helpers shared by the interpreter tests: graphs from text, feeds, comparisons.

#![allow(dead_code)]

use rustral_ir::{Graph, parse_verified};
use rustral_runtime::HostTensor;
use rustral_runtime::reference::{EvalError, evaluate};
use std::collections::HashMap;

/// Parse and verify a text graph (the test's own source is the readable spec).
pub fn graph(src: &str) -> Graph {
    parse_verified(src).unwrap_or_else(|e| panic!("test graph does not verify: {e}\n{src}"))
}

/// Evaluate with named feeds; outputs in order.
pub fn run(g: &Graph, feeds: &[(&str, HostTensor)]) -> Result<Vec<HostTensor>, EvalError> {
    let feeds: HashMap<String, HostTensor> = feeds.iter().map(|(n, t)| (n.to_string(), t.clone())).collect();
    Ok(evaluate(g, &feeds)?.into_iter().map(|(_, t)| t).collect())
}

/// Evaluate a one-output graph whose feeds are all f32.
pub fn run1(src: &str, feeds: &[(&str, &[usize], &[f64])]) -> HostTensor {
    let g = graph(src);
    let feeds: Vec<(&str, HostTensor)> =
        feeds.iter().map(|(n, s, v)| (*n, HostTensor::new(rustral_ir::DType::F32, s, v.to_vec()).unwrap())).collect();
    run(&g, &feeds).unwrap_or_else(|e| panic!("{e}")).remove(0)
}

/// Deterministic pseudo-random values in [-1, 1).
pub fn values(seed: u64, n: usize) -> Vec<f64> {
    rustral_runtime::seeded_values(seed, n)
}

/// Assert elementwise closeness: |a - b| <= atol + rtol * |b|.
pub fn assert_close(a: &[f64], b: &[f64], atol: f64, rtol: f64) {
    assert_eq!(a.len(), b.len(), "lengths differ");
    for (i, (x, y)) in a.iter().zip(b).enumerate() {
        assert!((x - y).abs() <= atol + rtol * y.abs(), "element {i}: {x} vs {y} (atol {atol}, rtol {rtol})");
    }
}
