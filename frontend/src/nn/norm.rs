//! Normalisations over the last axis, written as model code writes them; the fusion pass
//! recognises these spellings and replaces them with the fused ops.

use super::Module;
use crate::{Dim, ForwardCtx, Init, Result, Tensor};

/// `(x - mean) / sqrt(var + eps) * weight + bias` with the biased variance.
#[derive(Clone, Debug)]
pub struct LayerNorm {
    /// Scope name (`LayerNorm`, `ln_1`).
    pub name: String,
    /// Width of the last axis.
    pub dim: usize,
    /// Added to the variance.
    pub eps: f64,
    /// Whether there are `weight` and `bias` parameters.
    pub affine: bool,
}

impl LayerNorm {
    /// An affine LayerNorm.
    pub fn new(name: &str, dim: usize, eps: f64) -> LayerNorm {
        LayerNorm { name: name.into(), dim, eps, affine: true }
    }
}

impl Module for LayerNorm {
    #[track_caller]
    fn forward(&self, ctx: &mut ForwardCtx, x: &Tensor) -> Result<Tensor> {
        super::called_here(|| -> Result<Tensor> {
            ctx.scope(&self.name, |ctx| {
                let centered = x.sub(&x.mean(&[-1], true)?)?;
                let var = centered.square()?.mean(&[-1], true)?;
                let y = centered.mul(&var.add_scalar(self.eps)?.rsqrt()?)?;
                if !self.affine {
                    return Ok(y);
                }
                let w = ctx.param("weight", &[Dim::fixed(self.dim)], Init::Ones)?;
                let b = ctx.param("bias", &[Dim::fixed(self.dim)], Init::Zeros)?;
                y.mul(&w)?.add(&b)
            })
        })
    }
}

/// `x / sqrt(mean(x^2) + eps) * weight`.
#[derive(Clone, Debug)]
pub struct RmsNorm {
    /// Scope name (`input_layernorm`, `norm`).
    pub name: String,
    /// Width of the last axis.
    pub dim: usize,
    /// Added to the mean square.
    pub eps: f64,
}

impl RmsNorm {
    /// An RMSNorm with a weight.
    pub fn new(name: &str, dim: usize, eps: f64) -> RmsNorm {
        RmsNorm { name: name.into(), dim, eps }
    }
}

impl Module for RmsNorm {
    #[track_caller]
    fn forward(&self, ctx: &mut ForwardCtx, x: &Tensor) -> Result<Tensor> {
        super::called_here(|| -> Result<Tensor> {
            ctx.scope(&self.name, |ctx| {
                let inv = x.square()?.mean(&[-1], true)?.add_scalar(self.eps)?.rsqrt()?;
                let w = ctx.param("weight", &[Dim::fixed(self.dim)], Init::Ones)?;
                x.mul(&inv)?.mul(&w)
            })
        })
    }
}
