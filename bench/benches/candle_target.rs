//! MiniLM-L6 forward (batch 8 x seq 128, O2) on the Candle target's CPU device against the CPU
//! target, in one run, on 1 and 2 threads (candle's CPU kernels use rayon's global pool and
//! gemm's threads, so each group sets RAYON_NUM_THREADS before the first candle call: run the
//! two thread counts as separate invocations, as below).
//!
//! `RAYON_NUM_THREADS=1 cargo bench -p rustral-bench --bench candle_target`

use criterion::{Criterion, criterion_group, criterion_main};
use rustral_bench::workloads::minilm;
use rustral_bench::{Prepared, prepare};
use rustral_lowering::lower;
use rustral_passes::{OptLevel, PassManager};
use rustral_runtime::HostTensor;
use rustral_runtime::candle::{CandleProgram, Device};
use std::collections::HashMap;
use std::hint::black_box;
use std::time::Duration;

fn candle_target(c: &mut Criterion) {
    let threads = std::env::var("RAYON_NUM_THREADS").ok().and_then(|v| v.parse().ok()).unwrap_or(2);
    let traced = minilm();
    let sizes = [("batch", 8), ("seq", 128)];
    let cpu: Prepared = prepare(&traced, OptLevel::O2, threads, &sizes, 30000);

    let mut g = traced.graph.clone();
    PassManager::new(OptLevel::O2).verify_each(false).run(&mut g).expect("compiles");
    let mut candle = CandleProgram::new(lower(&g).expect("lowers"), Device::Cpu);
    candle.bind_params(&cpu.params).expect("params bind");
    let inputs: HashMap<String, HostTensor> = cpu.inputs.iter().map(|(n, s)| (n.clone(), s.to_host())).collect();
    let on_device = candle.upload_inputs(&inputs).expect("inputs upload");

    let mut group = c.benchmark_group("minilm_l6_b8_s128");
    group.sample_size(10).measurement_time(Duration::from_secs(10)).warm_up_time(Duration::from_secs(2));
    group.bench_function(format!("cpu_target_{threads}t"), |b| {
        b.iter(|| black_box(cpu.program.run_storage(&cpu.inputs).unwrap()))
    });
    group.bench_function(format!("candle_cpu_{threads}t"), |b| {
        b.iter(|| black_box(candle.run_device(&on_device).unwrap()))
    });
    group.finish();
}

criterion_group!(benches, candle_target);
criterion_main!(benches);
