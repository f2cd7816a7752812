//! The CPU target on the workloads, fused (O2) against op-by-op (O0), on 1 and 2
//! threads: LayerNorm [8,128,768], GELU tanh [8,128,3072], GEMM 1024^3, a GPT-2-small block
//! (batch 8, seq 128), causal attention [8,12,128,64], MiniLM's padded attention [8,12,128,32]
//! and softmax [8,12,128,128] (O2: the fused kernel, O0: matmul, mask, softmax, matmul), the
//! head-split permute [8,128,12,64] -> [8,12,128,64], an LM loss's cross-entropy of [8,128,8192]
//! logits, MiniLM-L6 (batch 32, seq 128), plus a fused elementwise chain compiled
//! by Cranelift and run by the precompiled tile loops against the interpreter. The workloads are `rustral_bench::workloads`; PyTorch's
//! side is `fixtures/perf/torch_anchors.py` and `bench/python/torch_bench.py`.
//!
//! `cargo bench -p rustral-bench --bench cpu_target [-- FILTER]`

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use rustral_bench::workloads::{
    attention, cross_entropy, elementwise_chain, gelu_tanh, gemm, gpt2_block, head_split, layer_norm, minilm,
    padded_attention, resnet_conv3x3, resnet_maxpool, resnet_stem, softmax,
};
use rustral_bench::{Prepared, prepare};
use rustral_frontend::Traced;
use rustral_passes::OptLevel;
use rustral_runtime::cpu::Elementwise;
use std::hint::black_box;
use std::time::Duration;

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
            // Ids below 1000: within every vocabulary here (the loss's 8192 classes too).
            let p = prepare(traced, level, threads, sizes, 1000);
            let label = if level == OptLevel::O0 { "op_by_op" } else { "fused" };
            group.bench_function(format!("{label}_{threads}t_{}_kernels", p.kernels), |b| b.iter(|| run(&p)));
        }
    }
    group.finish();
}

/// The chain fused and compiled (the default choice, then Cranelift and the tile loops each
/// forced), fused and interpreted, and op by op.
fn jit_against_interpreter(c: &mut Criterion) {
    let traced = elementwise_chain();
    let mut group = c.benchmark_group("elementwise_chain_8x128x3072");
    group.sample_size(10).measurement_time(Duration::from_secs(3)).warm_up_time(Duration::from_secs(1));
    for threads in [1, 2] {
        for (label, level, mode) in [
            ("jit", OptLevel::O2, Elementwise::Jit),
            ("cranelift", OptLevel::O2, Elementwise::Cranelift),
            ("tiles", OptLevel::O2, Elementwise::Tiles),
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
    bench(c, "attention_8x12x128x64_causal", &attention(), &both, &[], None, 3);
    bench(c, "attention_8x12x128x32_padding_mask", &padded_attention(), &both, &[], None, 3);
    bench(c, "softmax_8x12x128x128", &softmax(), &both, &[], None, 3);
    bench(c, "cross_entropy_8x128x8192", &cross_entropy(), &both, &[], None, 3);
    bench(c, "head_split_permute_8x128x12x64", &head_split(), &[OptLevel::O2], &[], None, 2);
    bench(c, "gemm_1024", &gemm(1024), &[OptLevel::O2], &[], Some(2 * 1024 * 1024 * 1024), 5);
    // 8 images x 64 filters x 112^2 outputs x 147 multiply-adds.
    bench(c, "resnet_stem_conv7x7s2_b8", &resnet_stem(), &[OptLevel::O2], &[], Some(2 * 8 * 64 * 112 * 112 * 147), 5);
    bench(c, "resnet_maxpool3x3s2_b8", &resnet_maxpool(), &[OptLevel::O2], &[], None, 5);
    // 8 images x filters x outputs x 9 x channels multiply-adds (what a direct sum does; the
    // Winograd kernel does 4/9 of them).
    for (channels, size) in [(64, 56), (512, 7)] {
        let flops = 2 * 8 * channels * size * size * 9 * channels;
        let name = format!("resnet_conv3x3_{channels}c_{size}px_b8");
        bench(c, &name, &resnet_conv3x3(channels, size), &[OptLevel::O2], &[], Some(flops as u64), 5);
    }
    bench(c, "gpt2_small_block_b8_s128", &gpt2_block(), &both, &[], None, 10);
    bench(c, "minilm_l6_b32_s128", &minilm(), &[OptLevel::O2], &[("batch", 32), ("seq", 128)], None, 20);
}

criterion_group!(benches, cpu_target);
criterion_main!(benches);
