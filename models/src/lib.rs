//! Models written with Rustral's frontend, each configurable from its Hugging Face
//! `config.json` and loadable from its checkpoint under the checkpoint's own parameter names.

#![deny(missing_docs)]

mod bert;
mod config;
pub mod gguf;
mod gpt2;
mod llama;
mod minilm;
mod mlp;
mod resnet;
mod vit;

pub use bert::{BERT_UNUSED_WEIGHTS, Bert, BertConfig};
pub use config::ConfigError;
pub use gpt2::{Gpt2, Gpt2Config};
pub use llama::{Llama, LlamaConfig};
pub use minilm::{Batch, MiniLmError, find_minilm_dir, tokenize};
pub use mlp::{MlpConfig, MlpModel};
pub use resnet::{RESNET_UNUSED_WEIGHTS, ResNet, ResNetConfig, image_size};
pub use vit::{Vit, VitConfig};

use rustral_frontend::{DType, ForwardCtx, Result, Tensor};

/// With a KV cache, only the last position's hidden state goes on to the output head (`[batch,
/// 1, d]`): generation samples from it alone, and the head's matmul is the largest of a step.
/// Without one, `h` itself.
pub(crate) fn last_position(ctx: &mut ForwardCtx, h: &Tensor) -> Result<Tensor> {
    if ctx.kv_capacity().is_none() {
        return Ok(h.clone());
    }
    let last = ctx.iota(&[h.dim(1)?], 0, DType::I64)?.max(&[0], true)?;
    h.gather(&last, 1)
}
