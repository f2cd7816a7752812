//! A model file with a scalar loss, for `rustral-compile --grad`: a two-layer MLP (GELU) and
//! its mean cross-entropy against integer labels.
//!
//! `rustral-compile examples/models/mlp_loss.rs --grad --check`

use rustral::frontend::nn::{Linear, Module, cross_entropy, gelu};
use rustral::prelude::*;

pub fn model(ctx: &mut ForwardCtx) -> rustral::Result<Vec<Tensor>> {
    let x = ctx.input("x", &[Dim::sym("batch"), Dim::fixed(16)], DType::F32)?;
    let labels = ctx.input("labels", &[Dim::sym("batch")], DType::I64)?;
    let h = gelu(&Linear::new("fc1", 16, 32, true).forward(ctx, &x)?, false)?;
    let logits = Linear::new("fc2", 32, 5, true).forward(ctx, &h)?;
    Ok(vec![cross_entropy(ctx, &logits, &labels)?])
}
