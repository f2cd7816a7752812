//! What the training examples share: an MLP traced with the frontend, the training and
//! inference graphs, a progress bar, and accuracy.

#![allow(dead_code)]

pub mod char_gpt;
pub mod digits;

use indicatif::{ProgressBar, ProgressStyle};
use rustral::frontend::nn::{Linear, Module, cross_entropy};
use rustral::frontend::{ForwardCtx, Result, Tensor, TraceOptions, Traced, trace_named};
use rustral::prelude::*;

/// Logits of an MLP with tanh between the layers: `sizes` = [inputs, hidden..., classes].
pub fn mlp(ctx: &mut ForwardCtx, x: &Tensor, sizes: &[usize]) -> Result<Tensor> {
    let mut h = x.clone();
    for (i, w) in sizes.windows(2).enumerate() {
        h = Linear::new(&format!("layers.{i}"), w[0], w[1], true).forward(ctx, &h)?;
        if i + 2 < sizes.len() {
            h = h.tanh()?;
        }
    }
    Ok(h)
}

/// The training graph (output `loss`, mean cross-entropy against `y`) and the inference graph
/// (output `logits`) of an MLP over `x: f32[batch, features]`, `y: i64[batch]`.
pub fn graphs(sizes: &[usize]) -> (Traced, Traced) {
    let input = |ctx: &mut ForwardCtx| ctx.input("x", &[Dim::sym("batch"), Dim::fixed(sizes[0])], DType::F32);
    let train = trace_named(TraceOptions::default(), |ctx| {
        let x = input(ctx)?;
        let y = ctx.input("y", &[Dim::sym("batch")], DType::I64)?;
        let logits = mlp(ctx, &x, sizes)?;
        Ok(vec![("loss".into(), cross_entropy(ctx, &logits, &y)?)])
    })
    .expect("the MLP traces");
    let infer = trace_named(TraceOptions::default(), |ctx| {
        let x = input(ctx)?;
        Ok(vec![("logits".into(), mlp(ctx, &x, sizes)?)])
    })
    .expect("the MLP traces");
    (train, infer)
}

/// A progress bar over `steps` that shows the latest loss.
pub fn progress(steps: u64) -> ProgressBar {
    let bar = ProgressBar::new(steps);
    bar.set_style(
        ProgressStyle::with_template("{bar:40} {pos}/{len} steps, loss {msg} ({elapsed})").expect("a valid template"),
    );
    bar
}

/// The fraction of rows whose largest logit is at their label.
pub fn accuracy(logits: &HostTensor, labels: &[usize]) -> f64 {
    let classes = logits.shape()[1];
    let v = logits.to_vec();
    let hits = labels
        .iter()
        .enumerate()
        .filter(|&(r, &label)| {
            let row = &v[r * classes..(r + 1) * classes];
            let best = (0..classes).max_by(|&a, &b| row[a].total_cmp(&row[b])).expect("classes");
            best == label
        })
        .count();
    hits as f64 / labels.len() as f64
}
