//! The CPU target's own checks (every model and random graphs run on every target in
//! `targets.rs`): run-to-run determinism, errors, profiles, edge shapes. Tolerances are
//! stated per test (f32 kernels accumulate in f32 where the reference accumulates in f64).

use rustral::frontend::ParamStore;
use rustral::ir::DType;
use rustral::prelude::*;
use rustral::runtime::reference::evaluate;

mod common;
use common::{inputs, max_error, models};

#[test]
fn runs_are_bit_identical_at_a_fixed_thread_count() {
    let (_, t) = models().remove(3);
    let store = ParamStore::init(&t.params, 5);
    let mut s =
        Session::compile(&t.graph, Target::Cpu, &CompileOptions { threads: 2, ..CompileOptions::default() }).unwrap();
    s.bind(&store).unwrap();
    let feeds = inputs(&t.graph, 2, 6, 50);
    let refs: Vec<(&str, HostTensor)> = feeds.iter().map(|(n, v)| (n.as_str(), v.clone())).collect();
    let a = s.run(&refs).unwrap();
    let b = s.run(&refs).unwrap();
    assert_eq!(a[0].1.to_vec(), b[0].1.to_vec());
}

#[test]
fn bad_inputs_and_unknown_passes_are_errors() {
    let (_, t) = models().remove(0);
    let err = Session::compile(
        &t.graph,
        Target::Cpu,
        &CompileOptions { disabled: vec!["fuse-magic".into()], ..CompileOptions::default() },
    )
    .err()
    .unwrap();
    assert!(err.to_string().starts_with("unknown pass \"fuse-magic\""), "{err}");
    let mut s = Session::compile(&t.graph, Target::Cpu, &CompileOptions::default()).unwrap();
    s.bind(&ParamStore::init(&t.params, 1)).unwrap();
    let x = HostTensor::new(DType::F32, &[2, 7], vec![0.0; 14]).unwrap();
    let err = s.run(&[("x", x)]).unwrap_err();
    assert_eq!(err.to_string(), "value fed for \"x\" is f32[2, 7], but the graph declares f32[batch, 8]");
}

/// Profiling attributes each kernel's time to the module path of its (fused) node.
#[test]
fn profiles_name_the_module_of_every_kernel() {
    let (_, t) = models().remove(1);
    let mut s =
        Session::compile(&t.graph, Target::Cpu, &CompileOptions { threads: 1, ..CompileOptions::default() }).unwrap();
    s.bind(&ParamStore::init(&t.params, 5)).unwrap();
    let feeds = inputs(&t.graph, 2, 5, 50);
    let refs: Vec<(&str, HostTensor)> = feeds.iter().map(|(n, v)| (n.as_str(), v.clone())).collect();
    let times = s.profile(&refs).unwrap().expect("the CPU target profiles");
    assert!(times.iter().any(|k| k.op == "attention" && k.provenance == "encoder.layer.0.attention"));
    assert!(times.iter().any(|k| k.op == "layer_norm" && k.provenance == "embeddings.LayerNorm"));
    assert!(
        times.iter().all(|k| !k.fallback || k.op.starts_with("reduce")),
        "only reductions over several axes fall back"
    );
    let reference = Session::compile(&t.graph, Target::Reference, &CompileOptions::default()).unwrap();
    assert!(reference.profile(&refs).unwrap().is_none());
}

/// A zero-sized batch dim: the matmul writes nothing (this once wrote past an empty buffer).
#[test]
fn matmul_with_an_empty_batch_dim_writes_nothing() {
    let g = rustral::ir::parse_verified(
        "graph \"g\" {\n  %0: f32[0, n, n] = input \"x\"\n  %1: f32[0, n, n] = matmul %0, %0\n  %2: f32[0, n, 4] = input \"w\"\n  %3: f32[4] = input \"b\"\n  %4: f32[0, n, 4] = matmul_epilogue %0, %2, %3 {activation=relu}\n  output \"y\" = %1\n  output \"z\" = %4\n}\n",
    )
    .unwrap();
    let s = Session::compile(&g, Target::Cpu, &CompileOptions { threads: 2, ..CompileOptions::default() }).unwrap();
    let out = s
        .run(&[
            ("x", HostTensor::new(DType::F32, &[0, 3, 3], vec![]).unwrap()),
            ("w", HostTensor::new(DType::F32, &[0, 3, 4], vec![]).unwrap()),
            ("b", HostTensor::new(DType::F32, &[4], vec![1.0; 4]).unwrap()),
        ])
        .unwrap();
    assert_eq!(out[0].1.shape(), &[0, 3, 3]);
    assert_eq!(out[1].1.shape(), &[0, 3, 4]);
}

/// A training step (the tiny GPT-2 in `Mode::Train`: dropout masks read the step, the loss is
/// a fused cross-entropy whose gradient compares class ids with labels) runs every kernel in
/// f32 at O2: none falls back to the f64 reference but reductions over several axes and the
/// slicing of the integer ids into inputs and labels. Its
/// outputs match the reference interpreter on the same graph (1e-4 absolute + 1e-4 relative).
#[test]
fn a_training_step_runs_in_f32_kernels() {
    let traced = common::gpt2_with_dropout(2, 8, 3);
    let names: Vec<String> = traced.params.iter().map(|p| p.name.clone()).collect();
    let options = CompileOptions { threads: 2, ..CompileOptions::default() };
    let step = rustral::train::training_graph(&traced.graph, "loss", &names, &options).unwrap();
    let mut s = Session::compile(&step, Target::Cpu, &options).unwrap();
    let store = ParamStore::init(&traced.params, 5);
    s.bind(&store).unwrap();
    let ids = HostTensor::new(DType::I64, &[2, 8], (0..16).map(|i| ((i * 7) % 50) as f64).collect()).unwrap();
    let feeds = vec![
        ("input_ids".to_string(), ids),
        (rustral::frontend::RNG_STEP.to_string(), HostTensor::i64(&[], &[3]).unwrap()),
    ];
    let refs: Vec<(&str, HostTensor)> = feeds.iter().map(|(n, v)| (n.as_str(), v.clone())).collect();
    let times = s.profile(&refs).unwrap().expect("the CPU target profiles");
    let fell_back: Vec<String> = times
        .iter()
        .filter(|k| k.fallback && !k.op.starts_with("reduce") && k.op != "slice")
        .map(|k| format!("{} at {}", k.op, k.provenance))
        .collect();
    assert!(fell_back.is_empty(), "{fell_back:?}");
    assert!(times.iter().any(|k| k.op == "cross_entropy"));
    let want = common::reference(&step, &store, &feeds);
    max_error(&want, &s.run(&refs).unwrap(), 1e-4, 1e-4, "the training step");
}

/// Transposes of the last two axes (the weight gradients' layout) are copied in tiles: exact,
/// for shapes that are and are not multiples of the tile, batched or not.
#[test]
fn transposes_of_the_last_two_axes_are_exact() {
    for dims in [[1, 1, 1], [1, 17, 5], [3, 37, 50], [2, 64, 48], [1, 1024, 33]] {
        let [b, r, c] = dims;
        let g = rustral::ir::parse_verified(&format!(
            "graph \"t\" {{\n  %0: f32[{b}, {r}, {c}] = input \"x\"\n  %1: f32[{b}, {c}, {r}] = permute %0 {{perm=[0, 2, 1]}}\n  output \"y\" = %1\n}}\n"
        ))
        .unwrap();
        let x = HostTensor::new(DType::F32, &dims, (0..b * r * c).map(|i| i as f64).collect()).unwrap();
        let feeds = [("x".to_string(), x.clone())];
        let want = evaluate(&g, &feeds.iter().cloned().collect()).unwrap();
        let s = Session::compile(&g, Target::Cpu, &CompileOptions { threads: 2, ..CompileOptions::default() }).unwrap();
        let got = s.run(&[("x", x)]).unwrap();
        assert_eq!(got[0].1.to_vec(), want[0].1.to_vec(), "{dims:?}");
    }
}

/// Cross-entropy over zero classes: no rows is an empty loss, a row is an error (its target
/// cannot be in range), on the CPU target as on the reference.
#[test]
fn cross_entropy_over_no_classes() {
    let g = |rows: usize| {
        rustral::ir::parse_verified(&format!(
            "graph \"ce\" {{\n  %0: f32[{rows}, 0] = input \"x\"\n  %1: i64[{rows}, 1] = input \"t\"\n  %2: f32[{rows}] = cross_entropy %0, %1\n  output \"y\" = %2\n}}\n"
        ))
        .unwrap()
    };
    let feeds = |rows: usize| {
        [
            ("x", HostTensor::new(DType::F32, &[rows, 0], vec![]).unwrap()),
            ("t", HostTensor::i64(&[rows, 1], &vec![0; rows]).unwrap()),
        ]
    };
    let s = Session::compile(&g(0), Target::Cpu, &CompileOptions::default()).unwrap();
    assert!(s.run(&feeds(0)).unwrap()[0].1.to_vec().is_empty());
    let s = Session::compile(&g(2), Target::Cpu, &CompileOptions::default()).unwrap();
    assert!(s.run(&feeds(2)).unwrap_err().to_string().contains("out of range"));
}

/// `matmul_epilogue` in each of the kernel's paths, against the reference interpreter: a
/// weight shared by every batch (one tall GEMM onto the repeated bias), a weight per batch
/// (one GEMM per batch), a single product, and an empty contraction (the output is the bias,
/// activated). Every activation; 1e-5 absolute + 1e-5 relative (f32 accumulation).
#[test]
fn matmul_epilogue_matches_the_reference_in_every_path() {
    let cases: [(&[usize], &[usize]); 4] =
        [(&[3, 2, 5, 7], &[7, 6]), (&[3, 5, 7], &[3, 7, 6]), (&[5, 7], &[7, 6]), (&[2, 5, 0], &[0, 6])];
    let dims = |s: &[usize]| s.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ");
    for (a, w) in cases {
        let mut out = a.to_vec();
        *out.last_mut().unwrap() = 6;
        for act in ["none", "relu", "gelu_erf", "gelu_tanh", "silu", "tanh", "sigmoid"] {
            let g = rustral::ir::parse_verified(&format!(
                "graph \"e\" {{\n  %0: f32[{}] = input \"a\"\n  %1: f32[{}] = input \"w\"\n  %2: f32[6] = input \"b\"\n  %3: f32[{}] = matmul_epilogue %0, %1, %2 {{activation={act}}}\n  output \"y\" = %3\n}}\n",
                dims(a),
                dims(w),
                dims(&out)
            ))
            .unwrap();
            let n = |s: &[usize]| s.iter().product::<usize>();
            let feeds = [
                ("a".to_string(), HostTensor::new(DType::F32, a, common::values(1, n(a))).unwrap()),
                ("w".to_string(), HostTensor::new(DType::F32, w, common::values(2, n(w))).unwrap()),
                ("b".to_string(), HostTensor::new(DType::F32, &[6], common::values(3, 6)).unwrap()),
            ];
            let want = evaluate(&g, &feeds.iter().cloned().collect()).unwrap();
            let refs: Vec<(&str, HostTensor)> = feeds.iter().map(|(k, v)| (k.as_str(), v.clone())).collect();
            for threads in [1, 2] {
                let s = Session::compile(&g, Target::Cpu, &CompileOptions { threads, ..CompileOptions::default() })
                    .unwrap();
                let what = format!("{a:?} x {w:?} {act} at {threads} threads");
                let times = s.profile(&refs).unwrap().unwrap();
                assert!(times.iter().all(|k| !k.fallback), "{what} fell back to the reference");
                max_error(&want, &s.run(&refs).unwrap(), 1e-5, 1e-5, &what);
            }
        }
    }
}

/// Permutes that keep the last axis last (row copies, planes split into tasks when large)
/// and that move it (strided gathers), ranks 1 to 4: exact, against the reference.
#[test]
fn permutes_are_exact() {
    let cases: [(&[usize], &[usize]); 7] = [
        (&[7], &[0]),
        (&[2, 9, 3, 5], &[0, 2, 1, 3]),
        (&[2, 9, 3, 5], &[2, 0, 1, 3]),
        (&[1, 5000, 7], &[1, 0, 2]),
        (&[3, 4, 5], &[2, 0, 1]),
        (&[2, 3, 4, 5], &[3, 1, 0, 2]),
        (&[1, 3000, 8], &[0, 1, 2]),
    ];
    for (dims, perm) in cases {
        let out: Vec<usize> = perm.iter().map(|&p| dims[p]).collect();
        let list = |s: &[usize]| s.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ");
        let g = rustral::ir::parse_verified(&format!(
            "graph \"p\" {{\n  %0: f32[{}] = input \"x\"\n  %1: f32[{}] = permute %0 {{perm=[{}]}}\n  output \"y\" = %1\n}}\n",
            list(dims),
            list(&out),
            list(perm)
        ))
        .unwrap();
        let n: usize = dims.iter().product();
        let x = HostTensor::new(DType::F32, dims, (0..n).map(|i| i as f64).collect()).unwrap();
        let want = evaluate(&g, &[("x".to_string(), x.clone())].into_iter().collect()).unwrap();
        let s = Session::compile(&g, Target::Cpu, &CompileOptions { threads: 2, ..CompileOptions::default() }).unwrap();
        let got = s.run(&[("x", x)]).unwrap();
        assert_eq!(got[0].1.to_vec(), want[0].1.to_vec(), "{dims:?} by {perm:?}");
    }
}
