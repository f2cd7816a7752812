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

/// A program folder whose range binding leaves its buffer (or its offset alignment) is a typed
/// error naming the kernel and binding, not a device error or a panic; the unedited folder of
/// the same program, compiled with the tiny GPT-2's embedding in ranges, runs.
#[test]
fn a_range_binding_outside_its_buffer_is_an_error_naming_the_kernel() {
    if !wgsl_available() {
        return;
    }
    let (_, t) = models().remove(2);
    let options = CompileOptions { webgpu_limits: common::split_profile(&t.graph), ..CompileOptions::default() };
    let mut s = Session::compile(&t.graph, Target::Wgsl, &options).unwrap();
    s.bind(&ParamStore::init(&t.params, 5)).unwrap();
    let dir = tempfile::tempdir().unwrap();
    s.save_wgsl(dir.path()).unwrap();
    let feeds: std::collections::HashMap<String, HostTensor> = inputs(&t.graph, 2, 5, 50).into_iter().collect();
    rustral::runtime::wgpu::WgpuProgram::open(dir.path()).unwrap().run(&feeds).unwrap();
    let json = dir.path().join("program.json");
    let text = std::fs::read_to_string(&json).unwrap();
    let schema: serde_json::Value = serde_json::from_str(include_str!("../schemas/wgsl-program.schema.json")).unwrap();
    let errors: Vec<String> = jsonschema::validator_for(&schema)
        .unwrap()
        .iter_errors(&serde_json::from_str(&text).unwrap())
        .map(|e| format!("{e} at {}", e.instance_path()))
        .collect();
    assert!(errors.is_empty(), "{errors:#?}");
    for shift in [4, 256] {
        let mut p: serde_json::Value = serde_json::from_str(&text).unwrap();
        let b = p["kernels"]
            .as_array_mut()
            .unwrap()
            .iter_mut()
            .flat_map(|k| k["bindings"].as_array_mut().unwrap())
            .find(|b| b["size"].as_u64().is_some_and(|n| n > 4) && b["offset"].as_u64().is_some_and(|o| o > 0))
            .expect("a range binding");
        b["offset"] = (b["offset"].as_u64().unwrap() + shift).into();
        std::fs::write(&json, serde_json::to_string(&p).unwrap()).unwrap();
        let err =
            rustral::runtime::wgpu::WgpuProgram::open(dir.path()).and_then(|w| w.run(&feeds)).unwrap_err().to_string();
        assert!(err.contains("binding") && err.contains("a range must lie inside it"), "{err}");
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

/// GPT-2-small at full size compiles for WebGPU's default limits (every host gives them): its
/// 154 MB token embedding, over the 128 MiB a binding may cover, is bound in two ranges by
/// the kernels that read it (the gather, the tied head's transpose, which writes its 154 MB
/// result in two ranges too, and the head's matmul). Compiled only: no adapter or parameters
/// are needed. (Run on lavapipe, whose own binding limit is 128 MiB, it matches the reference
/// interpreter: `rustral-compile --model gpt2 --config C --target wgsl --check`, see README.)
#[test]
fn gpt2_small_compiles_under_the_default_webgpu_limits() {
    use rustral::lowering::wgsl::{Profile, lower_wgsl_for};
    use rustral::models::{Gpt2, Gpt2Config};
    let gpt = Gpt2 { config: Gpt2Config::small(12) };
    let t = rustral::frontend::trace(rustral::frontend::TraceOptions::default(), |ctx| {
        let x = gpt.input(ctx)?;
        Ok(vec![gpt.forward(ctx, &x)?])
    })
    .unwrap();
    let mut g = t.graph.clone();
    rustral::passes::PassManager::new(OptLevel::O2).run(&mut g).unwrap();
    let program = rustral::lowering::lower(&g).unwrap();
    let w = lower_wgsl_for(&program, "gpt2", &Profile::default()).unwrap();
    let wte = w.buffers.iter().position(|b| b.provenance == "transformer.wte").unwrap();
    let split: Vec<String> = w
        .kernels
        .iter()
        .filter(|k| k.bindings.iter().any(|b| b.size.is_some_and(|n| n > 4)))
        .map(|k| format!("{} {}", k.op, k.bindings.iter().filter(|b| b.size.is_some_and(|n| n > 4)).count()))
        .collect();
    assert_eq!(split, ["permute 4", "gather 2", "matmul 2"], "kernels binding ranges");
    let ranges: Vec<(Option<u64>, Option<u64>)> =
        w.kernels.iter().flat_map(|k| &k.bindings).filter(|b| b.buffer == wte).map(|b| (b.offset, b.size)).collect();
    assert!(
        ranges.contains(&(Some(0), Some(128 << 20)))
            && ranges.contains(&(Some(128 << 20), Some(154389504 - (128 << 20))))
    );
    // Chromium's profile binds 1 GiB: nothing is split there.
    let chrome = lower_wgsl_for(&program, "gpt2", &Profile::resolve("chrome").unwrap()).unwrap();
    assert!(chrome.kernels.iter().flat_map(|k| &k.bindings).all(|b| b.size.is_none_or(|n| n == 4)));
}
