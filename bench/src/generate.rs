//! The generation benchmark: prefill and decode of a GPT-2-small-sized and a LLaMA-sized
//! (SmolLM2-135M's shape) causal LM through `rustral::generate::Generator`, one manifest per
//! phase, model and target. The checkpoints are seeded random weights written once as Hugging
//! Face folders (`config.json` + `model.safetensors`), so that `bench/python/generate_bench.py`
//! times Hugging Face's `generate` on the very same weights.

use crate::manifest::{self, Build, Machine, Manifest, Pipeline, ProgramInfo, WorkloadInfo};
use crate::stats::summarize;
use crate::workloads::Kind;
use rustral::generate::{CausalLm, GenerationConfig, Generator, GeneratorOptions, load_weights};
use rustral::models::{Gpt2Config, LlamaConfig};
use rustral::{CompileOptions, Target};
use rustral_frontend::ParamStore;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

/// One model of the benchmark.
pub struct LmWorkload {
    /// Manifests are named `{name}_prefill` and `{name}_decode`.
    pub name: &'static str,
    /// What it is.
    pub description: &'static str,
    /// The model.
    pub model: CausalLm,
    /// Its Hugging Face `config.json`.
    pub hf_config: serde_json::Value,
}

/// The benchmark's models.
pub fn lm_workloads() -> Vec<LmWorkload> {
    let gpt2 = Gpt2Config::small(12);
    let gpt2_hf = serde_json::json!({
        "model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "vocab_size": gpt2.vocab_size,
        "n_positions": gpt2.n_positions, "n_embd": gpt2.n_embd, "n_layer": gpt2.n_layer, "n_head": gpt2.n_head,
        "n_inner": null, "activation_function": "gelu_new", "layer_norm_epsilon": gpt2.layer_norm_epsilon,
        "resid_pdrop": 0.0, "embd_pdrop": 0.0, "attn_pdrop": 0.0, "tie_word_embeddings": true,
    });
    let llama_hf = serde_json::json!({
        "model_type": "llama", "architectures": ["LlamaForCausalLM"], "vocab_size": 49152, "hidden_size": 576,
        "intermediate_size": 1536, "num_hidden_layers": 30, "num_attention_heads": 9, "num_key_value_heads": 3,
        "head_dim": 64, "rms_norm_eps": 1e-5, "rope_theta": 100000.0, "max_position_embeddings": 2048,
        "tie_word_embeddings": true, "hidden_act": "silu", "attention_bias": false, "mlp_bias": false,
    });
    let llama: LlamaConfig = serde_json::from_value(llama_hf.clone()).expect("the config reads");
    vec![
        LmWorkload {
            name: "gpt2_small",
            description: "GPT-2 small (12 layers, width 768, vocab 50257)",
            model: CausalLm::Gpt2(gpt2),
            hf_config: gpt2_hf,
        },
        LmWorkload {
            name: "llama_135m",
            description: "LLaMA of SmolLM2-135M's shape (30 layers, width 576, 9 heads / 3 KV heads, vocab 49152)",
            model: CausalLm::Llama(llama),
            hf_config: llama_hf,
        },
    ]
}

/// The workload's checkpoint folder under `dir`, written (seeded weights) when missing.
pub fn checkpoint(w: &LmWorkload, dir: &Path) -> Result<PathBuf, String> {
    let folder = dir.join(w.name);
    let weights = folder.join("model.safetensors");
    if !weights.exists() {
        std::fs::create_dir_all(&folder).map_err(|e| format!("{}: {e}", folder.display()))?;
        let specs = w.model.params().map_err(|e| e.to_string())?;
        ParamStore::init(&specs, 0).save_safetensors(&weights).map_err(|e| e.to_string())?;
        let config = serde_json::to_string_pretty(&w.hf_config).map_err(|e| e.to_string())?;
        std::fs::write(folder.join("config.json"), config).map_err(|e| e.to_string())?;
    }
    Ok(folder)
}

/// What one measurement runs.
pub struct Settings {
    /// Prompt tokens.
    pub prompt: usize,
    /// New tokens per generation.
    pub new_tokens: usize,
    /// Generations timed (after one warm-up).
    pub repeats: usize,
    /// Threads of the CPU targets.
    pub threads: usize,
}

/// Prefill and decode manifests of `w` on `target` (`cpu`, `candle-cpu` or `wgsl`).
pub fn measure(w: &LmWorkload, folder: &Path, target: &str, s: &Settings) -> Result<[Manifest; 2], String> {
    let t = parse_target(target)?;
    let params = load_weights(&w.model, &folder.join("model.safetensors")).map_err(|e| e.to_string())?;
    let vocab = w.model.vocab() as i64;
    let prompt: Vec<i64> = (0..s.prompt as i64).map(|i| (i * 7919) % vocab).collect();
    let generator = build(&w.model, &params, BTreeMap::new(), t, s)?;
    time_phases(&generator, &prompt, w.name, target, s, "")
}

/// The generator of `model` for `s`, its cache the size of one run.
fn build(
    model: &CausalLm,
    params: &ParamStore,
    quantized: BTreeMap<String, rustral::frontend::QuantFormat>,
    target: Target,
    s: &Settings,
) -> Result<Generator, String> {
    let capacity = (s.prompt + s.new_tokens).next_power_of_two().min(model.positions());
    let compile = CompileOptions { threads: s.threads, ..CompileOptions::default() };
    let options =
        GeneratorOptions { target, compile, capacity: Some(capacity), quantized, ..GeneratorOptions::default() };
    Generator::new(model.clone(), params, &options).map_err(|e| e.to_string())
}

/// The name of the GGUF row's manifests (`{GGUF_ROW}_prefill`, `_decode`).
pub const GGUF_ROW: &str = "smollm2_q4_1";

/// Prefill and decode manifests of a GGUF chat model (SmolLM2-135M-Instruct Q4_1) on `target`,
/// weights kept quantized, on the prompt `bench/node/llama_bench.mjs` gives llama.cpp: id
/// `100 + i * 7919 mod (vocab - 100)`. The decode manifest's description records the bytes
/// of weights a token reads and the memory bandwidth measured now, on as many threads.
pub fn measure_gguf(path: &Path, target: &str, s: &Settings) -> Result<[Manifest; 2], String> {
    let t = parse_target(target)?;
    let m = rustral::generate::load_gguf(path, false).map_err(|e| e.to_string())?;
    let vocab = m.model.vocab() as i64;
    let prompt: Vec<i64> = (0..s.prompt as i64).map(|i| 100 + (i * 7919) % (vocab - 100)).collect();
    let generator = build(&m.model, &m.params, m.quantized.clone(), t, s)?;
    let gbps = bandwidth_gbps(s.threads);
    let note = format!(
        "; reads {:.1} MB of weights a token; memory bandwidth {gbps:.2} GB/s now",
        m.weight_bytes as f64 / 1e6
    );
    time_phases(&generator, &prompt, GGUF_ROW, target, s, &note)
}

/// Read bandwidth of this machine now: the best of five sums over a 512 MiB buffer, split
/// over `threads` (what a memory-bound decode step can hope for).
pub fn bandwidth_gbps(threads: usize) -> f64 {
    use rayon::prelude::*;
    let words = vec![1u64; 64 << 20];
    let pool = rayon::ThreadPoolBuilder::new().num_threads(threads.max(1)).build();
    let Ok(pool) = pool else { return 0.0 };
    let mut best = f64::INFINITY;
    for _ in 0..5 {
        let t = std::time::Instant::now();
        let sum: u64 =
            pool.install(|| words.par_chunks(1 << 16).map(|c| c.iter().fold(0u64, |a, &b| a.wrapping_add(b))).sum());
        std::hint::black_box(sum);
        best = best.min(t.elapsed().as_secs_f64());
    }
    (words.len() * 8) as f64 / best / 1e9
}

fn parse_target(target: &str) -> Result<Target, String> {
    match target {
        "cpu" => Ok(Target::Cpu),
        "candle-cpu" => Ok(Target::Candle(rustral::runtime::candle::Device::Cpu)),
        "wgsl" => Ok(Target::Wgsl),
        other => Err(format!("unknown target {other:?} (known: cpu, candle-cpu, wgsl)")),
    }
}

/// Time `s.repeats` generations (after a warm-up) into a prefill and a decode manifest.
fn time_phases(
    generator: &Generator,
    prompt: &[i64],
    name: &str,
    target: &str,
    s: &Settings,
    note: &str,
) -> Result<[Manifest; 2], String> {
    let config = GenerationConfig { max_new_tokens: s.new_tokens, ..GenerationConfig::default() };
    let mut prefill = vec![];
    let mut decode = vec![];
    for run in 0..=s.repeats {
        let g = generator.generate(prompt, &config, &mut |_| true).map_err(|e| e.to_string())?;
        if run > 0 {
            prefill.push(g.prefill.as_secs_f64() * 1e3);
            decode.extend(g.decode_steps.iter().map(|d| d.as_secs_f64() * 1e3));
        }
    }
    let manifest = |phase: &str, what: String, timings: Vec<f64>| Manifest {
        schema_version: manifest::SCHEMA_VERSION,
        unix_time: SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs()),
        workload: WorkloadInfo { name: format!("{name}_{phase}"), kind: Kind::Model, description: what },
        target: target.into(),
        threads: s.threads,
        pipeline: Pipeline { label: "O2".into(), level: "O2".into(), disabled: vec![], passes: vec![] },
        stats: summarize(&timings),
        timings_ms: timings,
        program: ProgramInfo {
            kernels: 0,
            dispatches: 0,
            planned_peak_bytes: 0,
            unplanned_bytes: 0,
            kernel_ops: BTreeMap::new(),
        },
        kernel_ms_by_op: BTreeMap::new(),
        machine: Machine::this(),
        build: Build::this(Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))),
    };
    Ok([
        manifest("prefill", format!("{name}: prefill of a {}-token prompt (ms)", s.prompt), prefill),
        manifest(
            "decode",
            format!(
                "{name}: one decode step after a {}-token prompt, {} tokens (ms per token){note}",
                s.prompt, s.new_tokens
            ),
            decode,
        ),
    ])
}
