//! Layers, traced as primitives. Each layer holds its configuration and the name of its scope;
//! `forward` records its ops under that scope and declares its parameters there, so names
//! come out as checkpoints spell them (`encoder.layer.0.attention.self.query.weight`).

mod activation;
mod attention;
mod block;
mod conv;
mod dropout;
mod ffn;
mod linear;
mod loss;
mod norm;

pub use activation::{Activation, gelu, silu};
pub use attention::{MultiHeadAttention, QkvProjection, Rope, padding_mask};
pub use block::{BertLayer, Gpt2Block, LlamaBlock};
pub use conv::{BatchNorm2d, Conv2d, MaxPool2d, global_avg_pool, image_dims};
pub use dropout::Dropout;
pub use ffn::{Mlp, SwiGlu};
pub use linear::{Embedding, Linear, WeightLayout};
pub use loss::cross_entropy;
pub use norm::{LayerNorm, RmsNorm};

use crate::{Error, ForwardCtx, Result, Tensor};

/// A layer of one input and one output.
pub trait Module {
    /// Trace the layer on `x` under its own scope. An error names the model line that called
    /// `forward` (`#[track_caller]`), not a line inside the layer.
    #[track_caller]
    fn forward(&self, ctx: &mut ForwardCtx, x: &Tensor) -> Result<Tensor>;
}

/// `layer`'s result, an error in it located at the model line that called the layer function this is
/// called from (every layer function is `#[track_caller]`, and calls this directly).
#[track_caller]
fn called_here<T>(layer: impl FnOnce() -> Result<T>) -> Result<T> {
    let caller = std::panic::Location::caller();
    layer().map_err(|e| Error::at(caller, e))
}
