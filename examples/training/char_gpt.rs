//! The char_gpt example's training, shared with the test that checks it learns: a small
//! character-level GPT-2 on a text, its loss against the unigram baseline, and a sample.

use super::progress;
use rustral::frontend::nn::cross_entropy;
use rustral::frontend::{ParamStore, ShapePolicy, TraceOptions, trace_named};
use rustral::models::{Gpt2, Gpt2Config};
use rustral::prelude::*;
use rustral::train::{Optimizer, RunManifest, Schedule, Trainer};

/// What a run ends with.
pub struct Outcome {
    /// Mean loss (nats per character) of the last 20 steps.
    pub final_loss: f64,
    /// The loss of predicting every character by its frequency: the text's unigram entropy.
    pub unigram: f64,
    /// Generated text.
    pub sample: String,
    /// The loss of every step (the global batch's, on every rank of a data-parallel run).
    pub losses: Vec<f64>,
    /// The data-parallel run, if this was a rank of one.
    pub parallel: Option<rustral::train::ParallelRecord>,
    /// Seconds the training steps took.
    pub train_seconds: f64,
    /// The run's manifest: every step's loss and time, and the data-parallel run's buckets
    /// and communication time.
    pub manifest: RunManifest,
}

/// Deterministic xorshift64 for windows and sampling.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn uniform(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// Train for `steps` on `text` (windows of 32 characters, 16 a batch) and sample 200
/// characters after `prompt`.
pub fn train(text: &str, steps: usize, prompt: &str, show: bool) -> Result<Outcome, Box<dyn std::error::Error>> {
    train_ranked(text, steps, prompt, show, None)
}

/// [`train`] as one rank of `group` (`(group, bucket bytes)`: a data-parallel run), or as the
/// process's rank when an MPI launcher started it; every rank draws the same global batches.
pub fn train_ranked(
    text: &str,
    steps: usize,
    prompt: &str,
    show: bool,
    group: Option<(rustral::runtime::collective::Collective, usize)>,
) -> Result<Outcome, Box<dyn std::error::Error>> {
    let mut chars: Vec<char> = text.chars().collect::<std::collections::BTreeSet<_>>().into_iter().collect();
    chars.sort();
    let ids: Vec<usize> =
        text.chars().map(|c| chars.binary_search(&c).expect("every char is in the vocabulary")).collect();
    let mut counts = vec![0usize; chars.len()];
    for &i in &ids {
        counts[i] += 1;
    }
    let unigram = counts
        .iter()
        .filter(|&&c| c > 0)
        .map(|&c| {
            let p = c as f64 / ids.len() as f64;
            -p * p.ln()
        })
        .sum::<f64>();
    let (window, batch) = (32, 16);
    if ids.len() <= window + 1 {
        return Err("the text needs more than 33 characters".into());
    }
    let config = Gpt2Config {
        vocab_size: chars.len(),
        n_embd: 64,
        n_layer: 2,
        n_head: 4,
        n_positions: window,
        resid_pdrop: 0.0,
        embd_pdrop: 0.0,
        attn_pdrop: 0.0,
        ..Gpt2Config::tiny(2)
    };
    let gpt = Gpt2 { config };
    // The window is fixed (the embedding's gradient needs static dims after the batch); the
    // batch is not, so each rank of a data-parallel run takes its share of it.
    let pinned = ShapePolicy::symbolic().pin("seq", window);
    let train = trace_named(TraceOptions { shape: pinned, ..TraceOptions::default() }, |ctx| {
        let x = gpt.input(ctx)?;
        let y = ctx.input("targets", &[Dim::sym("batch"), Dim::sym("seq")], DType::I64)?;
        let logits = gpt.forward(ctx, &x)?;
        Ok(vec![("loss".into(), cross_entropy(ctx, &logits, &y)?)])
    })?;
    let infer = trace_named(TraceOptions::default(), |ctx| {
        let x = gpt.input(ctx)?;
        Ok(vec![("logits".into(), gpt.forward(ctx, &x)?)])
    })?;
    // Threads: the cores this process may use (under `mpirun`, the rank's binding).
    let options = CompileOptions::default();
    let schedule = Schedule::WarmupCosine { warmup: steps / 10, total: steps, min_factor: 0.1 };
    let params = ParamStore::init(&train.params, 0);
    let optimizer = Optimizer::adamw(3e-3);
    let mut trainer = Trainer::new(&train, "loss", Target::Cpu, &options, optimizer, schedule, params)?;
    let config = serde_json::json!({
        "vocab_size": chars.len(), "n_embd": 64, "n_layer": 2, "n_head": 4, "window": window,
        "batch_size": batch, "steps": steps, "threads": options.threads,
    });
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut manifest = RunManifest::new("char_gpt", "cpu", "O2", config, optimizer, schedule, root);
    if let Some((comm, bucket_bytes)) = group {
        trainer = trainer.with_collective(comm, bucket_bytes)?;
    }
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let bar = progress(steps as u64);
    if !show {
        bar.set_draw_target(indicatif::ProgressDrawTarget::hidden());
    }
    let mut last = Vec::new();
    let start = std::time::Instant::now();
    for _ in 0..steps {
        let (mut x, mut y) = (Vec::with_capacity(batch * window), Vec::with_capacity(batch * window));
        for _ in 0..batch {
            let start = (rng.next() as usize) % (ids.len() - window - 1);
            x.extend(ids[start..start + window].iter().map(|&i| i as f64));
            y.extend(ids[start + 1..start + window + 1].iter().map(|&i| i as f64));
        }
        let x = HostTensor::new(DType::I64, &[batch, window], x)?;
        let y = HostTensor::new(DType::I64, &[batch, window], y)?;
        let loss = trainer.step(&[("input_ids", x), ("targets", y)])?;
        last.push(loss);
        manifest.step(loss, start.elapsed().as_secs_f64());
        bar.set_message(format!("{loss:.3} (unigram {unigram:.3})"));
        bar.inc(1);
    }
    bar.finish();
    let train_seconds = start.elapsed().as_secs_f64();
    let tail = &last[last.len().saturating_sub(20)..];
    let final_loss = tail.iter().sum::<f64>() / tail.len() as f64;

    let mut session = Session::compile(&infer.graph, Target::Cpu, &options)?;
    session.bind(trainer.params()?)?;
    let mut context: Vec<usize> = prompt.chars().filter_map(|c| chars.binary_search(&c).ok()).collect();
    if context.is_empty() {
        context.push(0);
    }
    let mut sample: String = context.iter().map(|&i| chars[i]).collect();
    for _ in 0..200 {
        let from = context.len().saturating_sub(window);
        let seen = &context[from..];
        let x = HostTensor::new(DType::I64, &[1, seen.len()], seen.iter().map(|&i| i as f64).collect())?;
        let logits = session.run(&[("input_ids", x)])?.remove(0).1.to_vec();
        let row = &logits[(seen.len() - 1) * chars.len()..];
        // Temperature 0.8.
        let top = row.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let weights: Vec<f64> = row.iter().map(|l| ((l - top) / 0.8).exp()).collect();
        let mut u = rng.uniform() * weights.iter().sum::<f64>();
        let mut next = weights.len() - 1;
        for (i, w) in weights.iter().enumerate() {
            if u < *w {
                next = i;
                break;
            }
            u -= w;
        }
        context.push(next);
        sample.push(chars[next]);
    }
    let parallel = trainer.parallel_record();
    manifest.record_parallel(&trainer);
    Ok(Outcome { final_loss, unigram, sample, losses: last, parallel, train_seconds, manifest })
}
