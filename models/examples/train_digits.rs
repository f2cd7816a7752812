//! Train a 64-128-10 MLP (tanh) on the UCI digits (`../shared/fixtures/digits`, its fixed 80/20
//! split; pixels scaled by 1/16) with AdamW and a warmup + cosine schedule, on the CPU target.
//!
//! `cargo run --release -p rustral-models --example train_digits [-- DIGITS_DIR]` shows a
//! progress bar, the test accuracy after each epoch, and a last line `test_accuracy 0.9xx`.

#[path = "training/mod.rs"]
mod training;

use std::path::PathBuf;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = std::env::args()
        .nth(1)
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/fixtures/digits"));
    let acc = training::digits::train(&dir, 30, true)?;
    println!("test_accuracy {acc:.3}");
    Ok(())
}
