//! Benchmarks: the workloads (`workloads`), compiled and ready to run (`prepare`), the
//! ablation harness (`ablate`, one manifest per run, `manifest`), its statistics (`stats`) and
//! the report over a folder of manifests (`report`), compile time against graph size
//! (`scaling`). The criterion benches in `benches/`
//! share the workloads; `cargo run --release -p rustral-bench -- ablate|report` is the harness.

#![deny(missing_docs)]

pub mod ablate;
pub mod generate;
pub mod manifest;
pub mod report;
pub mod scaling;
pub mod stats;
pub mod workloads;

use rustral_frontend::{TraceOptions, trace};
use rustral_ir::Graph;
use rustral_models::{Gpt2, Gpt2Config};

/// GPT-2 small's shape (width 768, 12 heads, vocab 50257, 1024 positions) with `layers`
/// blocks, traced for inference with symbolic batch and sequence.
pub fn gpt2_small_graph(layers: usize) -> Graph {
    let config = Gpt2Config::small(layers);
    let model = Gpt2 { config };
    let traced = trace(TraceOptions { name: format!("gpt2-small-{layers}"), ..TraceOptions::default() }, |ctx| {
        let ids = model.input(ctx)?;
        Ok(vec![model.forward(ctx, &ids)?])
    });
    traced.expect("GPT-2 small traces").graph
}

/// One GPT-2-small block (batch 8 x seq 128, width 768) with the loss `mean(y^2)`, traced for
/// training: the workload of the `train_step` bench and of `profile -- train_step`.
pub fn gpt2_block_loss() -> Traced {
    use rustral_frontend::nn::Module;
    use rustral_frontend::{DType, Dim, trace_named};
    let block = Gpt2Config::small(1).block().expect("GPT-2 small's activation is known");
    trace_named(TraceOptions::default(), |ctx| {
        let x = ctx.input("x", &[Dim::fixed(8), Dim::fixed(128), Dim::fixed(768)], DType::F32)?;
        let y = ctx.scope("h.0", |ctx| block.forward(ctx, &x))?;
        Ok(vec![("loss".into(), y.square()?.mean(&[0, 1, 2], false)?)])
    })
    .expect("the block traces")
}

use rustral_frontend::{ParamStore, Traced};
use rustral_lowering::lower;
use rustral_passes::{OptLevel, PassManager};
use rustral_runtime::HostTensor;
use rustral_runtime::cpu::{CpuProgram, Storage};
use std::collections::HashMap;

/// A traced graph compiled at `level` for the CPU target on `threads` threads, with seeded
/// parameters bound and seeded inputs (bound for `sizes`) ready in CPU storage.
pub struct Prepared {
    /// The program.
    pub program: CpuProgram,
    /// Its inputs.
    pub inputs: HashMap<String, Storage>,
    /// Kernels in the program.
    pub kernels: usize,
    /// The seeded parameters it was bound with (for binding another target the same way).
    pub params: HashMap<String, HostTensor>,
}

/// Compile and bind `traced` (see `Prepared`). Integer inputs get ids below `vocab`.
pub fn prepare(traced: &Traced, level: OptLevel, threads: usize, sizes: &[(&str, usize)], vocab: usize) -> Prepared {
    prepare_with(traced, PassManager::new(level).verify_each(false), threads, sizes, vocab)
}

/// As `prepare`, with a pass pipeline of the caller's (passes switched off, say).
pub fn prepare_with(
    traced: &Traced,
    pm: PassManager,
    threads: usize,
    sizes: &[(&str, usize)],
    vocab: usize,
) -> Prepared {
    let mut g = traced.graph.clone();
    pm.run(&mut g).expect("compiles");
    let mut program = CpuProgram::new(lower(&g).expect("lowers"), threads).expect("thread pool");
    let store = ParamStore::init(&traced.params, 1);
    let params: HashMap<String, HostTensor> = store
        .iter()
        .map(|(n, v)| (n.clone(), HostTensor::new(v.dtype, &v.shape, v.data.clone()).expect("fits")))
        .collect();
    program.bind_params(&params).expect("params bind");
    let mut inputs = HashMap::new();
    for (i, (name, id)) in g.inputs().into_iter().enumerate() {
        let ty = &g.node(id).expect("input exists").ty;
        let shape = ty.shape.resolve(|s| sizes.iter().find(|(k, _)| *k == s).map_or(1, |(_, n)| *n));
        let n: usize = shape.iter().product();
        let data: Vec<f64> = if name.contains("mask") || name.contains("type") {
            vec![if name.contains("mask") { 1.0 } else { 0.0 }; n]
        } else if ty.dtype.is_int() {
            (0..n).map(|k| ((k * 31 + i) % vocab) as f64).collect()
        } else {
            (0..n).map(|k| ((k * 37 + i) % 101) as f64 / 50.0 - 1.0).collect()
        };
        inputs.insert(name, Storage::from_host(HostTensor::new(ty.dtype, &shape, data).expect("fits")));
    }
    let kernels = program.program().kernels.len();
    Prepared { program, inputs, kernels, params }
}
