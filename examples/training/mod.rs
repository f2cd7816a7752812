//! What the training examples share: an MLP traced with the frontend, the training and
//! inference graphs, a progress bar, and accuracy.

#![allow(dead_code)]

pub mod char_gpt;
pub mod digits;

use indicatif::{ProgressBar, ProgressStyle};
use rustral::frontend::nn::{Conv2d, Linear, MaxPool2d, Module, cross_entropy};
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

/// Logits of a small CNN over 8x8 one-channel images given as rows of 64 pixels: two 3x3
/// convolutions (padded, ReLU), each followed by a 2x2 max pool, then a linear classifier.
/// `widths` = [first conv's channels, second's, classes].
pub fn cnn(ctx: &mut ForwardCtx, x: &Tensor, widths: &[usize]) -> Result<Tensor> {
    let batch = x.dim(0)?;
    let image = x.reshape(&[batch.clone(), Dim::fixed(1), Dim::fixed(8), Dim::fixed(8)])?;
    let h = Conv2d::new("conv1", 1, widths[0], 3).padding(1).forward(ctx, &image)?.relu()?;
    let h = MaxPool2d::new(2, 2, 0).forward(ctx, &h)?;
    let h = Conv2d::new("conv2", widths[0], widths[1], 3).padding(1).forward(ctx, &h)?.relu()?;
    let h = MaxPool2d::new(2, 2, 0).forward(ctx, &h)?;
    let flat = h.reshape(&[batch, Dim::fixed(widths[1] * 4)])?;
    Linear::new("classifier", widths[1] * 4, widths[2], true).forward(ctx, &flat)
}

/// Which network a training example trains.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Net<'a> {
    /// [`mlp`] with these sizes.
    Mlp(&'a [usize]),
    /// [`cnn`] with these widths.
    Cnn(&'a [usize]),
}

impl Net<'_> {
    fn logits(self, ctx: &mut ForwardCtx, x: &Tensor) -> Result<Tensor> {
        match self {
            Net::Mlp(sizes) => mlp(ctx, x, sizes),
            Net::Cnn(widths) => cnn(ctx, x, widths),
        }
    }

    /// Input features a row.
    fn features(self) -> usize {
        match self {
            Net::Mlp(sizes) => sizes[0],
            Net::Cnn(_) => 64,
        }
    }
}

/// The training graph (output `loss`, mean cross-entropy against `y`) and the inference graph
/// (output `logits`) of an MLP over `x: f32[batch, features]`, `y: i64[batch]`.
pub fn graphs(sizes: &[usize]) -> (Traced, Traced) {
    net_graphs(Net::Mlp(sizes))
}

/// [`graphs`] of any [`Net`].
pub fn net_graphs(net: Net) -> (Traced, Traced) {
    let input = |ctx: &mut ForwardCtx| ctx.input("x", &[Dim::sym("batch"), Dim::fixed(net.features())], DType::F32);
    let train = trace_named(TraceOptions::default(), |ctx| {
        let x = input(ctx)?;
        let y = ctx.input("y", &[Dim::sym("batch")], DType::I64)?;
        let logits = net.logits(ctx, &x)?;
        Ok(vec![("loss".into(), cross_entropy(ctx, &logits, &y)?)])
    })
    .expect("the network traces");
    let infer = trace_named(TraceOptions::default(), |ctx| {
        let x = input(ctx)?;
        Ok(vec![("logits".into(), net.logits(ctx, &x)?)])
    })
    .expect("the network traces");
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
