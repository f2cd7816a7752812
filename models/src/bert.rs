//! BERT encoders (all-MiniLM-L6-v2 is the real one we run): post-LN layers, learned absolute
//! positions, token types, GELU (erf), and sentence embeddings by mean pooling.

use crate::config::{self, ConfigError, Key, null_or_false};
use rustral_frontend::nn::{
    Activation, BertLayer, Dropout, Embedding, LayerNorm, Linear, Mlp, Module, MultiHeadAttention, QkvProjection,
    padding_mask,
};
use rustral_frontend::{DType, Dim, ForwardCtx, Init, Result, Tensor};
use serde::Deserialize;
use std::path::Path;

/// The fields of a Hugging Face BERT `config.json` that the model uses.
#[derive(Clone, Debug, Deserialize, PartialEq)]
pub struct BertConfig {
    /// Token vocabulary.
    pub vocab_size: usize,
    /// Model width.
    pub hidden_size: usize,
    /// Encoder layers.
    pub num_hidden_layers: usize,
    /// Attention heads.
    pub num_attention_heads: usize,
    /// Feed-forward width.
    pub intermediate_size: usize,
    /// `gelu` (erf form) for BERT.
    pub hidden_act: String,
    /// Position table rows.
    pub max_position_embeddings: usize,
    /// Token type table rows.
    pub type_vocab_size: usize,
    /// LayerNorm epsilon.
    pub layer_norm_eps: f64,
    /// Hidden dropout (training only).
    #[serde(default)]
    pub hidden_dropout_prob: f64,
    /// Attention dropout (training only).
    #[serde(default)]
    pub attention_probs_dropout_prob: f64,
}

/// Keys of BERT configs whose non-default values this model does not implement.
const BERT_KEYS: &[Key] = &[
    Key {
        name: "position_embedding_type",
        supported: |v| v.is_null() || v == "absolute",
        expected: "\"absolute\": learned absolute positions",
    },
    Key { name: "is_decoder", supported: null_or_false, expected: "false: an encoder" },
];

impl BertConfig {
    /// Read a `config.json`.
    pub fn from_file(path: &Path) -> Result<BertConfig, ConfigError> {
        config::read(path, BERT_KEYS, BertConfig::validate)
    }

    /// Parse `config.json` text; `source` names it in errors.
    pub fn from_json(text: &str, source: &str) -> Result<BertConfig, ConfigError> {
        config::parse(text, source, BERT_KEYS, BertConfig::validate)
    }

    /// The first problem that would make this config divide by zero, give NaN or overflow.
    pub fn validate(&self) -> std::result::Result<(), String> {
        config::size("vocab_size", self.vocab_size)?;
        config::size("hidden_size", self.hidden_size)?;
        config::heads("hidden_size", self.hidden_size, "num_attention_heads", self.num_attention_heads)?;
        config::size("intermediate_size", self.intermediate_size)?;
        config::size("max_position_embeddings", self.max_position_embeddings)?;
        config::size("type_vocab_size", self.type_vocab_size)?;
        config::layers("num_hidden_layers", self.num_hidden_layers)?;
        config::eps("layer_norm_eps", self.layer_norm_eps)?;
        config::probability("hidden_dropout_prob", self.hidden_dropout_prob)?;
        config::probability("attention_probs_dropout_prob", self.attention_probs_dropout_prob)
    }

    /// A small config for tests and snapshots (`layers` layers of width 32, 4 heads).
    pub fn tiny(layers: usize) -> BertConfig {
        BertConfig {
            vocab_size: 50,
            hidden_size: 32,
            num_hidden_layers: layers,
            num_attention_heads: 4,
            intermediate_size: 64,
            hidden_act: "gelu".into(),
            max_position_embeddings: 16,
            type_vocab_size: 2,
            layer_norm_eps: 1e-12,
            hidden_dropout_prob: 0.1,
            attention_probs_dropout_prob: 0.1,
        }
    }
}

/// A BERT encoder with parameters named as in Hugging Face `BertModel` checkpoints.
#[derive(Clone, Debug)]
pub struct Bert {
    /// Its config.
    pub config: BertConfig,
}

/// Checkpoint entries a traced encoder does not use.
pub const BERT_UNUSED_WEIGHTS: &[&str] = &["embeddings.position_ids", "pooler.*"];

impl Bert {
    /// Checkpoint entries that `ParamStore::load_safetensors` should skip.
    pub fn unused_weights(&self) -> &'static [&'static str] {
        BERT_UNUSED_WEIGHTS
    }

    /// Declare the inputs `input_ids: i64[batch, seq]`, `token_type_ids: i64[batch, seq]` and
    /// `attention_mask: f32[batch, seq]` (1 attend, 0 padding).
    pub fn inputs(&self, ctx: &mut ForwardCtx) -> Result<(Tensor, Tensor, Tensor)> {
        let dims = [Dim::sym("batch"), Dim::sym("seq")];
        Ok((
            ctx.input("input_ids", &dims, DType::I64)?,
            ctx.input("token_type_ids", &dims, DType::I64)?,
            ctx.input("attention_mask", &dims, DType::F32)?,
        ))
    }

    /// The last hidden state `[batch, seq, hidden]`.
    pub fn forward(&self, ctx: &mut ForwardCtx, ids: &Tensor, types: &Tensor, mask: &Tensor) -> Result<Tensor> {
        let c = &self.config;
        c.validate().map_err(|m| config::invalid("bert", m))?;
        let dropout = Dropout { p: c.hidden_dropout_prob };
        let mut h = ctx.scope("embeddings", |ctx| {
            let words = Embedding::new("word_embeddings", c.vocab_size, c.hidden_size).forward(ctx, ids)?;
            let seq = ids.dim(1)?;
            let positions = ctx.scope("position_embeddings", |ctx| {
                let table = ctx.param(
                    "weight",
                    &[Dim::fixed(c.max_position_embeddings), Dim::fixed(c.hidden_size)],
                    Init::Normal { std: 0.02 },
                )?;
                table.slice(0, 0, seq)
            })?;
            let type_rows =
                Embedding::new("token_type_embeddings", c.type_vocab_size, c.hidden_size).forward(ctx, types)?;
            let sum = words.add(&positions)?.add(&type_rows)?;
            let normed = LayerNorm::new("LayerNorm", c.hidden_size, c.layer_norm_eps).forward(ctx, &sum)?;
            dropout.forward(ctx, &normed)
        })?;
        let additive = ctx.scope("encoder", |ctx| padding_mask(ctx, mask))?;
        for i in 0..c.num_hidden_layers {
            let layer = self.layer()?;
            h = ctx.scope(&format!("encoder.layer.{i}"), |ctx| layer.forward(ctx, &h, Some(&additive)))?;
        }
        Ok(h)
    }

    fn layer(&self) -> Result<BertLayer> {
        let c = &self.config;
        let (d, heads) = (c.hidden_size, c.num_attention_heads);
        let act = Activation::from_hf(&c.hidden_act).ok_or_else(|| rustral_frontend::Error::Argument {
            op: "bert".into(),
            path: String::new(),
            message: format!("unsupported hidden_act {:?}", c.hidden_act),
        })?;
        let attention = MultiHeadAttention {
            name: "attention".into(),
            n_heads: heads,
            n_kv_heads: heads,
            head_dim: d / heads,
            qkv: QkvProjection::Separate {
                q: Linear::new("self.query", d, d, true),
                k: Linear::new("self.key", d, d, true),
                v: Linear::new("self.value", d, d, true),
            },
            out: Linear::new("output.dense", d, d, true),
            rope: None,
            causal: false,
            divide_scores: true,
            dropout: Dropout { p: c.attention_probs_dropout_prob },
        };
        Ok(BertLayer {
            attention,
            attention_norm: LayerNorm::new("attention.output.LayerNorm", d, c.layer_norm_eps),
            ffn: Mlp {
                name: String::new(),
                up: Linear::new("intermediate.dense", d, c.intermediate_size, true),
                act,
                down: Linear::new("output.dense", c.intermediate_size, d, true),
            },
            output_norm: LayerNorm::new("output.LayerNorm", d, c.layer_norm_eps),
            dropout: Dropout { p: c.hidden_dropout_prob },
        })
    }

    /// Sentence embeddings as sentence-transformers computes them: mean of the hidden states
    /// over attended tokens, then L2 normalisation (`[batch, hidden]`).
    pub fn sentence_embedding(&self, ctx: &mut ForwardCtx, hidden: &Tensor, mask: &Tensor) -> Result<Tensor> {
        ctx.scope("pooling", |ctx| {
            let (b, s) = (mask.dim(0)?, mask.dim(1)?);
            let m = mask.reshape(&[b, s, Dim::fixed(1)])?;
            let summed = hidden.mul(&m)?.sum(&[1], false)?;
            let counts = m.sum(&[1], false)?.maximum(&ctx.scalar(1e-9, DType::F32)?)?;
            let mean = summed.div(&counts)?;
            let norm = mean.square()?.sum(&[-1], true)?.sqrt()?.maximum(&ctx.scalar(1e-12, DType::F32)?)?;
            mean.div(&norm)
        })
    }
}
