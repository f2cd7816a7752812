//! The Candle target's own behaviour (its numbers against the reference are in cpu_target.rs
//! and minilm_targets.rs): which ops use candle's fused kernels, and the host path for what
//! candle cannot express with the IR's meaning.

use rustral::frontend::{ParamStore, TraceOptions, trace_named};
use rustral::models::{Bert, BertConfig};
use rustral::prelude::*;
use rustral::runtime::candle::Device;

#[test]
fn report_names_native_and_decomposed_ops() {
    let bert = Bert { config: BertConfig::tiny(2) };
    let t = trace_named(TraceOptions::default(), |ctx| {
        let (ids, types, mask) = bert.inputs(ctx)?;
        Ok(vec![("h".into(), bert.forward(ctx, &ids, &types, &mask)?)])
    })
    .unwrap();
    let mut s = Session::compile(&t.graph, Target::Candle(Device::Cpu), &CompileOptions::default()).unwrap();
    s.bind(&ParamStore::init(&t.params, 1)).unwrap();
    let report = s.candle_report().expect("a candle session reports");
    // Embedding LayerNorm + two per layer, all through candle_nn::ops::layer_norm.
    assert_eq!(report["native"]["layer_norm"], 5, "{report:?}");
    assert_eq!(report["decomposed"]["attention"], 2, "{report:?}");
    assert!(report["decomposed"]["matmul_epilogue"] >= 2, "{report:?}");
}

/// Integer division is the reference's on the host: division by zero is an error naming the
/// node, not a panic inside candle.
#[test]
fn integer_division_by_zero_is_an_error_not_a_panic() {
    let t = rustral::frontend::trace(TraceOptions::default(), |ctx| {
        let a = ctx.input("a", &[Dim::fixed(3)], DType::I64)?;
        let b = ctx.input("b", &[Dim::fixed(3)], DType::I64)?;
        Ok(vec![a.div(&b)?])
    })
    .unwrap();
    let s = Session::compile(&t.graph, Target::Candle(Device::Cpu), &CompileOptions::default()).unwrap();
    let a = HostTensor::new(DType::I64, &[3], vec![7.0, -7.0, 1.0]).unwrap();
    let ok = HostTensor::new(DType::I64, &[3], vec![2.0, 2.0, 1.0]).unwrap();
    let out = s.run(&[("a", a.clone()), ("b", ok)]).unwrap();
    assert_eq!(out[0].1.to_vec(), vec![3.0, -3.0, 1.0], "truncating division");
    let zero = HostTensor::new(DType::I64, &[3], vec![2.0, 0.0, 1.0]).unwrap();
    let err = s.run(&[("a", a), ("b", zero)]).unwrap_err().to_string();
    assert!(err.contains("div") && err.contains("zero"), "{err}");
}

/// Causal attention with more queries than keys (the first query sees no key) and a NaN in a
/// value only later queries may see: every target gives the reference's numbers.
#[test]
fn causal_attention_edge_rows_match_the_reference() {
    use rustral::ir::{F64, Graph, Op, TensorType};
    let mut g = Graph::new("attention");
    let ty = |n: usize| TensorType::new(DType::F32, Shape(vec![Dim::fixed(1), Dim::fixed(n), Dim::fixed(4)]));
    let q = g.input("q", ty(3)).unwrap();
    let k = g.input("k", ty(2)).unwrap();
    let v = g.input("v", ty(2)).unwrap();
    let a = g.add(Op::Attention { scale: F64(0.5), causal: true }, &[q, k, v], "attn").unwrap();
    g.set_output("y", a).unwrap();
    let vals = |n: usize, s: f64| {
        HostTensor::new(DType::F32, &[1, n, 4], (0..n * 4).map(|i| (i as f64 * s).sin()).collect()).unwrap()
    };
    let mut vv = vals(2, 0.3).to_vec();
    vv[5] = f64::NAN; // key 1, seen by query 2 only
    let feeds = [("q", vals(3, 0.7)), ("k", vals(2, 0.5)), ("v", HostTensor::new(DType::F32, &[1, 2, 4], vv).unwrap())];
    let all = feeds.iter().map(|(n, t)| (n.to_string(), t.clone())).collect();
    let want = evaluate(&g, &all).unwrap().remove(0).1.to_vec();
    for target in [Target::Cpu, Target::Candle(Device::Cpu)] {
        let s = Session::compile(&g, target.clone(), &CompileOptions::default()).unwrap();
        let got = s.run(&feeds).unwrap().remove(0).1.to_vec();
        for (i, (w, x)) in want.iter().zip(&got).enumerate() {
            assert!((w.is_nan() && x.is_nan()) || (w - x).abs() < 1e-6, "{target:?} [{i}]: reference {w} vs {x}");
        }
    }
}
