//! Per-kernel profile of a workload on the CPU target, summed by op and by module path:
//! `cargo run --release -p rustral-bench --example profile -- [minilm|gpt2|gpt2_block|train_step|resnet18|vit_b16] [threads] [batch]`
//! (`train_step`: the training step of the `train_step` bench, forward and backward, without
//! the optimizer).

use rustral_bench::prepare;
use rustral_frontend::{TraceOptions, Traced, trace_named};
use rustral_models::{Bert, BertConfig, Gpt2, Gpt2Config};
use rustral_passes::OptLevel;
use rustral_runtime::HostTensor;
use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let which = args.first().map_or("minilm", String::as_str);
    let threads = args.get(1).and_then(|t| t.parse().ok()).unwrap_or(1);
    let batch: Option<usize> = args.get(2).and_then(|b| b.parse().ok());
    let (traced, sizes) = match which {
        "train_step" => {
            let t = rustral_bench::gpt2_block_loss();
            let names: Vec<String> = t.params.iter().map(|p| p.name.clone()).collect();
            let options = rustral::CompileOptions::default();
            let graph = rustral::train::training_graph(&t.graph, "loss", &names, &options).expect("differentiates");
            (Traced { graph, params: t.params }, vec![])
        }
        "resnet18" => (rustral_bench::workloads::resnet18(), vec![("batch", 8)]),
        "vit_b16" => (rustral_bench::workloads::vit_b16(), vec![("batch", 8)]),
        "gpt2_block" => (rustral_bench::workloads::gpt2_block(), vec![]),
        "gpt2" => {
            let mut config = Gpt2Config::tiny(12);
            (config.n_embd, config.n_head, config.vocab_size, config.n_positions) = (768, 12, 50257, 1024);
            let m = Gpt2 { config };
            let t = trace_named(TraceOptions::default(), |ctx| {
                let x = m.input(ctx)?;
                Ok(vec![("logits".into(), m.forward(ctx, &x)?)])
            });
            (t.expect("traces"), vec![("batch", 8), ("seq", 128)])
        }
        _ => {
            let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../fixtures/minilm/model_files/config.json");
            let m = Bert { config: BertConfig::from_file(std::path::Path::new(path)).expect("config") };
            let t = trace_named(TraceOptions::default(), |ctx| {
                let (ids, types, mask) = m.inputs(ctx)?;
                let h = m.forward(ctx, &ids, &types, &mask)?;
                Ok(vec![("embeddings".into(), m.sentence_embedding(ctx, &h, &mask)?)])
            });
            (t.expect("traces"), vec![("batch", 32), ("seq", 128)])
        }
    };
    // A batch given on the command line replaces the workload's own (the bench's MiniLM row is batch 8).
    let sizes: Vec<(&str, usize)> = sizes
        .into_iter()
        .map(|(name, size)| (name, if name == "batch" { batch.unwrap_or(size) } else { size }))
        .collect();
    let p = prepare(&traced, OptLevel::O2, threads, &sizes, 30000);
    let inputs: HashMap<String, HostTensor> = p.inputs.iter().map(|(n, s)| (n.clone(), s.to_host())).collect();
    let _ = p.program.run_profiled(&inputs).expect("runs");
    let (_, times) = p.program.run_profiled(&inputs).expect("runs");
    let total: Duration = times.iter().map(|t| t.time).sum();
    let mut by_op: BTreeMap<String, (Duration, usize, usize)> = BTreeMap::new();
    for t in &times {
        let e = by_op.entry(t.op.clone()).or_default();
        e.0 += t.time;
        e.1 += 1;
        e.2 += usize::from(t.fallback);
    }
    let mut rows: Vec<_> = by_op.into_iter().collect();
    rows.sort_by_key(|r| std::cmp::Reverse(r.1.0));
    println!("{which}, {threads} thread(s): {:.1} ms in {} kernels", total.as_secs_f64() * 1e3, times.len());
    println!("{:<20} {:>10} {:>7} {:>8} {:>9}", "op", "ms", "share", "kernels", "fallback");
    for (op, (d, n, fb)) in rows {
        println!(
            "{op:<20} {:>10.2} {:>6.1}% {n:>8} {fb:>9}",
            d.as_secs_f64() * 1e3,
            100.0 * d.as_secs_f64() / total.as_secs_f64()
        );
    }
    let mut by_module: BTreeMap<String, Duration> = BTreeMap::new();
    for t in &times {
        *by_module.entry(t.provenance.clone()).or_default() += t.time;
    }
    let mut modules: Vec<_> = by_module.into_iter().collect();
    modules.sort_by_key(|m| std::cmp::Reverse(m.1));
    println!("\n{:<48} {:>10} {:>7}", "module (provenance of the fused node)", "ms", "share");
    for (path, d) in modules.into_iter().take(12) {
        println!("{path:<48} {:>10.2} {:>6.1}%", d.as_secs_f64() * 1e3, 100.0 * d.as_secs_f64() / total.as_secs_f64());
    }
}
