//! Benchmarks and the pass-ablation harness. Not built yet: they arrive with the benchmarks
//! issue.
