//! Dropout in training, evaluated: about `p` of the elements are zero, the rest are scaled by
//! `1 / (1 - p)`, and the mask is a function of the trace seed.

use rustral_frontend::nn::{Dropout, Module};
use rustral_frontend::{DType, Dim, Mode, TraceOptions, trace};
use rustral_runtime::HostTensor;
use std::collections::HashMap;

fn dropped(seed: u64) -> Vec<f64> {
    let traced = trace(TraceOptions { mode: Mode::Train, seed, ..TraceOptions::default() }, |ctx| {
        let x = ctx.input("x", &[Dim::sym("n")], DType::F32)?;
        Ok(vec![Dropout { p: 0.25 }.forward(ctx, &x)?])
    })
    .unwrap();
    let feeds = HashMap::from([("x".to_string(), HostTensor::new(DType::F32, &[20000], vec![3.0; 20000]).unwrap())]);
    rustral_runtime::reference::evaluate(&traced.graph, &feeds).unwrap().remove(0).1.to_vec()
}

#[test]
fn dropout_drops_a_quarter_and_rescales_the_rest() {
    let y = dropped(11);
    let zeros = y.iter().filter(|&&v| v == 0.0).count() as f64 / y.len() as f64;
    assert!((zeros - 0.25).abs() < 0.015, "dropped fraction {zeros}");
    assert!(y.iter().all(|&v| v == 0.0 || v == 4.0), "survivors are 3 / (1 - 0.25)");
    assert_eq!(dropped(11), y, "same seed, same mask");
    assert_ne!(dropped(12), y, "another seed, another mask");
}
