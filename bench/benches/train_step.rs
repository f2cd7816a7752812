//! One training step of a GPT-2-small block (d 768, 12 heads, MLP 3072, pre-LN, causal),
//! batch 8 x seq 128, loss mean(y^2), AdamW, on the CPU target at O0 and O2: forward, backward
//! (the grad pass), the optimizer on the host and rebinding the parameters. PyTorch eager's
//! forward + backward + AdamW step on the same block: `bench/python/train_step_torch.py`.
//!
//! `RAYON_NUM_THREADS=N cargo bench -p rustral-bench --bench train_step` (N = 1, 2)

use criterion::{Criterion, criterion_group, criterion_main};
use rustral::frontend::ParamStore;
use rustral::prelude::*;
use rustral::train::{Optimizer, Schedule, Trainer};
use std::hint::black_box;
use std::time::Duration;

fn train_step(c: &mut Criterion) {
    let threads = std::env::var("RAYON_NUM_THREADS").ok().and_then(|v| v.parse().ok()).unwrap_or(2);
    let traced = rustral_bench::gpt2_block_loss();
    let x = HostTensor::new(DType::F32, &[8, 128, 768], rustral::runtime::seeded_values(1, 8 * 128 * 768))
        .expect("8 x 128 x 768 values");
    let mut group = c.benchmark_group("gpt2_block_train_step_b8_s128");
    group.sample_size(10).measurement_time(Duration::from_secs(15)).warm_up_time(Duration::from_secs(3));
    for level in [OptLevel::O0, OptLevel::O2] {
        let options = CompileOptions { level, threads, ..CompileOptions::default() };
        let params = ParamStore::init(&traced.params, 0);
        let mut trainer =
            Trainer::new(&traced, "loss", Target::Cpu, &options, Optimizer::adamw(1e-4), Schedule::Constant, params)
                .expect("compiles");
        eprintln!("{level:?}: {} kernels per step", trainer.session().dispatches().unwrap_or(0));
        group.bench_function(format!("{level:?}_{threads}t"), |b| {
            b.iter(|| black_box(trainer.step(&[("x", x.clone())]).unwrap()))
        });
    }
    group.finish();
}

criterion_group!(benches, train_step);
criterion_main!(benches);
