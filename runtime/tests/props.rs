//! Random well-typed graphs (the IR's generator) evaluate on random feeds, and every output
//! has its declared shape with symbols bound.

mod common;
use common::values;
use proptest::prelude::*;
use rustral_ir::testing::arb_graph;
use rustral_runtime::HostTensor;
use rustral_runtime::reference::{EvalError, evaluate};
use std::collections::HashMap;

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn random_graphs_evaluate(g in arb_graph(30), batch in 1usize..4, seq in 1usize..4) {
        let sizes = HashMap::from([("batch", batch), ("seq", seq)]);
        let concrete = |shape: &rustral_ir::Shape| shape.resolve(|s| sizes[s]);
        let mut feeds = HashMap::new();
        for (i, (name, id)) in g.inputs().into_iter().chain(g.params()).enumerate() {
            let ty = &g.node(id).unwrap().ty;
            let shape = concrete(&ty.shape);
            let data = values(i as u64 + 1, shape.iter().product());
            feeds.insert(name, HostTensor::new(ty.dtype, &shape, data).unwrap());
        }
        match evaluate(&g, &feeds) {
            Ok(outputs) => {
                for ((name, t), o) in outputs.iter().zip(g.outputs()) {
                    let want = concrete(&g.node(o.node).unwrap().ty.shape);
                    prop_assert_eq!(t.shape(), want.as_slice(), "output {}", name);
                    prop_assert_eq!(t.dtype, g.node(o.node).unwrap().ty.dtype);
                }
            }
            // Random integer data may divide by zero; nothing else may fail.
            Err(EvalError::Runtime { message, .. }) if message == "integer division by zero" => {}
            Err(e) => prop_assert!(false, "{}\n{}", e, rustral_ir::print(&g)),
        }
    }
}
