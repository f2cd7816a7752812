//! Greedy generation with the library API: load a Hugging Face checkpoint, compile the
//! prefill and decode programs once, stream ids as they are chosen.
//!
//! Run: `cargo run --release --example generate` (the wider GPT-2 fixture), or
//! `cargo run --release --example generate -- gpt2|llama CONFIG WEIGHTS [IDS...]`.

use rustral::generate::{CausalLm, GenerationConfig, Generator, GeneratorOptions, load_weights};
use std::path::PathBuf;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let fixture = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fixtures/generate/gpt2-wide");
    let (kind, config, weights) = match args.as_slice() {
        [kind, config, weights, ..] => (kind.clone(), PathBuf::from(config), PathBuf::from(weights)),
        _ => ("gpt2".to_string(), fixture.join("config.json"), fixture.join("model.safetensors")),
    };
    let prompt: Vec<i64> = args.iter().skip(3).map(|a| a.parse()).collect::<Result<_, _>>()?;
    let prompt = if prompt.is_empty() { vec![45, 39, 24, 68, 63] } else { prompt };
    let lm = CausalLm::from_config(&kind, &config)?;
    let params = load_weights(&lm, &weights)?;
    let generator = Generator::new(lm, &params, &GeneratorOptions::default())?;
    let config = GenerationConfig { max_new_tokens: 20, ..GenerationConfig::default() };
    print!("prompt {prompt:?} ->");
    let out = generator.generate(&prompt, &config, &mut |id| {
        print!(" {id}");
        true
    })?;
    println!();
    println!(
        "{} programs compiled; prefill {:.2} ms, decode {:.1} tokens/s",
        generator.compilations(),
        out.prefill.as_secs_f64() * 1e3,
        out.decode_tokens_per_s()
    );
    Ok(())
}
