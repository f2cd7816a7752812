//! `rustral-generate`: text from a causal LM (GPT-2 or LLaMA) compiled by Rustral. The model is
//! traced once with a KV cache into a prefill and a decode program, each compiled once, and
//! run on the chosen target; tokens stream to stdout as they are chosen.

use clap::{Parser, ValueEnum};
use rustral::generate::sampling::SamplingConfig;
use rustral::generate::text::{Message, StreamDecoder, TextTokenizer};
use rustral::generate::{CausalLm, GenerationConfig, Generator, GeneratorOptions, StopReason, load_gguf, load_weights};
use rustral::passes::OptLevel;
use rustral::{CompileOptions, Target};
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

const EXAMPLES: &str = "Examples:
  rustral-generate --weights SmolLM2-135M-Instruct.Q4_1.gguf --chat --prompt 'What is the capital of France?'
  rustral-generate --model llama --config config.json --weights model.safetensors \\
      --tokenizer tokenizer.json --chat --prompt 'What is the capital of France?'
  rustral-generate --model gpt2 --config config.json --weights model.safetensors \\
      --prompt-ids ids.npy --max-new-tokens 20 --json

Exit status: 0 success, 1 a user error (a missing file, a bad option, a prompt too long),
2 an internal error.";

#[derive(Parser, Debug)]
#[command(name = "rustral-generate", version, about = "Generate text with a causal LM compiled by Rustral.", after_help = EXAMPLES)]
struct Args {
    /// The architecture (not needed with a .gguf file, which says).
    #[arg(long, value_enum)]
    model: Option<Kind>,
    /// The Hugging Face config.json (not needed with a .gguf file).
    #[arg(long)]
    config: Option<PathBuf>,
    /// The checkpoint: model.safetensors under Hugging Face's parameter names, or a GGUF file
    /// (config, tokenizer and chat template inside; quantized weights stay quantized).
    #[arg(long)]
    weights: PathBuf,
    /// tokenizer.json (with tokenizer_config.json beside it for --chat); a GGUF file has its own.
    #[arg(long)]
    tokenizer: Option<PathBuf>,
    /// Dequantize a GGUF file's block-quantized weights to f32 at load (as Hugging Face
    /// transformers does): 4 to 8 times the memory, f32 arithmetic throughout.
    #[arg(long)]
    dequantize: bool,
    /// The prompt as text (needs --tokenizer).
    #[arg(long, conflicts_with = "prompt_ids", required_unless_present = "prompt_ids")]
    prompt: Option<String>,
    /// The prompt as token ids: a .npy file of integers (any shape, read in order).
    #[arg(long)]
    prompt_ids: Option<PathBuf>,
    /// Render the prompt as a user message with the tokenizer's chat template.
    #[arg(long, requires = "prompt")]
    chat: bool,
    /// A system message before the prompt (with --chat).
    #[arg(long, requires = "chat")]
    system: Option<String>,
    /// Stop after this many new tokens.
    #[arg(long, default_value_t = 64)]
    max_new_tokens: usize,
    /// 0 decodes greedily; otherwise sample at this temperature.
    #[arg(long, default_value_t = 0.0)]
    temperature: f64,
    /// Sample from the K most likely tokens (0: all).
    #[arg(long, default_value_t = 0)]
    top_k: usize,
    /// Sample from the most likely tokens holding probability P.
    #[arg(long, default_value_t = 1.0)]
    top_p: f64,
    /// Penalise tokens already in the sequence (1: off).
    #[arg(long, default_value_t = 1.0)]
    repeat_penalty: f64,
    /// Seed of the sampling stream (ChaCha).
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Stop when the text contains this string (repeatable).
    #[arg(long)]
    stop: Vec<String>,
    /// An end-of-sequence id (repeatable; default: the tokenizer's EOS token).
    #[arg(long)]
    eos_id: Vec<i64>,
    /// Where the programs run.
    #[arg(long, value_enum, default_value_t = TargetName::Cpu)]
    target: TargetName,
    /// Threads for the CPU targets (default: all cores).
    #[arg(long)]
    threads: Option<usize>,
    /// Optimisation level: -O0 (op by op) or -O2 (fusion, the default).
    #[arg(short = 'O', value_name = "LEVEL", default_value = "2", value_parser = ["0", "1", "2"])]
    opt: String,
    /// KV cache positions (default: the model's).
    #[arg(long)]
    capacity: Option<usize>,
    /// Rerun the whole sequence every step instead of using the KV cache (a baseline).
    #[arg(long)]
    no_cache: bool,
    /// Print one JSON object instead of streaming text.
    #[arg(long)]
    json: bool,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum Kind {
    Gpt2,
    Llama,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum TargetName {
    Cpu,
    CandleCpu,
    Wgsl,
}

fn main() -> ExitCode {
    std::panic::set_hook(Box::new(|info| {
        eprintln!("internal error (a bug in rustral-generate; please report it): {info}");
    }));
    let args = Args::parse();
    match std::panic::catch_unwind(|| run(&args)) {
        Ok(Ok(())) => ExitCode::SUCCESS,
        Ok(Err(message)) => {
            eprintln!("error: {message}");
            ExitCode::from(1)
        }
        Err(_) => ExitCode::from(2),
    }
}

fn target(t: TargetName) -> Result<Target, String> {
    match t {
        TargetName::Cpu => Ok(Target::Cpu),
        #[cfg(feature = "candle")]
        TargetName::CandleCpu => Ok(Target::Candle(rustral::runtime::candle::Device::Cpu)),
        #[cfg(feature = "wgsl")]
        TargetName::Wgsl => Ok(Target::Wgsl),
        #[allow(unreachable_patterns)]
        other => Err(format!("target {other:?} is not built in: reinstall with its cargo feature")),
    }
}

fn run(args: &Args) -> Result<(), String> {
    let s = |e: rustral::Error| e.to_string();
    if !args.weights.exists() {
        return Err(format!("--weights {}: no such file", args.weights.display()));
    }
    let started = std::time::Instant::now();
    let gguf = args.weights.extension().is_some_and(|e| e.eq_ignore_ascii_case("gguf"));
    let (model, params, quantized, file_tokenizer) = if gguf {
        let m = load_gguf(&args.weights, args.dequantize).map_err(s)?;
        (m.model, m.params, m.quantized, Some(m.tokenizer))
    } else {
        let (Some(kind), Some(config)) = (args.model, &args.config) else {
            return Err("a safetensors checkpoint needs --model and --config (a .gguf file needs neither)".into());
        };
        if !config.exists() {
            return Err(format!("--config {}: no such file", config.display()));
        }
        let kind = match kind {
            Kind::Gpt2 => "gpt2",
            Kind::Llama => "llama",
        };
        let model = CausalLm::from_config(kind, config).map_err(s)?;
        let params = load_weights(&model, &args.weights).map_err(s)?;
        (model, params, Default::default(), None)
    };
    let kind = match &model {
        CausalLm::Gpt2(_) => "gpt2",
        CausalLm::Llama(_) => "llama",
    };
    let tokenizer = match &args.tokenizer {
        Some(path) if !path.exists() => return Err(format!("--tokenizer {}: no such file", path.display())),
        Some(path) => Some(TextTokenizer::from_file(path).map_err(s)?),
        None => file_tokenizer,
    };
    let prompt_ids = match (&args.prompt, &args.prompt_ids, &tokenizer) {
        (Some(_), _, None) => return Err("a text --prompt needs --tokenizer (or give --prompt-ids)".into()),
        (Some(text), _, Some(tok)) => {
            let text = if args.chat {
                let mut messages = vec![];
                if let Some(system) = &args.system {
                    messages.push(Message { role: "system".into(), content: system.clone() });
                }
                messages.push(Message { role: "user".into(), content: text.clone() });
                tok.render_chat(&messages).map_err(s)?
            } else {
                text.clone()
            };
            tok.encode(&text).map_err(s)?
        }
        (None, Some(path), _) => read_ids(path)?,
        (None, None, _) => return Err("give --prompt or --prompt-ids".into()),
    };
    let level = match args.opt.as_str() {
        "0" => OptLevel::O0,
        "1" => OptLevel::O1,
        _ => OptLevel::O2,
    };
    let mut compile = CompileOptions { level, ..CompileOptions::default() };
    if let Some(t) = args.threads {
        compile.threads = t;
    }
    // The cache holds what this run needs (the prompt and the new tokens), not every position
    // of the model: SmolLM2's 8192 would be 377 MB of caches.
    let needed = (prompt_ids.len() + args.max_new_tokens).min(model.positions());
    let capacity = Some(args.capacity.unwrap_or(needed));
    let options =
        GeneratorOptions { target: target(args.target)?, compile, capacity, cached: !args.no_cache, quantized };
    let generator = Generator::new(model, &params, &options).map_err(s)?;
    let compile_time = started.elapsed();
    let mut eos = args.eos_id.clone();
    if eos.is_empty()
        && let Some(id) = tokenizer.as_ref().and_then(TextTokenizer::eos_id)
    {
        eos.push(id);
    }
    let config = GenerationConfig {
        max_new_tokens: args.max_new_tokens,
        sampling: SamplingConfig {
            temperature: args.temperature,
            top_k: args.top_k,
            top_p: args.top_p,
            repetition_penalty: args.repeat_penalty,
            seed: args.seed,
        },
        eos_ids: eos,
    };
    let mut decoder = tokenizer.as_ref().map(StreamDecoder::new);
    let mut text = String::new();
    let mut failure = None;
    let stdout = std::io::stdout();
    let generation = generator
        .generate(&prompt_ids, &config, &mut |id| {
            let Some(d) = decoder.as_mut() else {
                if !args.json {
                    print!("{id} ");
                    let _ = stdout.lock().flush();
                }
                return true;
            };
            match d.push(id) {
                Ok(new) => {
                    text.push_str(&new);
                    if !args.json {
                        print!("{new}");
                        let _ = stdout.lock().flush();
                    }
                    !args.stop.iter().any(|stop| text.contains(stop.as_str()))
                }
                Err(e) => {
                    failure = Some(e.to_string());
                    false
                }
            }
        })
        .map_err(s)?;
    if let Some(f) = failure {
        return Err(f);
    }
    let text = match &decoder {
        Some(d) => Some(d.text().map_err(s)?),
        None => None,
    };
    let ttft_ms = generation.prefill.as_secs_f64() * 1e3;
    if args.json {
        let report = serde_json::json!({
            "prompt_ids": generation.prompt_ids,
            "ids": generation.ids,
            "text": text,
            "stop": generation.stop,
            "prefill_ms": ttft_ms,
            "prefill_tokens_per_s": generation.prefill_tokens_per_s(),
            "decode_tokens_per_s": generation.decode_tokens_per_s(),
            "decode_ms": generation.decode_steps.iter().map(|d| d.as_secs_f64() * 1e3).collect::<Vec<_>>(),
            "compile_ms": compile_time.as_secs_f64() * 1e3,
            "compilations": generator.compilations(),
            "target": args.target.to_possible_value().map(|v| v.get_name().to_string()),
            "settings": {
                "model": kind,
                "cached": !args.no_cache,
                "capacity": generator.capacity(),
                "max_new_tokens": args.max_new_tokens,
                "temperature": args.temperature,
                "top_k": args.top_k,
                "top_p": args.top_p,
                "repeat_penalty": args.repeat_penalty,
                "seed": args.seed,
                "stop": args.stop,
                "eos_ids": config.eos_ids,
                "threads": options.compile.threads,
                "opt": format!("O{}", args.opt),
            },
        });
        println!("{report}");
    } else {
        let stop = match generation.stop {
            StopReason::Length => "max-new-tokens",
            StopReason::Eos => "eos",
            StopReason::Callback => "stop string",
            StopReason::ContextFull => "context full",
        };
        println!();
        let _ = std::io::stdout().flush();
        eprintln!(
            "[{} prompt tokens, {} generated ({stop}) | prefill {:.1} tok/s | decode {:.1} tok/s | first token {:.1} ms]",
            generation.prompt_ids.len(),
            generation.ids.len(),
            generation.prefill_tokens_per_s(),
            generation.decode_tokens_per_s(),
            ttft_ms,
        );
    }
    Ok(())
}

/// Token ids from a .npy file of integers.
fn read_ids(path: &std::path::Path) -> Result<Vec<i64>, String> {
    use ndarray_npy::ReadNpyExt;
    let open = || std::fs::File::open(path).map_err(|e| format!("--prompt-ids {}: {e}", path.display()));
    if let Ok(a) = ndarray::ArrayD::<i64>::read_npy(open()?) {
        return Ok(a.iter().copied().collect());
    }
    match ndarray::ArrayD::<i32>::read_npy(open()?) {
        Ok(a) => Ok(a.iter().map(|&v| i64::from(v)).collect()),
        Err(e) => Err(format!("--prompt-ids {}: not a .npy of integers: {e}", path.display())),
    }
}
