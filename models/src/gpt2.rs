//! GPT-2: pre-LN blocks, learned positions, `Conv1D` weights stored `[in, out]`, GELU (tanh),
//! causal attention, final `ln_f`, output projection tied to the token embedding.

use crate::config::{self, ConfigError, Key, null_or_false, null_or_true};
use rustral_frontend::nn::{
    Activation, Dropout, Embedding, Gpt2Block, LayerNorm, Linear, Mlp, Module, MultiHeadAttention, QkvProjection,
};
use rustral_frontend::{DType, Dim, ForwardCtx, Init, Result, Tensor};
use serde::Deserialize;
use std::path::Path;

/// The fields of a Hugging Face GPT-2 `config.json` that the model uses.
#[derive(Clone, Debug, Deserialize, PartialEq)]
pub struct Gpt2Config {
    /// Token vocabulary.
    pub vocab_size: usize,
    /// Model width.
    pub n_embd: usize,
    /// Blocks.
    pub n_layer: usize,
    /// Attention heads.
    pub n_head: usize,
    /// Position table rows.
    pub n_positions: usize,
    /// Feed-forward width (4 * n_embd when absent).
    #[serde(default)]
    pub n_inner: Option<usize>,
    /// LayerNorm epsilon.
    pub layer_norm_epsilon: f64,
    /// `gelu_new` for GPT-2.
    pub activation_function: String,
    /// Residual dropout (training only).
    #[serde(default)]
    pub resid_pdrop: f64,
    /// Embedding dropout (training only).
    #[serde(default)]
    pub embd_pdrop: f64,
    /// Attention dropout (training only).
    #[serde(default)]
    pub attn_pdrop: f64,
}

/// Keys of GPT-2 configs whose non-default values this model does not implement.
const GPT2_KEYS: &[Key] = &[
    Key { name: "scale_attn_weights", supported: null_or_true, expected: "true: scores divided by sqrt(head_dim)" },
    Key { name: "scale_attn_by_inverse_layer_idx", supported: null_or_false, expected: "false" },
    Key { name: "add_cross_attention", supported: null_or_false, expected: "false: no encoder" },
    Key { name: "tie_word_embeddings", supported: null_or_true, expected: "true: the output head is wte" },
];

impl Gpt2Config {
    /// Read a `config.json`.
    pub fn from_file(path: &Path) -> Result<Gpt2Config, ConfigError> {
        config::read(path, GPT2_KEYS, Gpt2Config::validate)
    }

    /// Parse `config.json` text; `source` names it in errors.
    pub fn from_json(text: &str, source: &str) -> Result<Gpt2Config, ConfigError> {
        config::parse(text, source, GPT2_KEYS, Gpt2Config::validate)
    }

    /// The first problem that would make this config divide by zero, give NaN or overflow.
    pub fn validate(&self) -> std::result::Result<(), String> {
        config::size("vocab_size", self.vocab_size)?;
        config::size("n_embd", self.n_embd)?;
        config::heads("n_embd", self.n_embd, "n_head", self.n_head)?;
        config::size("n_positions", self.n_positions)?;
        config::layers("n_layer", self.n_layer)?;
        if let Some(inner) = self.n_inner {
            config::size("n_inner", inner)?;
        }
        config::eps("layer_norm_epsilon", self.layer_norm_epsilon)?;
        config::probability("resid_pdrop", self.resid_pdrop)?;
        config::probability("embd_pdrop", self.embd_pdrop)?;
        config::probability("attn_pdrop", self.attn_pdrop)
    }

    /// GPT-2 small's shape (width 768, 12 heads, vocab 50257, 1024 positions, GELU tanh) with
    /// `layers` blocks and no dropout.
    pub fn small(layers: usize) -> Gpt2Config {
        Gpt2Config {
            vocab_size: 50257,
            n_embd: 768,
            n_layer: layers,
            n_head: 12,
            n_positions: 1024,
            n_inner: None,
            layer_norm_epsilon: 1e-5,
            activation_function: "gelu_new".into(),
            resid_pdrop: 0.0,
            embd_pdrop: 0.0,
            attn_pdrop: 0.0,
        }
    }

    /// One block of this config (trace it under the scope `h.{i}` for checkpoint names).
    pub fn block(&self) -> Result<Gpt2Block> {
        self.validate().map_err(|m| config::invalid("gpt2", m))?;
        let d = self.n_embd;
        let act = Activation::from_hf(&self.activation_function).ok_or_else(|| rustral_frontend::Error::Argument {
            op: "gpt2".into(),
            path: String::new(),
            message: format!("unsupported activation_function {:?}", self.activation_function),
        })?;
        let inner = self.n_inner.unwrap_or(4 * d);
        Ok(Gpt2Block {
            ln_1: LayerNorm::new("ln_1", d, self.layer_norm_epsilon),
            attn: MultiHeadAttention {
                name: "attn".into(),
                n_heads: self.n_head,
                n_kv_heads: self.n_head,
                head_dim: d / self.n_head,
                qkv: QkvProjection::Fused(Linear::conv1d("c_attn", d, 3 * d)),
                out: Linear::conv1d("c_proj", d, d),
                rope: None,
                causal: true,
                divide_scores: true,
                dropout: Dropout { p: self.attn_pdrop },
            },
            ln_2: LayerNorm::new("ln_2", d, self.layer_norm_epsilon),
            mlp: Mlp {
                name: "mlp".into(),
                up: Linear::conv1d("c_fc", d, inner),
                act,
                down: Linear::conv1d("c_proj", inner, d),
            },
            dropout: Dropout { p: self.resid_pdrop },
        })
    }

    /// A small config for tests and snapshots.
    pub fn tiny(layers: usize) -> Gpt2Config {
        Gpt2Config {
            vocab_size: 50,
            n_embd: 32,
            n_layer: layers,
            n_head: 4,
            n_positions: 16,
            n_inner: None,
            layer_norm_epsilon: 1e-5,
            activation_function: "gelu_new".into(),
            resid_pdrop: 0.1,
            embd_pdrop: 0.1,
            attn_pdrop: 0.1,
        }
    }
}

/// GPT-2 with parameters named as in `GPT2LMHeadModel` checkpoints.
#[derive(Clone, Debug)]
pub struct Gpt2 {
    /// Its config.
    pub config: Gpt2Config,
}

impl Gpt2 {
    /// Declare `input_ids: i64[batch, seq]`.
    pub fn input(&self, ctx: &mut ForwardCtx) -> Result<Tensor> {
        ctx.input("input_ids", &[Dim::sym("batch"), Dim::sym("seq")], DType::I64)
    }

    /// Logits `[batch, seq, vocab]` (with a KV cache: the last position's, `[batch, 1, vocab]`).
    pub fn forward(&self, ctx: &mut ForwardCtx, ids: &Tensor) -> Result<Tensor> {
        let c = &self.config;
        let d = c.n_embd;
        let block = c.block()?;
        let (wte, h) = ctx.scope("transformer", |ctx| {
            let wte = Embedding::new("wte", c.vocab_size, d).weight(ctx)?;
            let tokens = ctx.scope("wte", |_| wte.gather(ids, 0))?;
            let positions = ctx.scope("wpe", |ctx| {
                let table =
                    ctx.param("weight", &[Dim::fixed(c.n_positions), Dim::fixed(d)], Init::Normal { std: 0.01 })?;
                match ctx.position()? {
                    // Generation: the rows of this step's positions.
                    Some(first) => {
                        let steps = ctx.iota(&[ids.dim(1)?], 0, DType::I64)?.add(&first)?;
                        table.gather(&steps, 0)
                    }
                    None => table.slice(0, 0, ids.dim(1)?),
                }
            })?;
            let mut h = Dropout { p: c.embd_pdrop }.forward(ctx, &tokens.add(&positions)?)?;
            for i in 0..c.n_layer {
                h = ctx.scope(&format!("h.{i}"), |ctx| block.forward(ctx, &h))?;
            }
            let h = LayerNorm::new("ln_f", d, c.layer_norm_epsilon).forward(ctx, &h)?;
            Ok::<_, rustral_frontend::Error>((wte, crate::last_position(ctx, &h)?))
        })?;
        ctx.scope("lm_head", |_| h.matmul(&wte.transpose(0, 1)?))
    }
}
