//! A small character-level GPT-2 (2 layers, width 64) trained with AdamW on a text file, on the
//! CPU target: a progress bar with the loss against the unigram baseline, then the final loss
//! and a 200-character sample; the run manifest goes to `target/runs/char_gpt.json` (under
//! `mpirun`, rank r > 0's beside it as `char_gpt.rank{r}.json`).
//!
//! `cargo run --release --example char_gpt [-- TEXT_FILE [STEPS]]` (the text defaults to
//! `examples/data/char_gpt.txt`, a frozen copy of docs/architecture.md that does not change
//! with the code, so the figure the README quotes can be reproduced; the steps to 600).

#[path = "training/mod.rs"]
mod training;

use std::path::PathBuf;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let path = args
        .next()
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("examples/data/char_gpt.txt"));
    let steps: usize = args.next().map(|s| s.parse()).transpose()?.unwrap_or(600);
    let text = std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    let out = training::char_gpt::train(&text, steps, "The ", true)?;
    let per_step = 1e3 * out.train_seconds / out.losses.len().max(1) as f64;
    println!("trained {} steps in {:.2} s ({per_step:.2} ms a step)", out.losses.len(), out.train_seconds);
    if let Some(p) = &out.parallel {
        let last = out.losses.last().copied().unwrap_or(f64::NAN);
        println!(
            "rank {} of {} ({}): last step's loss {last:.6}; all-reduce {:.2} s in the transport, {:.2} s waited for ({:.1}% of the steps)",
            p.rank,
            p.world,
            p.backend,
            p.comm_seconds,
            p.comm_wait_seconds,
            100.0 * p.comm_wait_seconds / out.train_seconds
        );
    }
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("target/runs/char_gpt.json");
    out.manifest.write(&path)?;
    eprintln!("run manifest: {}", out.manifest.path_for_rank(&path).display());
    println!("final loss {:.3} nats/char (unigram baseline {:.3})", out.final_loss, out.unigram);
    println!("sample: {}", out.sample);
    Ok(())
}
