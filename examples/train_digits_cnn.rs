//! Train a small CNN (two padded 3x3 convolutions with ReLU and 2x2 max pooling, 16 and 32
//! channels, then a linear classifier) on the UCI digits' 8x8 images (`fixtures/digits`, its
//! fixed 80/20 split; pixels scaled by 1/16) with AdamW and a warmup + cosine schedule.
//!
//! `cargo run --release --example train_digits_cnn [-- [--target cpu|wgsl] [DIGITS_DIR]]`
//! shows a progress bar, the test accuracy after each epoch, and a last line
//! `test_accuracy 0.9xx`; the run manifest goes to `target/runs/train_digits_cnn.json`.

#[path = "training/mod.rs"]
mod training;

use rustral::prelude::*;
use std::path::PathBuf;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1).peekable();
    let mut target = Target::Cpu;
    let mut dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fixtures/digits");
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--target" => {
                target = match args.next().as_deref() {
                    Some("cpu") => Target::Cpu,
                    Some("wgsl") => Target::Wgsl,
                    other => return Err(format!("--target takes cpu or wgsl, found {other:?}").into()),
                }
            }
            path => dir = PathBuf::from(path),
        }
    }
    let (acc, manifest) = training::digits::train_net(&dir, training::digits::CNN, target, 15, true)?;
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("target/runs/train_digits_cnn.json");
    manifest.write(&path)?;
    eprintln!("run manifest: {}", path.display());
    println!("test_accuracy {acc:.3}");
    Ok(())
}
