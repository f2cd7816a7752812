//! JSON and binary forms: schema validity, round trips, and hostile input that must give an
//! error, never a panic.

use rustral_ir::{FORMAT_VERSION, Graph, IrError, from_binary, from_json, print, samples, to_binary, to_json, verify};

fn schema() -> jsonschema::Validator {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../schemas/ir.schema.json");
    let schema: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).expect("schema file")).expect("schema is JSON");
    jsonschema::validator_for(&schema).expect("schema compiles")
}

fn samples() -> Vec<Graph> {
    let all_forms = rustral_ir::parse_verified(
        r#"graph "forms" {
  %0: f32[2, 3] = input "x"
  %1: f32[2, 3] = const [1.0, -0.0, inf, -inf, nan, 1e-7]
  %2: i64[2] = iota {axis=0}
  %3: f32[2, 3] = gather %1, %2 {axis=0}
  %4: f32[4, 3] = concat %0, %3 {axis=0}
  %5: f32[1, 3] = slice %4 {axis=0, start=1, end=2}
  %6: f32[3, 1] = permute %5 {perm=[1, 0]}
  %7: f32[3] = reshape %6 {shape=[3]}
  %8: f32[2, 3] = broadcast_to %7 {shape=[2, 3]}
  %9: bool[2, 3] = lt %8, %0
  %10: f32[2, 3] = where %9, %8, %0
  %11: f16[2, 3] = cast %10 {to=f16}
  %12: f32[3] = param "g"
  %13: f32[2, 3] = layer_norm %10, %12, %12 {eps=1e-5}
  %14: f32[2, 3] = rms_norm %13, %12 {eps=1e-6}
  %15: f32[2, 3] = softmax %14 {axis=1}
  %16: f32[2, 3] = gelu %15 {approx=erf}
  %17: f32[2, 3] = silu %16
  %18: f32[3, 3] = matmul_epilogue %6, %5, %7 {activation=gelu_erf}
  %19: f32[2, 3] = attention %0, %0, %0 {scale=0.5, causal=true}
  %20: f16[2, 3] = fused_elementwise %0, %1 {t0 = arg 0; t1 = arg 1; t2 = const 2.0 f32; t3 = mul t0, t2; t4 = tanh t3; t5 = gt t4, t1; t6 = where t5, t4, t1; t7 = cast t6 to f16}
  %21: f32[2, 1] = reduce_mean %17 {axes=[1], keepdim=true}
  %22: f32[3, 3] = matmul %18, %18
  output "a" = %11
  output "b" = %20
}
"#,
    )
    .expect("sample text verifies");
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
    let v2 = json.replacen("\"format_version\": 1", "\"format_version\": 2", 1);
    assert!(matches!(from_json(&v2), Err(IrError::Version { found: 2, supported: 1 })));
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
