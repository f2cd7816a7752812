//! MiniLM-L6 forward (batch 8 x seq 128) on the WGSL target at O0 (op by op) and O2 (fused),
//! on whatever adapter wgpu picks (Mesa's lavapipe on a machine without a GPU). Each timed run
//! is a whole `run`: input upload, every dispatch, output readback. Before timing it prints
//! the kernel, shader and dispatch counts of both programs; with `RUSTRAL_PROFILE=1`, each op's
//! share of a run (every kernel submitted and waited for alone).
//!
//! `cargo bench -p rustral-bench --bench wgsl_target` (`XDG_RUNTIME_DIR` set for Mesa)

use criterion::{Criterion, criterion_group, criterion_main};
use rustral_bench::prepare;
use rustral_bench::workloads::minilm;
use rustral_lowering::lower;
use rustral_lowering::wgsl::{Phase, lower_wgsl};
use rustral_passes::{OptLevel, PassManager};
use rustral_runtime::HostTensor;
use rustral_runtime::wgpu::WgpuProgram;
use std::collections::HashMap;
use std::hint::black_box;
use std::time::Duration;

fn wgsl_target(c: &mut Criterion) {
    let traced = minilm();
    let (batch, seq) = (8, 128);
    let sizes = [("batch", batch), ("seq", seq)];
    let mut group = c.benchmark_group(format!("minilm_l6_b{batch}_s{seq}_wgsl"));
    group.sample_size(10).measurement_time(Duration::from_secs(20)).warm_up_time(Duration::from_secs(2));
    for level in [OptLevel::O0, OptLevel::O2] {
        let cpu = prepare(&traced, level, 1, &sizes, 30000);
        let mut g = traced.graph.clone();
        PassManager::new(level).verify_each(false).run(&mut g).expect("compiles");
        let lowered = lower(&g).expect("lowers");
        let wgsl = lower_wgsl(&lowered, g.name()).expect("lowers to WGSL");
        let init = wgsl.kernels.iter().filter(|k| k.phase == Phase::Init).count();
        let shaders = wgsl.kernels.len();
        let mut program = WgpuProgram::new(wgsl).expect("an adapter");
        eprintln!(
            "{level:?} on {}: {} lowered kernels, {shaders} shaders, {init} run once at bind, {} dispatches per run",
            program.adapter(),
            lowered.kernels.len(),
            program.dispatches()
        );
        program.bind_params(&cpu.params).expect("params bind");
        let inputs: HashMap<String, HostTensor> = cpu.inputs.iter().map(|(n, s)| (n.clone(), s.to_host())).collect();
        if std::env::var_os("RUSTRAL_PROFILE").is_some() {
            let mut by_op: std::collections::BTreeMap<String, (usize, f64)> = Default::default();
            for t in program.profile(&inputs).expect("profiles") {
                let e = by_op.entry(t.op).or_default();
                e.0 += 1;
                e.1 += t.time.as_secs_f64() * 1e3;
            }
            for (op, (n, ms)) in by_op {
                eprintln!("  {op:>20}: {n:>4} dispatches, {ms:>9.1} ms");
            }
        }
        group.bench_function(format!("{level:?}"), |b| b.iter(|| black_box(program.run(&inputs).unwrap())));
    }
    group.finish();
}

criterion_group!(benches, wgsl_target);
criterion_main!(benches);
