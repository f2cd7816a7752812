//! The shipped `.rir` examples: the good one verifies and evaluates, the broken one fails with
//! the message the README shows.

use rustral::ir::{self, DType};
use rustral::prelude::*;
use std::collections::HashMap;

fn read(name: &str) -> String {
    std::fs::read_to_string(format!("{}/examples/ir/{name}", env!("CARGO_MANIFEST_DIR"))).expect("example file")
}

#[test]
fn gelu_mlp_example_verifies_and_evaluates_at_any_binding() {
    let g = ir::parse_verified(&read("gelu_mlp.rir")).expect("verifies");
    let mut feeds = HashMap::new();
    for (name, id) in g.inputs().into_iter().chain(g.params()) {
        let ty = &g.node(id).unwrap().ty;
        let shape: Vec<usize> = ty.shape.dims().iter().map(|d| d.as_static().unwrap_or(2)).collect();
        let n: usize = shape.iter().product();
        let data = (0..n).map(|i| ((i * 7 % 13) as f64 - 6.0) / 10.0).collect();
        feeds.insert(name, HostTensor::new(DType::F32, &shape, data).unwrap());
    }
    let out = evaluate(&g, &feeds).expect("evaluates");
    assert_eq!(out[0].1.shape(), &[2, 2, 16]);
    assert!(out[0].1.to_vec().iter().all(|v| v.is_finite()));
    // The text printed from the file parses back to the same graph.
    assert_eq!(ir::parse_verified(&ir::print(&g)).unwrap(), g);
}

#[test]
fn shape_error_example_names_node_and_module() {
    let err = ir::parse_verified(&read("shape_error.rir")).expect_err("ill-typed");
    assert_eq!(
        err.to_string(),
        "graph does not verify:\n%2 (matmul) at encoder.layer.3.attention: contracted dims differ: \
         [batch, 8] @ [4, 3] (8 vs 4) (operands: f32[batch, 8], f32[4, 3])"
    );
}
