//! The text form: snapshots of the sample graphs, exact round trips, and parse errors that
//! carry line:col and say what was expected.

mod common;

use rustral_ir::{Graph, IrError, parse, parse_verified, print, samples, verify};

/// Snapshots live in the workspace's `snapshots/` folder, one subfolder per crate.
macro_rules! snapshot {
    ($name:expr, $value:expr) => {
        insta::with_settings!({
            snapshot_path => concat!(env!("CARGO_MANIFEST_DIR"), "/../snapshots/ir"),
            prepend_module_to_snapshot => false,
            omit_expression => true,
        }, {
            insta::assert_snapshot!($name, $value);
        })
    };
}

fn samples() -> Vec<Graph> {
    vec![
        samples::mlp().expect("mlp builds"),
        samples::layer_norm_primitives().expect("layer norm builds"),
        samples::attention_block().expect("attention builds"),
    ]
}

#[test]
fn sample_graphs_print_as_snapshotted() {
    for g in samples() {
        verify(&g).expect("samples verify");
        snapshot!(format!("text_{}", g.name()), print(&g));
    }
}

#[test]
fn print_parse_print_is_byte_identical_and_graphs_equal() {
    for g in samples() {
        let text = print(&g);
        let parsed = parse_verified(&text).expect("printed text parses and verifies");
        assert_eq!(print(&parsed), text, "print(parse(print(g))) differs for {}", g.name());
        assert_eq!(parsed, g);
        let reparsed = parse(&print(&parsed)).expect("reprint parses");
        assert_eq!(reparsed, parsed);
    }
}

#[test]
fn every_attribute_form_round_trips() {
    let text = r#"graph "all \"forms\"" {
  %0: f32[batch, 4] = input "x"
  %1: f32[4] = param "g\n\u{7}"                         @"odd path"
  %2: f32[batch, 4] = layer_norm %0, %1, %1 {eps=1e-5}  @enc.ln
  %3: f32[batch, 4] = rms_norm %2, %1 {eps=1e-6}
  %4: f32[batch, 4] = softmax %3 {axis=1}
  %5: f32[batch, 4] = gelu %4 {approx=tanh}
  %6: f32[batch, 4] = silu %5
  %7: f32[4, 4] = const splat_placeholder
  output "y" = %6
}
"#
    .replace("  %7: f32[4, 4] = const splat_placeholder\n", "");
    let g = parse_verified(&text).expect("parses");
    assert_eq!(print(&g).replace("  @", " @").lines().count(), text.lines().count());
    let g = parse_verified(common::ALL_FORMS).expect("parses and verifies");
    assert_eq!(print(&g), common::ALL_FORMS);
}

/// Each malformed text fails with the given line:col (columns counted by hand: 1-based, in
/// characters, pointing at the offending token) and an `expected` that names the fix.
#[test]
fn malformed_text_reports_line_col_and_expectation() {
    let cases: &[(&str, &str)] = &[
        ("graph \"g\" {\n  %0: f32[2] = input x\n}\n", "2:22: expected the input's name as a string, found 'x'"),
        (
            "graph \"g\" {\n  %0: f99[2] = input \"x\"\n}\n",
            "2:7: expected a dtype (f16, bf16, f32, f64, i32, i64, bool), found 'f99'",
        ),
        (
            "graph \"g\" {\n  %1: f32[2] = input \"x\"\n}\n",
            "2:3: expected '%0' (nodes are numbered in order), found '%1'",
        ),
        (
            "graph \"g\" {\n  %0: f32[2] = input \"x\"\n  %1: f32[2] = exp %4\n}\n",
            "3:20: expected a node defined earlier (%0..%1), found '%4'",
        ),
        (
            "graph \"g\" {\n  %0: f32[2] = input \"x\"\n  %1: f32[2] = frobnicate %0\n}\n",
            "3:16: expected an op name, found 'frobnicate'",
        ),
        (
            "graph \"g\" {\n  %0: f32[2] = input \"x\"\n  %1: f32[2] = softmax %0\n}\n",
            "3:16: expected attribute `axis` for `softmax`, found none",
        ),
        (
            "graph \"g\" {\n  %0: f32[2] = input \"x\"\n  %1: f32[2] = softmax %0 {axis=0, bogus=1}\n}\n",
            "3:36: expected an attribute this op takes, found 'bogus'",
        ),
        (
            "graph \"g\" {\n  %0: f32[2] = input \"x\"\n  %1: f32[2] = gelu %0 {approx=fast}\n}\n",
            "3:32: expected one of erf, tanh, found 'fast'",
        ),
        ("graph \"g\" {\n  %0: f32[2 = input \"x\"\n}\n", "2:13: expected ',' or ']', found '='"),
        (
            "graph \"g\" {\n  %0: f32[2] = input \"x\n}\n",
            "2:24: expected a closing '\"' before the end of the line, found a newline",
        ),
        (
            "graph \"g\" {\n  %0: f32[2] = input \"x\"\n",
            "3:1: expected a node ('%n: ...'), 'output' or '}', found end of input",
        ),
        ("graph \"g\" {\n  %0: f32[2] = input \"x\" ?\n}\n", "2:26: expected a token, found '?'"),
        (
            "graph \"g\" {\n  %0: f32[2] = input \"x\"\n  %1: f32[2] = fused_elementwise %0 {t0 = arg 0; t2 = exp t0}\n}\n",
            "3:50: expected 't1' (body temps are numbered in order), found 't2'",
        ),
        (
            "graph \"g\" {\n  %0: f32[2] = input \"x\"  loc(\"\":1:2)\n}\n",
            "2:31: expected a source file's name, found \"\"",
        ),
        (
            "graph \"g\" {\n  %0: f32[2] = input \"x\"  loc(\"m.rs\":x:2)\n}\n",
            "2:38: expected a line number, found 'x'",
        ),
        (
            "graph \"g\" {\n  %0: f32[2] = input \"x\"  loc(\"m.rs\":4294967296:2)\n}\n",
            "2:38: expected a line number below 2^32, found 4294967296",
        ),
        ("graph \"g\" {\n  %0: f32[2] = input \"x\"  loc(\"m.rs\":3:2\n}\n", "3:1: expected ')', found '}'"),
    ];
    for (src, want) in cases {
        let err = parse(src).expect_err(src);
        assert_eq!(err.to_string(), *want, "for input:\n{src}");
        assert!(!err.to_string().contains('\n'), "parse errors are one line");
    }
}

/// A text that parses but is ill-typed names the node, its provenance and the mismatch.
#[test]
fn shape_mismatch_names_node_and_provenance() {
    let src = "graph \"g\" {\n  %0: f32[batch, 8] = input \"x\"\n  %1: f32[4, 3] = param \"w\"  @encoder.layer.3.attention\n  %2: f32[batch, 3] = matmul %0, %1  @encoder.layer.3.attention\n}\n";
    let err = parse_verified(src).expect_err("ill-typed");
    let IrError::Verify(errors) = &err else { panic!("expected a verify error, got {err}") };
    assert_eq!(
        errors.to_string(),
        "%2 (matmul) at encoder.layer.3.attention: contracted dims differ: [batch, 8] @ [4, 3] (8 vs 4) (operands: f32[batch, 8], f32[4, 3])"
    );
}

/// Source locations print after the provenance, MLIR's way, and read back, several to a node
/// (a fused node's), sorted and without repeats, whatever order the text gave them in.
#[test]
fn locations_round_trip() {
    let src = "graph \"g\" {\n  %0: f32[2] = input \"x\"  loc(\"m.rs\":3:17)\n  %1: f32[2] = exp %0  @a.b loc(\"m.rs\":9:5, \"C:\\\\m\\\\n.rs\":1:1, \"m.rs\":4:2, \"m.rs\":9:5)\n  output \"y\" = %1\n}\n";
    let g = parse_verified(src).unwrap();
    let text = print(&g);
    assert!(text.contains("@a.b loc(\"C:\\\\m\\\\n.rs\":1:1, \"m.rs\":4:2, \"m.rs\":9:5)\n"), "{text}");
    assert_eq!(print(&parse(&text).unwrap()), text);
    let json = rustral_ir::to_json(&g);
    assert!(json.contains("\"m.rs:4:2\""), "{json}");
    assert_eq!(rustral_ir::from_json(&json).unwrap(), g);
    assert_eq!(rustral_ir::from_binary(&rustral_ir::to_binary(&g)).unwrap(), g);
}
