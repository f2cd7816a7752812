//! JSON and binary forms: schema validity, round trips, and hostile input that must give an
//! error, never a panic.

mod common;

use rustral_ir::{FORMAT_VERSION, Graph, IrError, from_binary, from_json, print, samples, to_binary, to_json, verify};

fn schema() -> jsonschema::Validator {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../schemas/ir.schema.json");
    let schema: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).expect("schema file")).expect("schema is JSON");
    jsonschema::validator_for(&schema).expect("schema compiles")
}

fn samples() -> Vec<Graph> {
    let all_forms = rustral_ir::parse_verified(common::ALL_FORMS).expect("sample text verifies");
    vec![
        samples::mlp().unwrap(),
        samples::layer_norm_primitives().unwrap(),
        samples::attention_block().unwrap(),
        all_forms,
    ]
}

#[test]
fn json_validates_against_schema_and_round_trips() {
    let validator = schema();
    for g in samples() {
        let json = to_json(&g);
        let value: serde_json::Value = serde_json::from_str(&json).expect("emitted JSON parses");
        let errors: Vec<String> =
            validator.iter_errors(&value).map(|e| format!("{} at {}", e, e.instance_path())).collect();
        assert!(errors.is_empty(), "{} does not match the schema: {errors:?}", g.name());
        assert_eq!(value["format_version"], FORMAT_VERSION);
        let back = from_json(&json).expect("decodes");
        verify(&back).expect("decoded graph verifies");
        assert_eq!(back, g);
        assert_eq!(to_json(&back), json, "JSON is deterministic");
    }
}

#[test]
fn schema_rejects_json_the_decoder_rejects() {
    let validator = schema();
    let good: serde_json::Value = serde_json::from_str(&to_json(&samples::mlp().unwrap())).unwrap();
    let mut cases = Vec::new();
    let mut v = good.clone();
    v["nodes"][0]["type"]["dtype"] = "f99".into();
    cases.push(v);
    let mut v = good.clone();
    v["nodes"][0].as_object_mut().unwrap().remove("provenance");
    cases.push(v);
    let mut v = good.clone();
    v["nodes"][3]["op"] = serde_json::json!({"binary": "frobnicate"});
    cases.push(v);
    let mut v = good.clone();
    v["nodes"][0]["type"]["shape"][0] = "not an identifier".into();
    cases.push(v);
    for case in cases {
        assert!(!validator.is_valid(&case), "schema accepted {case}");
        assert!(from_json(&case.to_string()).is_err() || verify(&from_json(&case.to_string()).unwrap()).is_err());
    }
}

#[test]
fn binary_round_trips() {
    for g in samples() {
        let bytes = to_binary(&g);
        assert!(bytes.len() < to_json(&g).len() / 3, "binary is compact");
        let back = from_binary(&bytes).expect("decodes");
        assert_eq!(back, g);
        assert_eq!(print(&back), print(&g));
        assert_eq!(to_binary(&back), bytes, "binary is deterministic");
    }
}

#[test]
fn wrong_version_and_dangling_operands_are_errors() {
    let json = to_json(&samples::mlp().unwrap());
    let v3 = json.replacen("\"format_version\": 2", "\"format_version\": 3", 1);
    assert!(matches!(from_json(&v3), Err(IrError::Version { found: 3, supported: 2 })));
    let v0 = json.replacen("\"format_version\": 2", "\"format_version\": 0", 1);
    assert!(matches!(from_json(&v0), Err(IrError::Version { found: 0, supported: 2 })));
    // Version 1 had no locations: it still reads, to the same graph.
    let v1 = json.replacen("\"format_version\": 2", "\"format_version\": 1", 1);
    assert_eq!(from_json(&v1).expect("version 1 reads"), samples::mlp().unwrap());
    let mut bytes = to_binary(&samples::mlp().unwrap());
    assert_eq!(bytes[4], 2, "the version is the first byte after the magic");
    bytes[4] = 1;
    assert!(matches!(from_binary(&bytes), Err(IrError::Version { found: 1, supported: 2 })));
    let mut value: serde_json::Value = serde_json::from_str(&json).unwrap();
    value["nodes"][3]["operands"][0] = 99.into();
    let err = from_json(&value.to_string()).expect_err("operand 99 does not exist");
    assert_eq!(err.to_string(), "cannot decode json IR: node 3 uses operand 99, which is not an earlier node");
    value["nodes"][3]["operands"][0] = 5.into();
    assert!(from_json(&value.to_string()).is_err(), "a forward reference is rejected too");
}

/// Every truncation and every single-byte change of a valid encoding decodes to an error or
/// to some graph (which the verifier then judges), and never panics.
#[test]
fn hostile_binary_never_panics() {
    let bytes = to_binary(&samples().pop().unwrap());
    for n in 0..bytes.len() {
        assert!(from_binary(&bytes[..n]).is_err(), "a truncation to {n} bytes decoded");
    }
    for i in 0..bytes.len() {
        for flip in [0x01u8, 0x80, 0xff] {
            let mut b = bytes.clone();
            b[i] ^= flip;
            if let Ok(g) = from_binary(&b) {
                let _ = verify(&g);
            }
        }
    }
    // A claimed length of 2^63 elements must not be allocated up front.
    let mut huge = b"RIR\x01".to_vec();
    huge.extend([1, 1, b'g']);
    huge.extend([0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f]);
    assert!(from_binary(&huge).is_err());
    assert!(from_binary(b"not rir").is_err());
}

/// The schema's op lists are the op declarations' (so a new op fails here until the schema
/// has it): the unary, binary, dtype, reduction and activation names, and every kind of op
/// validates as the schema's `op`.
#[test]
fn schema_lists_every_declared_op() {
    use rustral_ir::{Activation, BinaryOp, DType, Op, ReduceOp, UnaryOp};
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../schemas/ir.schema.json");
    let schema: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let names = |pointer: &str| -> Vec<String> {
        let list = schema.pointer(pointer).unwrap_or_else(|| panic!("schema has {pointer}"));
        list.as_array().unwrap().iter().map(|v| v.as_str().unwrap().to_string()).collect()
    };
    fn spelled<T: serde::Serialize>(values: &[T]) -> Vec<String> {
        values.iter().map(|v| serde_json::to_value(v).unwrap().as_str().unwrap().to_string()).collect()
    }
    assert_eq!(names("/$defs/unary/enum"), spelled(&UnaryOp::ALL));
    assert_eq!(names("/$defs/binary/enum"), spelled(&BinaryOp::ALL));
    let mut dtypes = DType::ALL.to_vec();
    dtypes.push(DType::U8);
    assert_eq!(names("/$defs/dtype/enum"), spelled(&dtypes));
    assert_eq!(names("/$defs/format_attr/properties/format/enum"), spelled(&rustral_ir::QuantFormat::ALL));
    assert_eq!(names("/$defs/op/oneOf/7/properties/reduce/properties/op/enum"), spelled(&ReduceOp::ALL));
    let acts: Vec<String> = Activation::ALL.iter().map(|a| a.name().to_string()).collect();
    let schema_acts = schema.to_string();
    for a in &acts {
        assert!(schema_acts.contains(&format!("\"{a}\"")), "activation {a} is not in the schema");
    }
    let mut op_schema = schema.clone();
    op_schema["$ref"] = serde_json::json!("#/$defs/op");
    for key in ["required", "properties", "type", "additionalProperties"] {
        op_schema.as_object_mut().unwrap().remove(key);
    }
    let validator = jsonschema::validator_for(&op_schema).expect("the op schema compiles");
    let mut failures = Vec::new();
    for op in Op::kinds() {
        // Kinds carry placeholder payloads; give the named and fused ones real ones.
        let op = match op {
            Op::Input { .. } => Op::Input { name: "x".into() },
            Op::Param { .. } => Op::Param { name: "w".into() },
            Op::FusedElementwise { .. } => {
                Op::FusedElementwise { body: rustral_ir::ElementwiseExpr { nodes: vec![rustral_ir::ExprNode::Arg(0)] } }
            }
            other => other,
        };
        let value = serde_json::to_value(&op).unwrap();
        if validator.iter_errors(&value).next().is_some() {
            failures.push(format!("{} ({value})", op.name()));
        }
    }
    assert!(failures.is_empty(), "ops the schema's `op` does not accept: {failures:?}");
}
