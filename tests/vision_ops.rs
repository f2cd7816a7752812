//! `conv2d`, `max_pool2d`, `avg_pool2d`, `unfold` and `fold` against PyTorch
//! (`fixtures/vision/ops.safetensors` and `ops.json`, made by
//! `fixtures/vision/make_fixtures.py`): the reference interpreter within 1e-5, every target at
//! O0 and O2 within 1e-4, and the grad pass's gradients of `sum(out * cotangent)` against
//! autograd within 1e-4 (absolute, plus the same relative to the value), the max pooling's
//! after a ReLU so that many windows tie and the first largest tap must take the gradient.

use rustral::frontend::{ParamStore, TraceOptions, Traced, trace};
use rustral::ir::Op;
use rustral::passes::grad::grad_output_name;
use rustral::prelude::*;
use rustral::runtime::reference::evaluate;
use rustral::train::training_graph;
use std::collections::HashMap;
use std::path::PathBuf;

mod common;
use common::wgsl_available;

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fixtures/vision").join(name)
}

struct Case {
    name: String,
    op: Op,
    /// Operand names in order (`x`, `w`, `b`).
    operands: Vec<String>,
}

fn ints(v: &serde_json::Value, key: &str) -> Vec<usize> {
    v[key].as_array().map(|a| a.iter().map(|x| x.as_u64().unwrap() as usize).collect()).unwrap_or_default()
}

fn cases() -> Vec<Case> {
    let meta: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(fixture("ops.json")).unwrap()).unwrap();
    let store = everything();
    meta.as_object()
        .unwrap()
        .iter()
        .map(|(name, a)| {
            let op = match a["op"].as_str().unwrap() {
                "conv2d" => Op::Conv2d {
                    stride: ints(a, "stride"),
                    padding: ints(a, "padding"),
                    dilation: ints(a, "dilation"),
                    groups: a["groups"].as_u64().unwrap() as usize,
                },
                "max_pool2d" => {
                    Op::MaxPool2d { kernel: ints(a, "kernel"), stride: ints(a, "stride"), padding: ints(a, "padding") }
                }
                "avg_pool2d" => {
                    Op::AvgPool2d { kernel: ints(a, "kernel"), stride: ints(a, "stride"), padding: ints(a, "padding") }
                }
                "unfold" => Op::Unfold {
                    kernel: ints(a, "kernel"),
                    stride: ints(a, "stride"),
                    padding: ints(a, "padding"),
                    dilation: ints(a, "dilation"),
                },
                "fold" => Op::Fold {
                    size: ints(a, "size"),
                    kernel: ints(a, "kernel"),
                    stride: ints(a, "stride"),
                    padding: ints(a, "padding"),
                    dilation: ints(a, "dilation"),
                },
                other => panic!("unknown op {other}"),
            };
            let operands = ["x", "w", "b"]
                .iter()
                .filter(|k| store.contains_key(&format!("{name}.{k}")))
                .map(|k| k.to_string())
                .collect();
            Case { name: name.clone(), op, operands }
        })
        .collect()
}

/// Every tensor of the fixture by name.
fn everything() -> HashMap<String, HostTensor> {
    let bytes = std::fs::read(fixture("ops.safetensors")).unwrap();
    let names = safetensor_names(&bytes);
    let specs: Vec<rustral::frontend::ParamSpec> = names
        .iter()
        .map(|(n, shape)| rustral::frontend::ParamSpec {
            name: n.clone(),
            dtype: DType::F32,
            shape: shape.clone(),
            init: rustral::frontend::Init::Zeros,
        })
        .collect();
    let store = ParamStore::from_safetensors_bytes(&bytes, &specs, &[]).unwrap();
    store.iter().map(|(n, v)| (n.clone(), HostTensor::new(DType::F32, &v.shape, v.data.clone()).unwrap())).collect()
}

/// Names and shapes from a safetensors header (an 8-byte length, then JSON).
fn safetensor_names(bytes: &[u8]) -> Vec<(String, Vec<usize>)> {
    let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let header: serde_json::Value = serde_json::from_slice(&bytes[8..8 + n]).unwrap();
    header
        .as_object()
        .unwrap()
        .iter()
        .filter(|(k, _)| *k != "__metadata__")
        .map(|(k, v)| {
            (k.clone(), v["shape"].as_array().unwrap().iter().map(|d| d.as_u64().unwrap() as usize).collect())
        })
        .collect()
}

/// The case as a graph: its operands are parameters `{case}.x`, ..., and the outputs are the
/// op's result and `sum(out * cotangent)`.
fn graph(case: &Case, all: &HashMap<String, HostTensor>) -> Traced {
    trace(TraceOptions::default(), |ctx| {
        ctx.scope(&case.name, |ctx| {
            let mut ts = Vec::new();
            for k in &case.operands {
                let shape = all[&format!("{}.{k}", case.name)].shape().to_vec();
                let dims: Vec<Dim> = shape.iter().map(|&d| Dim::fixed(d)).collect();
                ts.push(ctx.param(k, &dims, rustral::frontend::Init::Zeros)?);
            }
            let out_shape = all[&format!("{}.out", case.name)].shape().to_vec();
            let dims: Vec<Dim> = out_shape.iter().map(|&d| Dim::fixed(d)).collect();
            let cot = ctx.input("cotangent", &dims, DType::F32)?;
            let y = record(&ts, &case.op)?;
            let loss = y.mul(&cot)?.sum(&(0..dims.len() as isize).collect::<Vec<_>>(), false)?;
            Ok(vec![y, loss])
        })
    })
    .unwrap()
}

/// `op` on `ts` through the frontend's methods.
fn record(ts: &[rustral::frontend::Tensor], op: &Op) -> rustral::frontend::Result<rustral::frontend::Tensor> {
    use rustral::frontend::Window;
    let pair = |v: &Vec<usize>| [v[0], v[1]];
    match op {
        Op::Conv2d { stride, padding, dilation, groups } => {
            let w = Window { stride: pair(stride), padding: pair(padding), dilation: pair(dilation) };
            ts[0].conv2d(&ts[1], ts.get(2), w, *groups)
        }
        Op::MaxPool2d { kernel, stride, padding } => {
            ts[0].max_pool2d(pair(kernel), Window { stride: pair(stride), padding: pair(padding), dilation: [1, 1] })
        }
        Op::AvgPool2d { kernel, stride, padding } => {
            ts[0].avg_pool2d(pair(kernel), Window { stride: pair(stride), padding: pair(padding), dilation: [1, 1] })
        }
        Op::Unfold { kernel, stride, padding, dilation } => ts[0]
            .unfold(pair(kernel), Window { stride: pair(stride), padding: pair(padding), dilation: pair(dilation) }),
        Op::Fold { size, kernel, stride, padding, dilation } => ts[0].fold(
            pair(size),
            pair(kernel),
            Window { stride: pair(stride), padding: pair(padding), dilation: pair(dilation) },
        ),
        other => panic!("not a window op: {other:?}"),
    }
}

fn close(what: &str, got: &HostTensor, want: &HostTensor, tol: f64) {
    assert_eq!(got.shape(), want.shape(), "{what}: shape");
    for (i, (g, w)) in got.data.iter().zip(want.data.iter()).enumerate() {
        assert!((g - w).abs() <= tol * (1.0 + w.abs()), "{what}[{i}]: {g} vs PyTorch {w} (tolerance {tol})");
    }
}

fn store_of(case: &Case, t: &Traced) -> ParamStore {
    let bytes = std::fs::read(fixture("ops.safetensors")).unwrap();
    ParamStore::from_safetensors_bytes(&bytes, &t.params, &["*"]).unwrap_or_else(|e| panic!("{}: {e}", case.name))
}

#[test]
fn the_reference_interpreter_matches_pytorch() {
    let all = everything();
    for case in cases() {
        let t = graph(&case, &all);
        let mut feeds: HashMap<String, HostTensor> = case
            .operands
            .iter()
            .map(|k| (format!("{}.{k}", case.name), all[&format!("{}.{k}", case.name)].clone()))
            .collect();
        feeds.insert("cotangent".into(), all[&format!("{}.cotangent", case.name)].clone());
        let out = evaluate(&t.graph, &feeds).unwrap();
        close(&format!("{} reference", case.name), &out[0].1, &all[&format!("{}.out", case.name)], 1e-5);
    }
}

fn targets() -> Vec<Target> {
    let mut t = vec![Target::Cpu, Target::Candle(rustral::runtime::candle::Device::Cpu)];
    if wgsl_available() {
        t.push(Target::Wgsl);
    }
    t
}

#[test]
fn every_target_matches_pytorch_at_o0_and_o2() {
    let all = everything();
    for case in cases() {
        let t = graph(&case, &all);
        let store = store_of(&case, &t);
        let cot = all[&format!("{}.cotangent", case.name)].clone();
        for target in targets() {
            for level in [OptLevel::O0, OptLevel::O2] {
                let options = CompileOptions { level, ..CompileOptions::default() };
                let mut s = Session::compile(&t.graph, target.clone(), &options).unwrap();
                s.bind(&store).unwrap();
                let out = s.run(&[("cotangent", cot.clone())]).unwrap();
                let what = format!("{} on {target:?} at {level:?}", case.name);
                close(&what, &out[0].1, &all[&format!("{}.out", case.name)], 1e-4);
            }
        }
    }
}

#[test]
fn gradients_match_autograd() {
    let all = everything();
    for case in cases() {
        let t = graph(&case, &all);
        let store = store_of(&case, &t);
        let wrt: Vec<String> = t.params.iter().map(|p| p.name.clone()).collect();
        let g = training_graph(&t.graph, "out1", &wrt, &CompileOptions::default()).unwrap();
        let cot = all[&format!("{}.cotangent", case.name)].clone();
        let mut targets = vec![Target::Cpu];
        if wgsl_available() {
            targets.push(Target::Wgsl);
        }
        for target in targets {
            let mut s = Session::compile(&g, target.clone(), &CompileOptions::default()).unwrap();
            s.bind(&store).unwrap();
            let out: HashMap<String, HostTensor> = s.run(&[("cotangent", cot.clone())]).unwrap().into_iter().collect();
            for k in &case.operands {
                let name = format!("{}.{k}", case.name);
                let want = &all[&format!("{}.grad_{k}", case.name)];
                close(&format!("d {name} on {target:?}"), &out[&grad_output_name(&name)], want, 1e-4);
            }
        }
    }
}

/// A NaN in a window wins the max (PyTorch's rule, and the op's definition) on the CPU and
/// Candle targets, and padding never does: windows of negative values beside the padding keep
/// their largest value. WGSL may assume NaN away (see tests/targets.rs), so it is not asked.
#[test]
fn max_pool_takes_nan_and_never_padding() {
    use rustral::frontend::Window;
    let t = trace(TraceOptions::default(), |ctx| {
        let x = ctx.input("x", &[1, 1, 4, 4].map(Dim::fixed), DType::F32)?;
        Ok(vec![x.max_pool2d([3, 3], Window::default().stride(2).padding(1))?])
    })
    .unwrap();
    let mut values: Vec<f64> = (0..16).map(|i| -1.0 - i as f64).collect();
    values[0] = f64::NAN; // inside the first window only
    let x = HostTensor::new(DType::F32, &[1, 1, 4, 4], values).unwrap();
    let all: HashMap<String, HostTensor> = [("x".to_string(), x.clone())].into();
    let want = evaluate(&t.graph, &all).unwrap().remove(0).1.to_vec();
    assert!(want[0].is_nan(), "{want:?}");
    assert_eq!(&want[1..], &[-2.0, -5.0, -6.0], "the reference");
    for target in [Target::Cpu, Target::Candle(rustral::runtime::candle::Device::Cpu)] {
        let s = Session::compile(&t.graph, target.clone(), &CompileOptions::default()).unwrap();
        let got = s.run(&[("x", x.clone())]).unwrap().remove(0).1.to_vec();
        assert!(got[0].is_nan(), "{target:?}: {got:?}");
        assert_eq!(&got[1..], &want[1..], "{target:?}");
    }
}

/// A window whose largest value is minus infinity gives its adjoint to its first tap inside
/// the input (padding is minus infinity too, but never chosen), as PyTorch does: here every
/// window's first inside tap is the top-left element.
#[test]
fn max_pool_gradient_never_goes_to_padding() {
    use rustral::frontend::Window;
    let t = trace(TraceOptions::default(), |ctx| {
        let x = ctx.param("x", &[1, 1, 2, 2].map(Dim::fixed), rustral::frontend::Init::Zeros)?;
        let y = x.max_pool2d([3, 3], Window::default().padding(1))?;
        Ok(vec![y.sum(&[0, 1, 2, 3], false)?])
    })
    .unwrap();
    let g = training_graph(&t.graph, "out0", &["x".to_string()], &CompileOptions::default()).unwrap();
    let mut store = ParamStore::default();
    let value =
        rustral::frontend::ParamValue { dtype: DType::F32, shape: vec![1, 1, 2, 2], data: vec![f64::NEG_INFINITY; 4] };
    store.insert("x", value);
    let mut s = Session::compile(&g, Target::Cpu, &CompileOptions::default()).unwrap();
    s.bind(&store).unwrap();
    let out: HashMap<String, HostTensor> = s.run(&[]).unwrap().into_iter().collect();
    assert_eq!(out[&grad_output_name("x")].to_vec(), vec![4.0, 0.0, 0.0, 0.0]);
}
