//! Helpers shared by the target tests: seeded inputs, the reference's outputs, tolerance
//! checks and the small models every target must run.

#![allow(dead_code)]

pub mod cli;

use rustral::frontend::{ParamStore, TraceOptions, Traced, trace, trace_named};
use rustral::ir::Graph;
use rustral::models::{Bert, BertConfig, Gpt2, Gpt2Config, Llama, LlamaConfig, MlpConfig, MlpModel};
use rustral::prelude::*;
use rustral::runtime::reference::evaluate;
use std::collections::HashMap;

pub fn values(seed: u64, n: usize) -> Vec<f64> {
    rustral::runtime::seeded_values(seed, n)
}

/// Inputs for `g` (not params): ids below `vocab`, masks with the last position padded.
pub fn inputs(g: &Graph, batch: usize, seq: usize, vocab: usize) -> Vec<(String, HostTensor)> {
    g.inputs()
        .into_iter()
        .enumerate()
        .map(|(i, (name, id))| {
            let ty = &g.node(id).unwrap().ty;
            let shape = ty.shape.resolve(|s| if s == "batch" { batch } else { seq });
            let n: usize = shape.iter().product();
            let data: Vec<f64> = if name.contains("type") {
                vec![0.0; n]
            } else if ty.dtype.is_int() {
                (0..n).map(|k| ((k * 7 + i) % vocab) as f64).collect()
            } else if name.contains("mask") {
                (0..n).map(|k| if (k + 1) % seq == 0 && seq > 1 { 0.0 } else { 1.0 }).collect()
            } else {
                values(i as u64 + 3, n)
            };
            (name, HostTensor::new(ty.dtype, &shape, data).unwrap())
        })
        .collect()
}

pub fn reference(g: &Graph, store: &ParamStore, feeds: &[(String, HostTensor)]) -> Vec<(String, HostTensor)> {
    let mut all: HashMap<String, HostTensor> =
        store.iter().map(|(n, v)| (n.clone(), HostTensor::new(v.dtype, &v.shape, v.data.clone()).unwrap())).collect();
    all.extend(feeds.iter().cloned());
    evaluate(g, &all).unwrap()
}

/// Largest absolute difference; panics past `atol + rtol * |reference|`, naming `what` ran.
/// Half-precision outputs may also differ by one unit in their last place (a value computed a
/// hair differently can round the other way): rtol is at least 2^-7 for bf16, 2^-10 for f16.
pub fn max_error(a: &[(String, HostTensor)], b: &[(String, HostTensor)], atol: f64, rtol: f64, what: &str) -> f64 {
    let mut worst: f64 = 0.0;
    assert_eq!(a.len(), b.len(), "{what}: {} outputs against {}", a.len(), b.len());
    for ((na, ta), (_, tb)) in a.iter().zip(b) {
        assert_eq!(ta.shape(), tb.shape(), "{na}");
        let rtol = match ta.dtype {
            DType::BF16 => rtol.max(1.0 / 128.0),
            DType::F16 => rtol.max(1.0 / 1024.0),
            _ => rtol,
        };
        for (x, y) in ta.to_vec().iter().zip(tb.to_vec()) {
            if (x.is_nan() && y.is_nan()) || x == &y {
                continue;
            }
            let d = (x - y).abs();
            assert!(d <= atol + rtol * x.abs(), "{na} on {what}: reference {x} vs target {y}");
            worst = worst.max(d);
        }
    }
    worst
}

pub fn models() -> Vec<(&'static str, Traced)> {
    let opts = TraceOptions::default;
    let mlp = MlpModel { config: MlpConfig::default() };
    let bert = Bert { config: BertConfig::tiny(2) };
    let gpt2 = Gpt2 { config: Gpt2Config::tiny(2) };
    let llama = Llama { config: LlamaConfig::tiny(2) };
    vec![
        ("mlp", trace(opts(), |ctx| Ok(vec![mlp.trace(ctx)?])).unwrap()),
        (
            "bert",
            trace_named(opts(), |ctx| {
                let (ids, types, mask) = bert.inputs(ctx)?;
                let h = bert.forward(ctx, &ids, &types, &mask)?;
                let e = bert.sentence_embedding(ctx, &h, &mask)?;
                Ok(vec![("hidden".into(), h), ("embeddings".into(), e)])
            })
            .unwrap(),
        ),
        (
            "gpt2",
            trace(opts(), |ctx| {
                let x = gpt2.input(ctx)?;
                Ok(vec![gpt2.forward(ctx, &x)?])
            })
            .unwrap(),
        ),
        (
            "llama",
            trace(opts(), |ctx| {
                let x = llama.input(ctx)?;
                Ok(vec![llama.forward(ctx, &x)?])
            })
            .unwrap(),
        ),
        (
            // The language-model loss: at O2 its log-softmax and one-hot pick are one
            // `cross_entropy` op, which every target runs.
            "gpt2_loss",
            trace_named(opts(), |ctx| {
                let x = gpt2.input(ctx)?;
                let logits = gpt2.forward(ctx, &x)?;
                let dims = [rustral::frontend::Dim::sym("batch"), rustral::frontend::Dim::sym("seq")];
                let labels = ctx.input("labels", &dims, rustral::ir::DType::I64)?;
                let loss = rustral::frontend::nn::cross_entropy(ctx, &logits, &labels)?;
                Ok(vec![("loss".into(), loss), ("logits".into(), logits)])
            })
            .unwrap(),
        ),
    ]
}

/// The tiny GPT-2 traced in `Mode::Train` (dropout after the embeddings, on the attention
/// probabilities and on both residual branches, masks reading `rng_step`) with its
/// language-model loss `loss` over `input_ids[batch, seq]`.
pub fn gpt2_with_dropout(batch: usize, seq: usize, seed: u64) -> Traced {
    use rustral::frontend::{Mode, ShapePolicy};
    let gpt = Gpt2 { config: Gpt2Config::tiny(2) };
    let shape = ShapePolicy::symbolic().pin("batch", batch).pin("seq", seq);
    trace_named(TraceOptions { mode: Mode::Train, seed, shape, ..TraceOptions::default() }, |ctx| {
        let x = gpt.input(ctx)?;
        let logits = gpt.forward(ctx, &x)?;
        let loss = rustral::frontend::nn::cross_entropy(ctx, &logits.slice(1, 0, seq - 1)?, &x.slice(1, 1, seq)?)?;
        Ok(vec![("loss".into(), loss)])
    })
    .unwrap()
}

/// Whether the WGSL target's tests can run: true with an adapter. Without one they fail,
/// naming what to install, unless `RUSTRAL_SKIP_WGPU=1` allows skipping on a developer's
/// machine (never in CI, where `CI` is set).
pub fn wgsl_available() -> bool {
    match rustral::runtime::wgpu::Gpu::new() {
        Ok(_) => true,
        Err(e) => {
            let skip = std::env::var("RUSTRAL_SKIP_WGPU").as_deref() == Ok("1");
            if skip && std::env::var_os("CI").is_none() {
                eprintln!("!!!!! SKIPPING the WGSL target's tests: {e} (RUSTRAL_SKIP_WGPU=1) !!!!!");
                false
            } else {
                panic!("{e}\nThe WGSL target's tests need an adapter; RUSTRAL_SKIP_WGPU=1 skips them outside CI.")
            }
        }
    }
}

/// Feeds for a random graph: every value (inputs and parameters, symbolic dims 2 and 3) by
/// name, the parameters as a store, and the inputs alone.
pub struct RandomFeeds {
    pub all: HashMap<String, HostTensor>,
    pub store: ParamStore,
    pub inputs: Vec<(String, HostTensor)>,
}

pub fn random_graph_feeds(g: &Graph) -> RandomFeeds {
    let inputs = inputs(g, 2, 3, 2);
    let mut all: HashMap<String, HostTensor> = inputs.iter().cloned().collect();
    let mut store = ParamStore::default();
    for (i, (name, id)) in g.params().into_iter().enumerate() {
        let ty = &g.node(id).unwrap().ty;
        let shape: Vec<usize> = ty.shape.dims().iter().map(|d| d.as_static().unwrap_or(2)).collect();
        let n = shape.iter().product();
        let data = values(i as u64 + 9, n);
        store
            .insert(&name, rustral::frontend::ParamValue { dtype: ty.dtype, shape: shape.clone(), data: data.clone() });
        all.insert(name, HostTensor::new(ty.dtype, &shape, data).unwrap());
    }
    RandomFeeds { all, store, inputs }
}

/// Every model of `models()` on `target` at O0 and O2, for two bindings of the symbolic dims,
/// against the reference. Tolerance: 1e-4 absolute + 1e-4 relative on every output value.
/// On the WGSL target also at O2 under [`split_profile`], the larger buffers bound in ranges.
pub fn every_model_matches_the_reference(target: &Target) {
    for (name, t) in models() {
        let store = ParamStore::init(&t.params, 5);
        let mut configs: Vec<(String, CompileOptions)> = [OptLevel::O0, OptLevel::O2]
            .into_iter()
            .map(|level| {
                (format!("{name}-{level:?}"), CompileOptions { level, threads: 2, ..CompileOptions::default() })
            })
            .collect();
        if matches!(target, Target::Wgsl) {
            let options =
                CompileOptions { threads: 2, webgpu_limits: split_profile(&t.graph), ..CompileOptions::default() };
            configs.push((format!("{name}-O2-split"), options));
        }
        for (config, options) in configs {
            let level = options.level;
            let mut s = Session::compile(&t.graph, target.clone(), &options).unwrap();
            s.bind(&store).unwrap();
            if config.ends_with("split") {
                let (program, _) = s.wgsl().unwrap();
                let ranges = program.kernels.iter().flat_map(|k| &k.bindings).filter(|b| b.size.is_some_and(|n| n > 4));
                assert!(ranges.count() > 0, "{config}: no buffer is bound in ranges");
            }
            for (batch, seq) in [(2, 5), (1, 7)] {
                let feeds = inputs(&t.graph, batch, seq, 50);
                let want = reference(&t.graph, &store, &feeds);
                let refs: Vec<(&str, HostTensor)> = feeds.iter().map(|(n, v)| (n.as_str(), v.clone())).collect();
                let got = s.run(&refs).unwrap();
                if (batch, seq) == (2, 5) {
                    web_dump(&config, &s, &t, &store, &options, &feeds);
                }
                let err = max_error(&want, &got, 1e-4, 1e-4, &format!("{config} {target:?} {level:?}"));
                println!("{config} on {target:?} batch {batch} seq {seq}: max abs error {err:.2e}");
            }
        }
    }
}

/// WebGPU's default limits with a binding half the size of `g`'s largest parameter (rounded up
/// to the 256-byte offset alignment): that parameter and those near its size are bound in two
/// ranges, as GPT-2-small's 154 MB embedding is under the 128 MiB default, with the kernel
/// families that read them (gather, matmul, the layout ops of the tied head) reading in ranges.
pub fn split_profile(g: &Graph) -> rustral::lowering::wgsl::Profile {
    let largest = g
        .params()
        .into_iter()
        .filter_map(|(_, id)| {
            let shape = g.node(id)?.ty.shape.dims().iter().map(|d| d.as_static()).collect::<Option<Vec<usize>>>()?;
            Some(shape.iter().product::<usize>() as u64 * 4)
        })
        .max()
        .unwrap_or(0u64);
    let binding: u64 = (largest / 2).div_ceil(256) * 256;
    let limits = rustral::lowering::wgsl::Limits { max_storage_buffer_binding_size: binding, ..Default::default() };
    rustral::lowering::wgsl::Profile { name: format!("{binding}-byte binding"), limits }
}

/// With `RUSTRAL_WEB_DUMP=DIR` (scripts/test.sh sets it), a WGSL session's program folder goes
/// to DIR/NAME with its parity data in DIR/NAME/check: the inputs, and the CPU target's
/// outputs on them (`expected.safetensors`). `web/test` runs every such folder with the JS
/// runtime in Dawn and in Chromium and compares (scripts/web-check.sh).
pub fn web_dump(
    name: &str,
    session: &Session,
    t: &Traced,
    store: &ParamStore,
    options: &CompileOptions,
    feeds: &[(String, HostTensor)],
) {
    let Some(root) = std::env::var_os("RUSTRAL_WEB_DUMP") else { return };
    if !matches!(session.target(), Target::Wgsl) {
        return;
    }
    let dir = std::path::Path::new(&root).join(name);
    session.save_wgsl(&dir).unwrap();
    let mut cpu = Session::compile(&t.graph, Target::Cpu, options).unwrap();
    cpu.bind(store).unwrap();
    let refs: Vec<(&str, HostTensor)> = feeds.iter().map(|(n, v)| (n.as_str(), v.clone())).collect();
    let expected = cpu.run(&refs).unwrap();
    rustral::runtime::wgpu::save_tensors(&dir.join("check/inputs.safetensors"), feeds).unwrap();
    rustral::runtime::wgpu::save_tensors(&dir.join("check/expected.safetensors"), &expected).unwrap();
}

/// A .npy file's bytes as numpy writes them (format 1.0): `descr` (`<f4`, `<i8`, ...), `shape`,
/// then `data`, the elements' little-endian bytes.
pub fn npy_bytes(descr: &str, shape: &[u64], data: &[u8]) -> Vec<u8> {
    let dims: Vec<String> = shape.iter().map(u64::to_string).collect();
    let comma = if shape.len() == 1 { "," } else { "" };
    let mut header = format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': ({}{comma}), }}", dims.join(", "));
    while (10 + header.len() + 1) % 64 != 0 {
        header.push(' ');
    }
    header.push('\n');
    let mut bytes = b"\x93NUMPY\x01\x00".to_vec();
    bytes.extend((header.len() as u16).to_le_bytes());
    bytes.extend(header.as_bytes());
    bytes.extend(data);
    bytes
}

/// The CBLAS library the vendor-BLAS tests run against (`RUSTRAL_TEST_BLAS`, which
/// `scripts/test.sh` sets to OpenBLAS from PyPI); None when unset outside CI, a panic in CI.
pub fn test_blas() -> Option<String> {
    match std::env::var("RUSTRAL_TEST_BLAS") {
        Ok(p) if !p.is_empty() => Some(p),
        _ if std::env::var_os("CI").is_some() => {
            panic!("CI runs the BLAS tests: set RUSTRAL_TEST_BLAS (scripts/test.sh does)")
        }
        _ => {
            eprintln!("RUSTRAL_TEST_BLAS is unset: the BLAS path is not tested (scripts/test.sh sets it)");
            None
        }
    }
}
