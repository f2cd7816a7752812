//! A multilayer perceptron: `Linear -> act -> ... -> Linear`.

use rustral_frontend::nn::{Activation, Linear, Module};
use rustral_frontend::{DType, Dim, ForwardCtx, Result, Tensor};

/// Layer widths and activation.
#[derive(Clone, Debug)]
pub struct MlpConfig {
    /// Widths from input to output (at least two).
    pub widths: Vec<usize>,
    /// Activation between layers.
    pub act: Activation,
}

impl Default for MlpConfig {
    fn default() -> MlpConfig {
        MlpConfig { widths: vec![8, 16, 4], act: Activation::Relu }
    }
}

/// The model.
#[derive(Clone, Debug)]
pub struct MlpModel {
    /// Its config.
    pub config: MlpConfig,
}

impl MlpModel {
    /// Declare the input `x: f32[batch, widths[0]]` and trace the model on it.
    pub fn trace(&self, ctx: &mut ForwardCtx) -> Result<Tensor> {
        let x = ctx.input("x", &[Dim::sym("batch"), Dim::fixed(self.config.widths[0])], DType::F32)?;
        self.forward(ctx, &x)
    }

    /// Trace the layers on `x`; layers are named `layers.{i}`.
    pub fn forward(&self, ctx: &mut ForwardCtx, x: &Tensor) -> Result<Tensor> {
        let w = &self.config.widths;
        let mut h = x.clone();
        for i in 0..w.len().saturating_sub(1) {
            h = Linear::new(&format!("layers.{i}"), w[i], w[i + 1], true).forward(ctx, &h)?;
            if i + 2 < w.len() {
                h = ctx.scope(&format!("layers.{i}"), |_| self.config.act.apply(&h))?;
            }
        }
        Ok(h)
    }
}
