//! Feed-forward blocks.

use super::{Activation, Linear, Module};
use crate::{ForwardCtx, Result, Tensor};

/// `down(act(up(x)))`: BERT's intermediate/output, GPT-2's `mlp`.
#[derive(Clone, Debug)]
pub struct Mlp {
    /// Widening projection.
    pub up: Linear,
    /// Activation.
    pub act: Activation,
    /// Narrowing projection.
    pub down: Linear,
}

impl Module for Mlp {
    fn forward(&self, ctx: &mut ForwardCtx, x: &Tensor) -> Result<Tensor> {
        let h = self.act.apply(&self.up.forward(ctx, x)?)?;
        self.down.forward(ctx, &h)
    }
}

/// `down(silu(gate(x)) * up(x))`: LLaMA's MLP.
#[derive(Clone, Debug)]
pub struct SwiGlu {
    /// Gate projection.
    pub gate: Linear,
    /// Up projection.
    pub up: Linear,
    /// Down projection.
    pub down: Linear,
}

impl Module for SwiGlu {
    fn forward(&self, ctx: &mut ForwardCtx, x: &Tensor) -> Result<Tensor> {
        let gated = super::silu(&self.gate.forward(ctx, x)?)?.mul(&self.up.forward(ctx, x)?)?;
        self.down.forward(ctx, &gated)
    }
}
