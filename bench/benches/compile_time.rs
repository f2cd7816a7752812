//! Compile time of the O2 pipeline on GPT-2-small-shaped graphs of 12 and 48 layers (the bars:
//! under 1 s and under 5 s in release builds). Verification after each pass is off, as in a
//! release compile.

use criterion::{Criterion, criterion_group, criterion_main};
use rustral_bench::gpt2_small_graph;
use rustral_passes::{OptLevel, PassManager};
use std::hint::black_box;
use std::time::Duration;

fn compile_time(c: &mut Criterion) {
    let mut group = c.benchmark_group("o2_passes");
    group.sample_size(10).measurement_time(Duration::from_secs(20));
    for layers in [12, 48] {
        let g = gpt2_small_graph(layers);
        group.bench_function(format!("gpt2_small_{layers}_layers_{}_nodes", g.len()), |b| {
            b.iter(|| {
                let mut work = g.clone();
                let compiled = PassManager::new(OptLevel::O2).verify_each(false).run(&mut work).expect("compiles");
                black_box(compiled.stats.nodes)
            })
        });
    }
    group.finish();
}

criterion_group!(benches, compile_time);
criterion_main!(benches);
