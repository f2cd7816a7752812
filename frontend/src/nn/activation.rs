//! Activations as their textbook formulas.

use crate::{Result, Tensor};

/// An activation by name, as model configs give it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Activation {
    /// `max(x, 0)`.
    Relu,
    /// GELU, erf form (BERT's `gelu`).
    GeluErf,
    /// GELU, tanh form (GPT-2's `gelu_new`).
    GeluTanh,
    /// `x * sigmoid(x)`.
    Silu,
}

impl Activation {
    /// Trace the activation.
    #[track_caller]
    pub fn apply(self, x: &Tensor) -> Result<Tensor> {
        super::called_here(|| -> Result<Tensor> {
            match self {
                Activation::Relu => x.relu(),
                Activation::GeluErf => gelu(x, false),
                Activation::GeluTanh => gelu(x, true),
                Activation::Silu => silu(x),
            }
        })
    }

    /// From a Hugging Face `hidden_act` / `activation_function` string.
    pub fn from_hf(name: &str) -> Option<Activation> {
        match name {
            "relu" => Some(Activation::Relu),
            "gelu" => Some(Activation::GeluErf),
            "gelu_new" | "gelu_pytorch_tanh" => Some(Activation::GeluTanh),
            "silu" | "swish" => Some(Activation::Silu),
            _ => None,
        }
    }
}

/// GELU: `x * 0.5 * (1 + erf(x / sqrt(2)))`, or with `tanh_form`
/// `0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x^3)))`.
#[track_caller]
pub fn gelu(x: &Tensor, tanh_form: bool) -> Result<Tensor> {
    super::called_here(|| -> Result<Tensor> {
        if tanh_form {
            let inner =
                x.add(&x.pow_scalar(3.0)?.mul_scalar(0.044715)?)?.mul_scalar((2.0 / std::f64::consts::PI).sqrt())?;
            x.mul_scalar(0.5)?.mul(&inner.tanh()?.add_scalar(1.0)?)
        } else {
            x.mul_scalar(0.5)?.mul(&x.div_scalar(std::f64::consts::SQRT_2)?.erf()?.add_scalar(1.0)?)
        }
    })
}

/// SiLU: `x * sigmoid(x)`.
#[track_caller]
pub fn silu(x: &Tensor) -> Result<Tensor> {
    super::called_here(|| -> Result<Tensor> { x.mul(&x.sigmoid()?) })
}
