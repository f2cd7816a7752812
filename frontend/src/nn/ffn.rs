//! Feed-forward blocks.

use super::{Activation, Linear, Module};
use crate::{ForwardCtx, Result, Tensor};

/// `down(act(up(x)))`: BERT's intermediate/output, GPT-2's `mlp`. The activation is
/// recorded under the up projection's scope.
#[derive(Clone, Debug)]
pub struct Mlp {
    /// Scope name (`mlp`; empty for BERT, whose projections sit in different modules).
    pub name: String,
    /// Widening projection.
    pub up: Linear,
    /// Activation.
    pub act: Activation,
    /// Narrowing projection.
    pub down: Linear,
}

impl Module for Mlp {
    #[track_caller]
    fn forward(&self, ctx: &mut ForwardCtx, x: &Tensor) -> Result<Tensor> {
        super::called_here(|| -> Result<Tensor> {
            ctx.scope(&self.name, |ctx| {
                let up = self.up.forward(ctx, x)?;
                let h = ctx.scope(&self.up.name, |_| self.act.apply(&up))?;
                self.down.forward(ctx, &h)
            })
        })
    }
}

/// `down(silu(gate(x)) * up(x))`: LLaMA's MLP.
#[derive(Clone, Debug)]
pub struct SwiGlu {
    /// Scope name (`mlp`).
    pub name: String,
    /// Gate projection.
    pub gate: Linear,
    /// Up projection.
    pub up: Linear,
    /// Down projection.
    pub down: Linear,
}

impl Module for SwiGlu {
    #[track_caller]
    fn forward(&self, ctx: &mut ForwardCtx, x: &Tensor) -> Result<Tensor> {
        super::called_here(|| -> Result<Tensor> {
            ctx.scope(&self.name, |ctx| {
                let gated = super::silu(&self.gate.forward(ctx, x)?)?.mul(&self.up.forward(ctx, x)?)?;
                self.down.forward(ctx, &gated)
            })
        })
    }
}
