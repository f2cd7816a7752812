//! The WGSL target against the reference interpreter, on whatever adapter wgpu finds (Mesa's
//! software Vulkan driver in CI): every model at O0 and O2, random graphs, data-dependent
//! errors, limits, and programs written to disk and run from there.

use proptest::prelude::*;
use rustral::frontend::ParamStore;
use rustral::ir::DType;
use rustral::prelude::*;
use rustral::runtime::reference::evaluate;
use std::collections::HashMap;

mod common;
use common::{every_model_matches_the_reference, inputs, max_error, models, random_graph_feeds, wgsl_available};

/// Tolerance: 1e-4 absolute + 1e-4 relative on every output value (f32 kernels accumulating in
/// f32, polynomial erf/tanh).
#[test]
fn every_model_matches_the_reference_at_o0_and_o2() {
    if wgsl_available() {
        every_model_matches_the_reference(&Target::Wgsl);
    }
}

/// True when every value the graph computes is one WGSL represents portably: floats finite
/// (WGSL lets an implementation assume NaN and infinities never occur, and lavapipe folds
/// `x * 0` to 0), integers within 2^24 in magnitude (the target computes in f32 and stores
/// i64 as i32, WGSL having no 64-bit integers). These are the target's documented limits.
/// Values inside fused bodies count too: each body's prefixes become extra outputs.
fn values_are_portable(g: &rustral::ir::Graph, feeds: &HashMap<String, HostTensor>) -> bool {
    let mut all = g.clone();
    let order = all.topo_order().unwrap();
    for (i, id) in order.iter().enumerate() {
        let _ = all.set_output(&format!("node {i}"), *id);
        if let rustral::ir::Op::FusedElementwise { body } = all.node(*id).unwrap().op.clone() {
            let operands = all.operands(*id);
            for j in 0..body.nodes.len().saturating_sub(1) {
                let prefix = rustral::ir::ElementwiseExpr { nodes: body.nodes[..=j].to_vec() };
                if let Ok(p) = all.add(rustral::ir::Op::FusedElementwise { body: prefix }, &operands, "") {
                    let _ = all.set_output(&format!("node {i} body {j}"), p);
                }
            }
        }
    }
    let Ok(out) = evaluate(&all, feeds) else { return false };
    out.iter().all(|(_, t)| {
        let limit = if t.dtype.is_int() { 2f64.powi(24) } else { f64::MAX };
        t.to_vec().iter().all(|v| v.abs() <= limit)
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, failure_persistence: None, ..ProptestConfig::default() })]

    /// Random graphs from the passes' property tests, at O0 and O2, against the reference on
    /// the unoptimised graph. Tolerance: 1e-3 absolute + 1e-3 relative (as on the CPU target:
    /// chains of transcendental ops in f32; f64 values are f32 here).
    #[test]
    fn random_graphs_match_the_reference(g in rustral::ir::testing::arb_graph(20)) {
        if !wgsl_available() {
            return Ok(());
        }
        let feeds = random_graph_feeds(&g);
        let Ok(want) = evaluate(&g, &feeds.all) else { return Ok(()) };
        prop_assume!(values_are_portable(&g, &feeds.all));
        let free: Vec<(&str, HostTensor)> = feeds.inputs.iter().map(|(n, v)| (n.as_str(), v.clone())).collect();
        for level in [OptLevel::O0, OptLevel::O2] {
            let mut s = Session::compile(&g, Target::Wgsl, &CompileOptions { level, ..CompileOptions::default() }).unwrap();
            s.bind(&feeds.store).unwrap();
            let got = s.run(&free).unwrap_or_else(|e| panic!("{level:?}: {e}"));
            max_error(&want, &got, 1e-3, 1e-3, &format!("wgsl {level:?} on\n{}", rustral::ir::print(&g)));
        }
    }
}

/// The tiny BERT (gathers, masks, LayerNorm, attention) written to disk: program.json
/// follows its schema, every kernel has its shader file, two writes are byte-identical, and
/// the program loaded from the folder alone gives the session's outputs bit for bit.
#[test]
fn a_program_on_disk_follows_its_schema_and_runs_from_the_folder_alone() {
    if !wgsl_available() {
        return;
    }
    let (_, t) = models().remove(1);
    let store = ParamStore::init(&t.params, 5);
    let mut s = Session::compile(&t.graph, Target::Wgsl, &CompileOptions::default()).unwrap();
    s.bind(&store).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (dir.path().join("a"), dir.path().join("b"));
    s.save_wgsl(&a).unwrap();
    s.save_wgsl(&b).unwrap();
    let (program, _) = s.wgsl().unwrap();
    let mut files: Vec<String> = program.kernels.iter().map(|k| format!("{}.wgsl", k.name)).collect();
    files.extend(["program.json".into(), "params.safetensors".into()]);
    for f in &files {
        assert_eq!(std::fs::read(a.join(f)).unwrap(), std::fs::read(b.join(f)).unwrap(), "{f} differs between writes");
    }
    assert_eq!(std::fs::read_dir(&a).unwrap().count(), files.len(), "nothing else is written");

    let schema: serde_json::Value = serde_json::from_str(include_str!("../schemas/wgsl-program.schema.json")).unwrap();
    let json: serde_json::Value = serde_json::from_slice(&std::fs::read(a.join("program.json")).unwrap()).unwrap();
    let validator = jsonschema::validator_for(&schema).unwrap();
    let errors: Vec<String> = validator.iter_errors(&json).map(|e| format!("{e} at {}", e.instance_path())).collect();
    assert!(errors.is_empty(), "{errors:#?}");

    let loaded = rustral::runtime::wgpu::WgpuProgram::open(&a).unwrap();
    let feeds = inputs(&t.graph, 2, 5, 50);
    let refs: Vec<(&str, HostTensor)> = feeds.iter().map(|(n, v)| (n.as_str(), v.clone())).collect();
    let want = s.run(&refs).unwrap();
    let got = loaded.run(&feeds.iter().cloned().collect()).unwrap();
    for ((n, x), (_, y)) in want.iter().zip(&got) {
        assert_eq!(x.to_vec(), y.to_vec(), "{n}");
    }
}

/// A token id past the vocabulary is an error naming the gather's kernel and module, not a
/// silent read past the table.
#[test]
fn a_gather_index_out_of_range_is_an_error_naming_the_kernel() {
    if !wgsl_available() {
        return;
    }
    let (_, t) = models().remove(1);
    let mut s = Session::compile(&t.graph, Target::Wgsl, &CompileOptions::default()).unwrap();
    s.bind(&ParamStore::init(&t.params, 5)).unwrap();
    let mut feeds = inputs(&t.graph, 1, 3, 50);
    let ids = feeds.iter_mut().find(|(n, _)| n == "input_ids").unwrap();
    ids.1 = HostTensor::new(DType::I64, &[1, 3], vec![1.0, 100_000.0, 2.0]).unwrap();
    let refs: Vec<(&str, HostTensor)> = feeds.iter().map(|(n, v)| (n.as_str(), v.clone())).collect();
    let err = s.run(&refs).unwrap_err().to_string();
    assert!(err.contains("gather") && err.contains("word_embeddings") && err.contains("out of range"), "{err}");
    // The next run with valid ids is unaffected.
    let ok = inputs(&t.graph, 1, 3, 50);
    let refs: Vec<(&str, HostTensor)> = ok.iter().map(|(n, v)| (n.as_str(), v.clone())).collect();
    s.run(&refs).unwrap();
}

/// A label outside the classes is an error naming the cross-entropy kernel and its module, on
/// the WGSL target as on the reference and CPU targets; valid labels give the reference loss.
#[test]
fn a_cross_entropy_label_out_of_range_is_an_error() {
    if !wgsl_available() {
        return;
    }
    let g = rustral::ir::parse(
        "graph \"ce\" {\n  %0: f32[2, 3] = input \"x\"\n  %1: i64[2, 1] = input \"t\"\n  %2: f32[2] = cross_entropy %0, %1  @loss\n  output \"y\" = %2\n}\n",
    )
    .unwrap();
    let x = HostTensor::new(DType::F32, &[2, 3], vec![0.5, -1.0, 2.0, 0.0, 3.0, 1.0]).unwrap();
    let labels = |v: Vec<f64>| HostTensor::new(DType::I64, &[2, 1], v).unwrap();
    for target in [Target::Cpu, Target::Wgsl] {
        let s = Session::compile(&g, target.clone(), &CompileOptions::default()).unwrap();
        let bad = s.run(&[("x", x.clone()), ("t", labels(vec![2.0, 3.0]))]).unwrap_err().to_string();
        assert!(
            bad.contains("cross_entropy") && bad.contains("loss") && bad.contains("out of range"),
            "{target:?}: {bad}"
        );
        let feeds = [("x".to_string(), x.clone()), ("t".to_string(), labels(vec![2.0, 0.0]))];
        let want = evaluate(&g, &feeds.iter().cloned().collect()).unwrap();
        let refs: Vec<(&str, HostTensor)> = feeds.iter().map(|(n, v)| (n.as_str(), v.clone())).collect();
        max_error(&want, &s.run(&refs).unwrap(), 1e-6, 1e-6, &format!("{target:?}"));
    }
}

/// A kernel that needs more than the adapter allows fails when the program is loaded, naming
/// the limit and the kernel.
#[test]
fn a_program_over_the_adapters_limits_names_the_limit() {
    if !wgsl_available() {
        return;
    }
    let (_, t) = models().remove(0);
    let program = rustral::lowering::lower(&t.graph).unwrap();
    let mut wgsl = rustral::lowering::wgsl::lower_wgsl(&program, "mlp").unwrap();
    wgsl.kernels[0].workgroup_bytes = 1 << 30;
    let err = rustral::runtime::wgpu::WgpuProgram::new(wgsl).err().unwrap().to_string();
    assert!(err.contains("k000") && err.contains("max_compute_workgroup_storage_size"), "{err}");
}
