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

/// The error names the model's file:line:col of the call (`#[track_caller]` through the tensor
/// API), the op, its operand types and the module path.
#[test]
fn trace_time_shape_error_names_the_line_op_shapes_and_module() {
    let mut line = 0;
    let err = trace_model(TraceOptions::default(), |ctx: &mut ForwardCtx| -> rustral::Result<Vec<Tensor>> {
        let x = ctx.input("x", &[Dim::sym("batch"), Dim::fixed(8)], DType::F32)?;
        let y = ctx.scope("encoder.layer.0.output", |ctx| {
            let w = ctx.param("weight", &[Dim::fixed(4), Dim::fixed(3)], Init::Zeros)?;
            line = line!() + 1;
            x.matmul(&w)
        })?;
        Ok(vec![y])
    })
    .expect_err("8 vs 4");
    let text = err.to_string();
    let (at, message) = text.split_once(": ").unwrap();
    assert!(at.starts_with(&format!("tests/model_file.rs:{line}:")), "{text}");
    assert_eq!(
        message,
        "type error in `matmul` at encoder.layer.0.output (operands: f32[batch, 8], f32[4, 3]): \
         contracted dims differ: [batch, 8] @ [4, 3] (8 vs 4)"
    );
    let rustral::Error::Frontend(err) = err else { panic!("a frontend error: {err:?}") };
    assert!(matches!(err.unlocated(), rustral::frontend::Error::Ir(_)), "{err:?}");
}

/// A layer's error names the model line that called the layer, not a line inside it; a bad
/// argument to a tensor method names the line of that call.
#[test]
fn errors_inside_layers_and_bad_arguments_name_the_calling_line() {
    use rustral::frontend::nn::{Linear, Module};
    let mut lines = (0, 0);
    let err = trace_model(TraceOptions::default(), |ctx: &mut ForwardCtx| -> rustral::Result<Vec<Tensor>> {
        let x = ctx.input("x", &[Dim::fixed(2), Dim::fixed(8)], DType::F32)?;
        lines.0 = line!() + 1;
        let y = Linear::new("proj", 6, 4, true).forward(ctx, &x)?;
        Ok(vec![y])
    })
    .expect_err("8 features into a 6-input linear");
    let text = err.to_string();
    assert!(text.starts_with(&format!("tests/model_file.rs:{}:", lines.0)), "{text}");
    assert!(text.contains("`matmul`") && text.contains("at proj"), "{text}");

    let err = trace_model(TraceOptions::default(), |ctx: &mut ForwardCtx| -> rustral::Result<Vec<Tensor>> {
        let x = ctx.input("x", &[Dim::fixed(2), Dim::fixed(8)], DType::F32)?;
        lines.1 = line!() + 1;
        Ok(vec![x.softmax(3)?])
    })
    .expect_err("axis 3 of a rank-2 tensor");
    let text = err.to_string();
    assert!(text.starts_with(&format!("tests/model_file.rs:{}:", lines.1)), "{text}");
    assert!(text.contains("axis 3 out of range"), "{text}");
}
