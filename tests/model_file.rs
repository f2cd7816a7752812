//! The frontend's contract: a model file `pub fn model(ctx) -> rustral::Result<Vec<Tensor>>`
//! traces, verifies and evaluates; its numbers are checked against the same formula computed
//! directly in the test.

#[path = "../examples/models/mlp.rs"]
mod mlp;

use rustral::frontend::trace_model;
use rustral::prelude::*;
use std::collections::HashMap;

#[test]
fn model_file_traces_verifies_and_evaluates() {
    let traced = trace_model(TraceOptions::default(), mlp::model).expect("traces");
    rustral::ir::verify(&traced.graph).expect("verifies");
    let names: Vec<&str> = traced.params.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(names, ["w", "b"]);

    let params = ParamStore::init(&traced.params, 7);
    let (w, b) = (params.get("w").unwrap(), params.get("b").unwrap());
    assert!(b.data.iter().all(|&v| v == 0.0), "Init::Zeros");
    let std = (w.data.iter().map(|v| v * v).sum::<f64>() / 32.0).sqrt();
    assert!(std > 0.05 && std < 0.2, "Init::Normal {{ std: 0.1 }} gave std {std}");

    let x: Vec<f64> = (0..3 * 8).map(|i| (i as f64 * 0.37).sin()).collect();
    let mut feeds: HashMap<String, HostTensor> =
        params.iter().map(|(n, v)| (n.clone(), HostTensor::new(v.dtype, &v.shape, v.data.clone()).unwrap())).collect();
    feeds.insert("x".into(), HostTensor::new(DType::F32, &[3, 8], x.clone()).unwrap());
    let out = evaluate(&traced.graph, &feeds).expect("evaluates").remove(0).1;
    assert_eq!(out.shape(), &[3, 4]);

    // The same computation written out: y = 2 * (h - mean(h)), h = tanh(x @ w + b).
    let f32r = |v: f64| v as f32 as f64;
    for r in 0..3 {
        let h: Vec<f64> =
            (0..4).map(|j| (0..8).map(|k| f32r(x[r * 8 + k]) * f32r(w.data[k * 4 + j])).sum::<f64>().tanh()).collect();
        let m = h.iter().sum::<f64>() / 4.0;
        for (j, hj) in h.iter().enumerate() {
            let want = 2.0 * (hj - m);
            let got = out.to_vec()[r * 4 + j];
            assert!((got - want).abs() < 1e-6, "[{r},{j}] {got} vs {want}");
        }
    }
}

#[test]
fn trace_time_shape_error_names_op_shapes_and_module() {
    let err = trace_model(TraceOptions::default(), |ctx: &mut ForwardCtx| -> rustral::Result<Vec<Tensor>> {
        let x = ctx.input("x", &[Dim::sym("batch"), Dim::fixed(8)], DType::F32)?;
        let y = ctx.scope("encoder.layer.0.output", |ctx| {
            let w = ctx.param("weight", &[Dim::fixed(4), Dim::fixed(3)], Init::Zeros)?;
            x.matmul(&w)
        })?;
        Ok(vec![y])
    })
    .expect_err("8 vs 4");
    assert_eq!(
        err.to_string(),
        "type error in `matmul` at encoder.layer.0.output (operands: f32[batch, 8], f32[4, 3]): \
         contracted dims differ: [batch, 8] @ [4, 3] (8 vs 4)"
    );
}
