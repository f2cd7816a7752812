//! Models written with Rustral's frontend, each configurable from its Hugging Face
//! `config.json` and loadable from its checkpoint under the checkpoint's own parameter names.

#![deny(missing_docs)]

mod bert;
mod config;
mod gpt2;
mod llama;
mod minilm;
mod mlp;

pub use bert::{BERT_UNUSED_WEIGHTS, Bert, BertConfig};
pub use config::ConfigError;
pub use gpt2::{Gpt2, Gpt2Config};
pub use llama::{Llama, LlamaConfig};
pub use minilm::{Batch, MiniLmError, find_minilm_dir, tokenize};
pub use mlp::{MlpConfig, MlpModel};
