//! The pass manager: pipelines, switching passes off, the verifier naming a pass that breaks
//! the graph, dumps, statistics against their schema, and saturation limits as data.

mod common;
use common::compile;
use rustral_frontend::{TraceOptions, trace_named};
use rustral_ir::{Graph, Op};
use rustral_models::{Bert, BertConfig};
use rustral_passes::fuse::{Family, Fuse, Limits};
use rustral_passes::{Dce, OptLevel, Pass, PassError, PassManager, PassStats};
use std::time::Duration;

fn bert() -> Graph {
    let m = Bert { config: BertConfig::tiny(1) };
    trace_named(TraceOptions::default(), |ctx| {
        let (ids, types, mask) = m.inputs(ctx)?;
        Ok(vec![("h".into(), m.forward(ctx, &ids, &types, &mask)?)])
    })
    .unwrap()
    .graph
}

#[test]
fn levels_run_their_pipelines() {
    let g = bert();
    let (o0, c0) = compile(&g, OptLevel::O0);
    assert_eq!(rustral_ir::print(&o0), rustral_ir::print(&g));
    assert!(c0.stats.passes.is_empty());
    let (_, c1) = compile(&g, OptLevel::O1);
    assert_eq!(c1.stats.fused.values().sum::<usize>(), 0, "O1 only cleans up");
    let (_, c2) = compile(&g, OptLevel::O2);
    assert_eq!(c2.stats.fused["attention"], 1);
}

#[test]
fn unknown_pass_names_list_the_valid_ones() {
    let err = PassManager::new(OptLevel::O2).disable("fuse-atention").err().expect("typo");
    let msg = err.to_string();
    assert!(msg.starts_with("unknown pass \"fuse-atention\"; valid passes: "), "{msg}");
    for name in ["fuse-attention", "fuse-layer-norm", "cse", "dce", "fuse-elementwise"] {
        assert!(msg.contains(name), "{msg}");
    }
}

#[test]
fn disabling_a_fusion_pass_removes_exactly_its_fusion() {
    let mut g = bert();
    let pm = PassManager::new(OptLevel::O2).disable("fuse-attention").unwrap();
    assert!(!pm.pipeline().contains(&"fuse-attention"));
    let c = pm.run(&mut g).unwrap();
    assert_eq!(c.stats.fused["attention"], 0);
    assert_eq!(c.stats.fused["softmax"], 1, "the softmax pass still ran");
    assert_eq!(c.stats.fused["layer_norm"], 3);
}

/// A pass that retypes a node wrongly: the manager names it with the verifier's message.
struct Breaker;

impl Pass for Breaker {
    fn name(&self) -> &'static str {
        "breaker"
    }
    fn run(&self, g: &mut Graph, _: &mut PassStats) {
        let id = g.node_ids().find(|&id| matches!(g.node(id).unwrap().op, Op::MatMul)).unwrap();
        g.node_mut(id).unwrap().ty.dtype = rustral_ir::DType::F64;
    }
}

#[test]
fn a_pass_that_breaks_the_graph_is_named() {
    let mut g = bert();
    let err =
        PassManager::with_passes(vec![Box::new(Dce), Box::new(Breaker)]).verify_each(true).run(&mut g).unwrap_err();
    assert!(matches!(err, PassError::BrokenByPass { pass: "breaker", .. }));
    assert!(err.to_string().starts_with("pass breaker broke the graph:\n%"), "{err}");
}

#[test]
fn dumps_after_every_pass_and_stats_match_the_schema() {
    let mut g = bert();
    let c = PassManager::new(OptLevel::O2).dump_each(true).run(&mut g).unwrap();
    let names: Vec<&str> = c.dumps.iter().map(|(n, _)| *n).collect();
    assert_eq!(names, PassManager::new(OptLevel::O2).pipeline());
    assert_eq!(c.dumps.last().unwrap().1, rustral_ir::print(&g));
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../schemas/compile-stats.schema.json");
    let schema: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let validator = jsonschema::validator_for(&schema).unwrap();
    let value: serde_json::Value = serde_json::from_str(&c.stats.to_json()).unwrap();
    let errors: Vec<String> = validator.iter_errors(&value).map(|e| format!("{e} at {}", e.instance_path())).collect();
    assert!(errors.is_empty(), "{errors:?}");
    let mut broken = value.clone();
    broken["fused"].as_object_mut().unwrap().remove("attention");
    assert!(!validator.is_valid(&broken), "a missing fused kind fails validation");
    let egg = &value["passes"].as_array().unwrap().iter().find(|p| p["pass"] == "fuse-attention").unwrap()["egg"];
    assert_eq!(egg["stop_reasons"]["saturated"], egg["regions"]);
    assert!(value["passes"].as_array().unwrap().iter().any(|p| p["rules"]["attention-div-mask-rank4"] == 1));
}

#[test]
fn hitting_a_limit_is_recorded_and_not_an_error() {
    let mut g = bert();
    let tiny = Limits { nodes: 30, iterations: 2, time: Duration::from_secs(5) };
    let c =
        PassManager::with_passes(vec![Box::new(Fuse { family: Family::LayerNorm, limits: tiny })]).run(&mut g).unwrap();
    let egg = c.stats.passes[0].egg.as_ref().unwrap();
    let limited = egg.stop_reasons.get("node_limit").copied().unwrap_or(0)
        + egg.stop_reasons.get("iteration_limit").copied().unwrap_or(0);
    assert!(limited > 0, "{egg:?}");
    rustral_ir::verify(&g).unwrap();
}

/// The statistics schema requires a count for exactly the fused kinds the op declarations
/// list, and every fusion family builds only declared fused ops.
#[test]
fn the_stats_schema_and_the_family_table_follow_the_op_declarations() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../schemas/compile-stats.schema.json");
    let schema: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let mut required: Vec<String> = schema["properties"]["fused"]["required"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_string())
        .collect();
    required.sort();
    let mut kinds: Vec<String> = rustral_ir::Op::fused_kinds().into_iter().map(String::from).collect();
    kinds.sort();
    assert_eq!(required, kinds);
    for (pass, fuses) in rustral_passes::fuse::fusion_passes() {
        for kind in fuses {
            let op = rustral_ir::Op::from_name(kind).unwrap_or_else(|| panic!("{pass} builds unknown op {kind}"));
            assert!(op.is_fused(), "{pass} builds {kind}, which is not declared fused");
        }
    }
}

/// A sum of ten inputs: elementwise fusion stops each group at six operands (WebGPU's default
/// of 8 storage buffers per shader, less the output and a status word), and the fused graph
/// still computes the sum (checked by the reference interpreter against the unfused graph).
#[test]
fn a_fused_elementwise_kernel_reads_at_most_six_tensors() {
    use rustral_ir::{BinaryOp, DType, Dim, TensorType};
    let mut g = Graph::new("sum10");
    let ty = TensorType::new(DType::F32, vec![Dim::Static(3)]);
    let xs: Vec<_> = (0..10).map(|i| g.input(&format!("x{i}"), ty.clone()).unwrap()).collect();
    let mut acc = xs[0];
    for &x in &xs[1..] {
        let y = g.add(Op::Unary(rustral_ir::UnaryOp::Exp), &[x], "s").unwrap();
        acc = g.add(Op::Binary(BinaryOp::Add), &[acc, y], "s").unwrap();
    }
    g.set_output("sum", acc).unwrap();
    let mut fused = g.clone();
    PassManager::new(OptLevel::O2).run(&mut fused).unwrap();
    let groups: Vec<usize> = fused
        .topo_order()
        .unwrap()
        .into_iter()
        .filter(|&n| matches!(fused.node(n).unwrap().op, Op::FusedElementwise { .. }))
        .map(|n| fused.operands(n).len())
        .collect();
    assert!(groups.len() >= 2 && groups.iter().all(|&n| n <= 6), "{groups:?}");
    let feeds: std::collections::HashMap<String, rustral_runtime::HostTensor> = (0..10)
        .map(|i| {
            (
                format!("x{i}"),
                rustral_runtime::HostTensor::new(DType::F32, &[3], vec![0.1 * i as f64, -0.5, 2.0]).unwrap(),
            )
        })
        .collect();
    let want = rustral_runtime::reference::evaluate(&g, &feeds).unwrap();
    let got = rustral_runtime::reference::evaluate(&fused, &feeds).unwrap();
    for (a, b) in want[0].1.to_vec().iter().zip(got[0].1.to_vec()) {
        assert!((a - b).abs() <= 1e-12 * a.abs().max(1.0), "{a} vs {b}");
    }
}
