//! The main job until `rustral-compile` lands: build the sample graphs (or read `.rir` text
//! files named on the command line), verify them, print their IR, and evaluate each on the
//! reference interpreter at two batch sizes, which shows one graph serving any binding of its
//! symbolic dims. Errors (a parse error's line:col, a verifier error's node and module path)
//! go to stderr and the exit code is 1.
//!
//! Run: `cargo run --release --example quickstart [-- FILE.rir ...]`

use rustral::ir::{self, Graph, samples};
use rustral::prelude::*;
use std::collections::HashMap;

/// Deterministic pseudo-random values in [-1, 1) (xorshift), so runs are reproducible.
fn values(seed: u64, n: usize) -> Vec<f64> {
    rustral::runtime::seeded_values(seed, n)
}

/// Random feeds for every input and param, with symbols bound from `sizes`.
fn feeds(g: &Graph, sizes: &HashMap<&str, usize>) -> HashMap<String, HostTensor> {
    let mut out = HashMap::new();
    for (i, (name, id)) in g.inputs().into_iter().chain(g.params()).enumerate() {
        let ty = &g.node(id).expect("source node exists").ty;
        let shape = ty.shape.resolve(|s| sizes.get(s).copied().unwrap_or(4));
        let n = shape.iter().product();
        // Masks are all-visible; integer inputs (token ids) index from 0.
        let data = match (name.as_str(), ty.dtype.is_float()) {
            ("mask", _) | (_, false) => vec![0.0; n],
            _ => values(i as u64 + 1, n),
        };
        out.insert(name, HostTensor::new(ty.dtype, &shape, data).expect("sizes match"));
    }
    out
}

fn main() {
    if let Err(e) = run() {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}

fn load(path: &str) -> Result<Graph, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{path}: {e}"))?;
    ir::parse_verified(&text).map_err(|e| format!("{path}: {e}"))
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    let files: Vec<String> = std::env::args().skip(1).collect();
    let graphs = if files.is_empty() {
        vec![samples::mlp()?, samples::layer_norm_primitives()?, samples::attention_block()?]
    } else {
        files.iter().map(|f| load(f)).collect::<Result<Vec<_>, _>>()?
    };
    for g in &graphs {
        ir::verify(g)?;
        println!("{}", ir::print(g));
        for batch in [1, 3] {
            let sizes = HashMap::from([("batch", batch), ("seq", 5)]);
            for (name, t) in evaluate(g, &feeds(g, &sizes))? {
                let v = t.to_vec();
                let mean = v.iter().sum::<f64>() / v.len() as f64;
                let first: Vec<String> = v.iter().take(4).map(|x| format!("{x:.5}")).collect();
                println!(
                    "  batch={batch}: {name} {}{:?} mean {mean:.5} first [{}]",
                    t.dtype,
                    t.shape(),
                    first.join(", ")
                );
            }
        }
        println!();
    }
    Ok(())
}
