//! The WGSL target's own checks, on whatever adapter wgpu finds (Mesa's software Vulkan
//! driver in CI; every model and random graphs run on every target in `targets.rs`):
//! data-dependent errors, limits, and programs written to disk and run from there.

use rustral::frontend::ParamStore;
use rustral::ir::DType;
use rustral::prelude::*;
use rustral::runtime::reference::evaluate;

mod common;
use common::{inputs, max_error, models, wgsl_available};

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

/// Two checked kernels with identical shaders (one pipeline): each has its own status word,
/// so the error names the one whose index was out of range, not the first or the last.
#[test]
fn the_failing_one_of_two_identical_checked_kernels_is_named() {
    if !wgsl_available() {
        return;
    }
    let g = rustral::ir::parse(
        "graph \"two\" {\n  %0: f32[4, 2] = input \"table\"\n  %1: i64[3] = input \"a\"\n  %2: i64[3] = input \"b\"\n  %3: f32[3, 2] = gather %0, %1 {axis=0}  @first\n  %4: f32[3, 2] = gather %0, %2 {axis=0}  @second\n  %5: f32[3, 2] = add %3, %4\n  output \"y\" = %5\n}\n",
    )
    .unwrap();
    let s = Session::compile(
        &g,
        Target::Wgsl,
        &CompileOptions { level: rustral::passes::OptLevel::O0, ..CompileOptions::default() },
    )
    .unwrap();
    let table = HostTensor::new(DType::F32, &[4, 2], (0..8).map(f64::from).collect()).unwrap();
    let ids = |v: [f64; 3]| HostTensor::new(DType::I64, &[3], v.to_vec()).unwrap();
    for (a, b, named, other) in
        [([0.0, 9.0, 1.0], [1.0, 2.0, 3.0], "first", "second"), ([0.0, 1.0, 1.0], [1.0, 2.0, 7.0], "second", "first")]
    {
        let err = s.run(&[("table", table.clone()), ("a", ids(a)), ("b", ids(b))]).unwrap_err().to_string();
        assert!(err.contains(named) && !err.contains(other) && err.contains("out of range"), "{err}");
    }
    assert!(s.run(&[("table", table.clone()), ("a", ids([0.0, 1.0, 2.0])), ("b", ids([3.0, 2.0, 1.0]))]).is_ok());
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
