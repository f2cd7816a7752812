//! Property tests: random well-typed graphs (see `rustral_ir::testing`) verify and round-trip
//! exactly through text, JSON and binary, and their JSON matches the schema.

use proptest::prelude::*;
use rustral_ir::testing::arb_graph;
use rustral_ir::{from_binary, from_json, parse, print, to_binary, to_dot, to_json, verify};

fn schema() -> jsonschema::Validator {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../schemas/ir.schema.json");
    let schema: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    jsonschema::validator_for(&schema).unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, failure_persistence: None, ..ProptestConfig::default() })]

    /// Source locations too: one to three per node on some nodes, in files whose names need
    /// quoting and escaping, at lines up to 2^32 - 1.
    #[test]
    fn random_graphs_round_trip(
        g in arb_graph(40),
        locs in prop::collection::vec(prop::collection::vec((0..3usize, 1u32..=u32::MAX, 1u32..500), 0..4), 0..40),
    ) {
        let mut g = g;
        const FILES: [&str; 3] = ["model.rs", "C:\\models\\x.rs", "a \"quoted\" name.rs"];
        for (id, l) in g.node_ids().collect::<Vec<_>>().into_iter().zip(&locs) {
            g.set_loc(id, l.iter().map(|&(f, line, col)| rustral_ir::SourceLoc::new(FILES[f], line, col)).collect());
        }
        prop_assert!(verify(&g).is_ok(), "generated graph does not verify: {:?}", verify(&g));
        let text = print(&g);
        let parsed = parse(&text).map_err(|e| TestCaseError::fail(format!("{e}\n{text}")))?;
        prop_assert_eq!(print(&parsed), text.clone());
        prop_assert_eq!(&parsed, &g);
        prop_assert!(verify(&parsed).is_ok());

        let json = to_json(&g);
        prop_assert_eq!(&from_json(&json).unwrap(), &g);
        let value: serde_json::Value = serde_json::from_str(&json).unwrap();
        let validator = schema();
        let errors: Vec<String> = validator.iter_errors(&value).map(|e| format!("{e} at {}", e.instance_path())).collect();
        prop_assert!(errors.is_empty(), "schema errors {:?} for\n{}", errors, text);

        prop_assert_eq!(&from_binary(&to_binary(&g)).unwrap(), &g);
        prop_assert_eq!(to_dot(&g), to_dot(&parsed));
    }

    /// Arbitrary bytes and arbitrary text never panic the decoders or the parser.
    #[test]
    fn arbitrary_input_never_panics(bytes in prop::collection::vec(any::<u8>(), 0..256), text in ".{0,200}") {
        let mut framed = b"RIR\x01".to_vec();
        framed.extend(&bytes);
        for input in [&bytes, &framed] {
            if let Ok(g) = from_binary(input) {
                let _ = verify(&g);
            }
        }
        if let Ok(g) = parse(&text) {
            let _ = verify(&g);
        }
        let _ = from_json(&text);
    }
}
