//! The CPU target on the workloads, fused (O2) against op-by-op (O0), on 1 and 2
//! threads: LayerNorm [8,128,768], GELU tanh [8,128,3072], GEMM 1024^3, a GPT-2-small block
//! (batch 8, seq 128) and MiniLM-L6 (batch 32, seq 128). PyTorch's figures for the same work
//! are in ../shared/fixtures/perf (torch is not installed here to rerun them).
//!
//! `cargo bench -p rustral-bench --bench cpu_target [-- FILTER]`

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use rustral_bench::{Prepared, prepare};
use rustral_frontend::nn::{
    Activation, Dropout, Gpt2Block, LayerNorm, Linear, Mlp, Module, MultiHeadAttention, QkvProjection, gelu,
};
use rustral_frontend::{DType, Dim, TraceOptions, Traced, trace, trace_named};
use rustral_models::{Bert, BertConfig};
use rustral_passes::OptLevel;
use rustral_runtime::cpu::Elementwise;
use std::hint::black_box;
use std::time::Duration;

fn x_input(
    ctx: &mut rustral_frontend::ForwardCtx,
    dims: [usize; 3],
) -> rustral_frontend::Result<rustral_frontend::Tensor> {
    ctx.input("x", &dims.map(Dim::fixed), DType::F32)
}

fn layer_norm() -> Traced {
    trace(TraceOptions::default(), |ctx| {
        let x = x_input(ctx, [8, 128, 768])?;
        Ok(vec![LayerNorm::new("ln", 768, 1e-5).forward(ctx, &x)?])
    })
    .expect("traces")
}

fn gelu_tanh() -> Traced {
    trace(TraceOptions::default(), |ctx| Ok(vec![gelu(&x_input(ctx, [8, 128, 3072])?, true)?])).expect("traces")
}

/// `tanh(x * 0.75 + b) * x + 0.5 * x^2` with `b` a [3072] parameter: no named pattern, so
/// the passes make it one `FusedElementwise` with a row-broadcast operand.
fn elementwise_chain() -> Traced {
    trace(TraceOptions::default(), |ctx| {
        let x = x_input(ctx, [8, 128, 3072])?;
        let b = ctx.param("b", &[Dim::fixed(3072)], rustral_frontend::Init::Normal { std: 0.1 })?;
        let t = x.mul_scalar(0.75)?.add(&b)?.tanh()?.mul(&x)?;
        Ok(vec![t.add(&x.square()?.mul_scalar(0.5)?)?])
    })
    .expect("traces")
}

fn gemm(n: usize) -> Traced {
    trace(TraceOptions::default(), |ctx| {
        let a = ctx.input("a", &[Dim::fixed(n), Dim::fixed(n)], DType::F32)?;
        let b = ctx.input("b", &[Dim::fixed(n), Dim::fixed(n)], DType::F32)?;
        Ok(vec![a.matmul(&b)?])
    })
    .expect("traces")
}

fn gpt2_block() -> Traced {
    let d = 768;
    let block = Gpt2Block {
        ln_1: LayerNorm::new("ln_1", d, 1e-5),
        attn: MultiHeadAttention {
            name: "attn".into(),
            n_heads: 12,
            n_kv_heads: 12,
            head_dim: 64,
            qkv: QkvProjection::Fused(Linear::conv1d("c_attn", d, 3 * d)),
            out: Linear::conv1d("c_proj", d, d),
            rope: None,
            causal: true,
            divide_scores: true,
            dropout: Dropout { p: 0.0 },
        },
        ln_2: LayerNorm::new("ln_2", d, 1e-5),
        mlp: Mlp {
            name: "mlp".into(),
            up: Linear::conv1d("c_fc", d, 4 * d),
            act: Activation::GeluTanh,
            down: Linear::conv1d("c_proj", 4 * d, d),
        },
        dropout: Dropout { p: 0.0 },
    };
    trace(TraceOptions::default(), |ctx| {
        let x = x_input(ctx, [8, 128, d])?;
        Ok(vec![ctx.scope("h.0", |ctx| block.forward(ctx, &x))?])
    })
    .expect("traces")
}

fn minilm() -> Traced {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared/fixtures/minilm/model_files/config.json");
    let model = Bert { config: BertConfig::from_file(std::path::Path::new(path)).expect("MiniLM config") };
    trace_named(TraceOptions::default(), |ctx| {
        let (ids, types, mask) = model.inputs(ctx)?;
        let h = model.forward(ctx, &ids, &types, &mask)?;
        Ok(vec![("embeddings".into(), model.sentence_embedding(ctx, &h, &mask)?)])
    })
    .expect("traces")
}

fn run(p: &Prepared) {
    black_box(p.program.run_storage(&p.inputs).expect("runs"));
}

fn bench(
    c: &mut Criterion,
    name: &str,
    traced: &Traced,
    levels: &[OptLevel],
    sizes: &[(&str, usize)],
    flops: Option<u64>,
    time: u64,
) {
    let mut group = c.benchmark_group(name);
    group.sample_size(10).measurement_time(Duration::from_secs(time)).warm_up_time(Duration::from_secs(1));
    if let Some(f) = flops {
        group.throughput(Throughput::Elements(f));
    }
    for &level in levels {
        for threads in [1, 2] {
            let p = prepare(traced, level, threads, sizes, 30000);
            let label = if level == OptLevel::O0 { "op_by_op" } else { "fused" };
            group.bench_function(format!("{label}_{threads}t_{}_kernels", p.kernels), |b| b.iter(|| run(&p)));
        }
    }
    group.finish();
}

/// The chain fused and compiled by Cranelift, fused and interpreted, and op by op.
fn jit_against_interpreter(c: &mut Criterion) {
    let traced = elementwise_chain();
    let mut group = c.benchmark_group("elementwise_chain_8x128x3072");
    group.sample_size(10).measurement_time(Duration::from_secs(3)).warm_up_time(Duration::from_secs(1));
    for threads in [1, 2] {
        for (label, level, mode) in [
            ("jit", OptLevel::O2, Elementwise::Jit),
            ("interpreted", OptLevel::O2, Elementwise::Interpreted),
            ("op_by_op", OptLevel::O0, Elementwise::Jit),
        ] {
            let mut p = prepare(&traced, level, threads, &[], 1);
            p.program.set_elementwise(mode);
            group.bench_function(format!("{label}_{threads}t_{}_kernels", p.kernels), |b| b.iter(|| run(&p)));
        }
    }
    group.finish();
}

fn cpu_target(c: &mut Criterion) {
    jit_against_interpreter(c);
    let both = [OptLevel::O0, OptLevel::O2];
    bench(c, "layer_norm_8x128x768", &layer_norm(), &both, &[], None, 3);
    bench(c, "gelu_tanh_8x128x3072", &gelu_tanh(), &both, &[], None, 3);
    bench(c, "gemm_1024", &gemm(1024), &[OptLevel::O2], &[], Some(2 * 1024 * 1024 * 1024), 5);
    bench(c, "gpt2_small_block_b8_s128", &gpt2_block(), &both, &[], None, 10);
    bench(c, "minilm_l6_b32_s128", &minilm(), &[OptLevel::O2], &[("batch", 32), ("seq", 128)], None, 20);
}

criterion_group!(benches, cpu_target);
criterion_main!(benches);
