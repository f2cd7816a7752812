//! Helpers: compile, evaluate before and after, compare.

#![allow(dead_code)]

use rustral_frontend::{ParamStore, Traced};
use rustral_ir::{DType, Graph};
use rustral_passes::{Compiled, OptLevel, PassManager};
use rustral_runtime::HostTensor;
use rustral_runtime::reference::evaluate;
use std::collections::HashMap;

/// Compile a copy of `g` at `level` (verifying after every pass).
pub fn compile(g: &Graph, level: OptLevel) -> (Graph, Compiled) {
    let mut out = g.clone();
    let c = PassManager::new(level).verify_each(true).run(&mut out).unwrap_or_else(|e| panic!("{e}"));
    (out, c)
}

/// Deterministic values in [-1, 1).
pub fn values(seed: u64, n: usize) -> Vec<f64> {
    rustral_runtime::seeded_values(seed, n)
}

/// Feeds for every input and param: seeded values, symbols bound by `sizes`; integer inputs
/// are token ids below `vocab`, inputs named `*mask*` are ones with the last position masked.
pub fn feeds(
    g: &Graph,
    traced_params: Option<&ParamStore>,
    sizes: &[(&str, usize)],
    vocab: usize,
) -> HashMap<String, HostTensor> {
    let mut out = HashMap::new();
    for (i, (name, id)) in g.inputs().into_iter().chain(g.params()).enumerate() {
        let ty = &g.node(id).unwrap().ty;
        let shape = ty.shape.resolve(|s| sizes.iter().find(|(k, _)| *k == s).map_or(3, |(_, n)| *n));
        let n: usize = shape.iter().product();
        let data: Vec<f64> = if let Some(p) = traced_params.and_then(|p| p.get(&name)) {
            p.data.clone()
        } else if name.contains("type") {
            vec![0.0; n]
        } else if ty.dtype.is_int() {
            (0..n).map(|k| ((k * 7 + i) % vocab) as f64).collect()
        } else if name.contains("mask") {
            (0..n).map(|k| if (k + 1) % shape.last().copied().unwrap_or(1) == 0 { 0.0 } else { 1.0 }).collect()
        } else {
            values(i as u64 + 1, n)
        };
        out.insert(name, HostTensor::new(ty.dtype, &shape, data).unwrap());
    }
    out
}

/// Evaluate `before` and `after` on the same feeds and assert every output agrees within
/// `atol + rtol * |reference|`; returns the largest absolute difference.
pub fn assert_same_outputs(
    before: &Graph,
    after: &Graph,
    feeds: &HashMap<String, HostTensor>,
    atol: f64,
    rtol: f64,
) -> f64 {
    let a = evaluate(before, feeds).unwrap_or_else(|e| panic!("before: {e}"));
    // Optimisation may drop unused inputs from nothing, but never adds any: feed only what exists.
    let b = evaluate(after, feeds).unwrap_or_else(|e| panic!("after: {e}\n{}", rustral_ir::print(after)));
    let mut worst: f64 = 0.0;
    for ((na, ta), (nb, tb)) in a.iter().zip(&b) {
        assert_eq!(na, nb);
        assert_eq!(ta.shape(), tb.shape(), "output {na}");
        for (x, y) in ta.to_vec().iter().zip(tb.to_vec()) {
            if x.is_nan() && y.is_nan() {
                continue;
            }
            let d = (x - y).abs();
            assert!(d <= atol + rtol * x.abs() || (x.is_infinite() && x == &y), "output {na}: {x} vs {y}");
            worst = worst.max(d);
        }
    }
    worst
}

/// Params of a trace initialised from a seed.
pub fn params(t: &Traced) -> ParamStore {
    ParamStore::init(&t.params, 17)
}

/// An f32 tensor.
pub fn f32_tensor(shape: &[usize], data: Vec<f64>) -> HostTensor {
    HostTensor::new(DType::F32, shape, data).unwrap()
}
