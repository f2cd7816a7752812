//! Dropout in training, evaluated: about `p` of the elements are zero, the rest are scaled by
//! `1 / (1 - p)`, and the mask is a function of the trace seed and the step.

use rustral_frontend::nn::{Dropout, Module};
use rustral_frontend::{DType, Dim, Mode, RNG_STEP, TraceOptions, trace};
use rustral_runtime::HostTensor;
use std::collections::HashMap;

fn dropped(seed: u64, step: i64) -> Vec<f64> {
    let traced = trace(TraceOptions { mode: Mode::Train, seed, ..TraceOptions::default() }, |ctx| {
        let x = ctx.input("x", &[Dim::sym("n")], DType::F32)?;
        Ok(vec![Dropout { p: 0.25 }.forward(ctx, &x)?])
    })
    .unwrap();
    let feeds = HashMap::from([
        ("x".to_string(), HostTensor::new(DType::F32, &[20000], vec![3.0; 20000]).unwrap()),
        (RNG_STEP.to_string(), HostTensor::i64(&[], &[step]).unwrap()),
    ]);
    rustral_runtime::reference::evaluate(&traced.graph, &feeds).unwrap().remove(0).1.to_vec()
}

#[test]
fn dropout_drops_a_quarter_and_rescales_the_rest() {
    let y = dropped(11, 0);
    let zeros = y.iter().filter(|&&v| v == 0.0).count() as f64 / y.len() as f64;
    assert!((zeros - 0.25).abs() < 0.015, "dropped fraction {zeros}");
    assert!(y.iter().all(|&v| v == 0.0 || v == 4.0), "survivors are 3 / (1 - 0.25)");
    assert_eq!(dropped(11, 0), y, "same seed and step, same mask");
    assert_ne!(dropped(12, 0), y, "another seed, another mask");
    let next = dropped(11, 1);
    assert_ne!(next, y, "another step, another mask");
    let both = y.iter().zip(&next).filter(|(a, b)| **a == 0.0 && **b == 0.0).count() as f64 / y.len() as f64;
    assert!((both - 0.0625).abs() < 0.01, "masks of two steps are independent: {both} dropped by both");
}
