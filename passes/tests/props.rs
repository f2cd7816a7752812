//! Random well-typed graphs: O2 evaluates to what the unoptimised graph does.

mod common;
use common::{assert_same_outputs, compile, feeds};
use proptest::prelude::*;
use rustral_ir::testing::arb_graph;
use rustral_passes::OptLevel;

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn o2_preserves_random_graphs(g in arb_graph(30)) {
        let (opt, _) = compile(&g, OptLevel::O2);
        let f = feeds(&g, None, &[("batch", 2), ("seq", 3)], 2);
        // Integer division by zero makes both sides fail alike; compare only graphs that run.
        if rustral_runtime::reference::evaluate(&g, &f).is_ok() {
            assert_same_outputs(&g, &opt, &f, 1e-5, 1e-4);
        }
    }
}
