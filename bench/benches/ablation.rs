//! The ablation matrix as criterion benches: every workload (`rustral_bench::workloads`) at O0,
//! O2 and O2 with each fusion pass switched off, on the CPU target at all cores. The
//! `rustral-bench ablate` command runs the same matrix into manifests; this is the same
//! measurement with criterion's statistics. Filter it, the whole matrix takes a while:
//!
//! `cargo bench -p rustral-bench --bench ablation -- 'gpt2_block/'`

use criterion::{Criterion, criterion_group, criterion_main};
use rustral_bench::ablate::pass_sets;
use rustral_bench::prepare_with;
use rustral_bench::workloads;
use rustral_passes::PassManager;
use std::hint::black_box;
use std::time::Duration;

fn ablation(c: &mut Criterion) {
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    for w in workloads::defaults() {
        let traced = (w.trace)();
        let mut group = c.benchmark_group(w.name);
        group.sample_size(10).measurement_time(Duration::from_secs(2)).warm_up_time(Duration::from_millis(500));
        for set in pass_sets() {
            let mut pm = PassManager::new(set.level).verify_each(false);
            for p in &set.disabled {
                pm = pm.disable(p).expect("fusion passes exist");
            }
            let p = prepare_with(&traced, pm, threads, w.sizes, 1000);
            group.bench_function(&set.label, |b| b.iter(|| black_box(p.program.run_storage(&p.inputs).unwrap())));
        }
        group.finish();
    }
}

criterion_group!(benches, ablation);
criterion_main!(benches);
