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
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("target/runs/train_digits.json");
    manifest.write(&path)?;
    eprintln!("run manifest: {}", manifest.path_for_rank(&path).display());
    let last = manifest.steps.last().map_or(f64::NAN, |s| s.loss);
    let wall = manifest.wall_seconds;
    println!(
        "trained {} steps in {wall:.2} s ({:.2} ms a step)",
        manifest.steps.len(),
        1e3 * wall / manifest.steps.len().max(1) as f64
    );
    if let Some(p) = &manifest.parallel {
        println!(
            "rank {} of {} ({}): final_loss {last:.6}; all-reduce {:.2} s in the transport, {:.2} s waited for ({:.1}% of the run)",
            p.rank,
            p.world,
            p.backend,
            p.comm_seconds,
            p.comm_wait_seconds,
            100.0 * p.comm_wait_seconds / wall.max(1e-9)
        );
    }
    println!("test_accuracy {acc:.3}");
    Ok(())
}
