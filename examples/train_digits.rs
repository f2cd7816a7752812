//! Train a 64-128-10 MLP (tanh) on the UCI digits (`fixtures/digits`, its fixed 80/20
//! split; pixels scaled by 1/16) with AdamW and a warmup + cosine schedule, on the CPU target.
//!
//! `cargo run --release --example train_digits [-- DIGITS_DIR]` shows a
//! progress bar, the test accuracy after each epoch, and a last line `test_accuracy 0.9xx`; the
//! run manifest (schemas/run-manifest.schema.json) goes to `target/runs/train_digits.json`.

#[path = "training/mod.rs"]
mod training;

use std::path::PathBuf;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = std::env::args()
        .nth(1)
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fixtures/digits"));
    let (acc, manifest) = training::digits::train(&dir, 30, true)?;
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/runs/train_digits.json");
    manifest.write(&path)?;
    eprintln!("run manifest: {}", path.display());
    println!("test_accuracy {acc:.3}");
    Ok(())
}
