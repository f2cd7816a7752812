//! LLaMA: RMSNorm, rotary positions, grouped-query attention, SwiGLU, untied output head.

use crate::config::{self, ConfigError, Key, null_or_false};
use rustral_frontend::nn::{
    Dropout, Embedding, Linear, LlamaBlock, Module, MultiHeadAttention, QkvProjection, RmsNorm, Rope, SwiGlu,
};
use rustral_frontend::{DType, Dim, ForwardCtx, Result, Tensor};
use serde::Deserialize;
use std::path::Path;

/// The fields of a Hugging Face LLaMA `config.json` that the model uses.
#[derive(Clone, Debug, Deserialize, PartialEq)]
pub struct LlamaConfig {
    /// Token vocabulary.
    pub vocab_size: usize,
    /// Model width.
    pub hidden_size: usize,
    /// SwiGLU width.
    pub intermediate_size: usize,
    /// Blocks.
    pub num_hidden_layers: usize,
    /// Query heads.
    pub num_attention_heads: usize,
    /// Key/value heads.
    pub num_key_value_heads: usize,
    /// Head width (hidden_size / heads when absent).
    #[serde(default)]
    pub head_dim: Option<usize>,
    /// RMSNorm epsilon.
    pub rms_norm_eps: f64,
    /// RoPE base, as older configs give it.
    #[serde(default)]
    pub rope_theta: Option<f64>,
    /// RoPE parameters, as newer configs give them.
    #[serde(default)]
    pub rope_parameters: Option<RopeParameters>,
    /// Output head shares the token embedding.
    #[serde(default)]
    pub tie_word_embeddings: bool,
    /// Positions the model was trained for (the longest generation's prompt plus output).
    #[serde(default)]
    pub max_position_embeddings: Option<usize>,
}

/// `rope_parameters` of newer configs.
#[derive(Clone, Debug, Deserialize, PartialEq)]
pub struct RopeParameters {
    /// RoPE base.
    pub rope_theta: f64,
}

/// RoPE with frequencies unscaled: no `rope_scaling`, or one of type "default".
fn default_rope(v: &serde_json::Value) -> bool {
    let kind = v.get("rope_type").or_else(|| v.get("type"));
    v.is_null() || kind.is_none_or(|t| t == "default")
}

/// Keys of LLaMA configs whose non-default values this model does not implement.
const LLAMA_KEYS: &[Key] = &[
    Key { name: "rope_scaling", supported: default_rope, expected: "unscaled RoPE (null or rope_type \"default\")" },
    Key { name: "rope_parameters", supported: default_rope, expected: "rope_type \"default\"" },
    Key { name: "attention_bias", supported: null_or_false, expected: "false: projections without bias" },
    Key { name: "mlp_bias", supported: null_or_false, expected: "false: projections without bias" },
    Key { name: "hidden_act", supported: |v| v.is_null() || v == "silu", expected: "\"silu\" (SwiGLU)" },
];

impl LlamaConfig {
    /// Read a `config.json`.
    pub fn from_file(path: &Path) -> Result<LlamaConfig, ConfigError> {
        config::read(path, LLAMA_KEYS, LlamaConfig::validate)
    }

    /// Parse `config.json` text; `source` names it in errors.
    pub fn from_json(text: &str, source: &str) -> Result<LlamaConfig, ConfigError> {
        config::parse(text, source, LLAMA_KEYS, LlamaConfig::validate)
    }

    /// The first problem that would make this config divide by zero, give NaN or overflow.
    pub fn validate(&self) -> std::result::Result<(), String> {
        config::size("vocab_size", self.vocab_size)?;
        config::size("hidden_size", self.hidden_size)?;
        config::size("intermediate_size", self.intermediate_size)?;
        config::layers("num_hidden_layers", self.num_hidden_layers)?;
        match self.head_dim {
            Some(hd) => {
                config::size("head_dim", hd)?;
                config::size("num_attention_heads", self.num_attention_heads)?;
            }
            None => config::heads("hidden_size", self.hidden_size, "num_attention_heads", self.num_attention_heads)?,
        }
        config::heads(
            "num_attention_heads",
            self.num_attention_heads,
            "num_key_value_heads",
            self.num_key_value_heads,
        )?;
        config::eps("rms_norm_eps", self.rms_norm_eps)?;
        let theta = self.theta();
        if !(theta.is_finite() && theta > 0.0) {
            return Err(format!("rope_theta is {theta}: give a finite value > 0"));
        }
        if let Some(n) = self.max_position_embeddings {
            config::size("max_position_embeddings", n)?;
        }
        Ok(())
    }

    /// A small config for tests and snapshots (4 query heads sharing 2 key/value heads).
    pub fn tiny(layers: usize) -> LlamaConfig {
        LlamaConfig {
            vocab_size: 50,
            hidden_size: 32,
            intermediate_size: 64,
            num_hidden_layers: layers,
            num_attention_heads: 4,
            num_key_value_heads: 2,
            head_dim: None,
            rms_norm_eps: 1e-6,
            rope_theta: Some(10000.0),
            rope_parameters: None,
            tie_word_embeddings: false,
            max_position_embeddings: Some(16),
        }
    }

    fn theta(&self) -> f64 {
        self.rope_parameters.as_ref().map(|r| r.rope_theta).or(self.rope_theta).unwrap_or(10000.0)
    }
}

/// LLaMA with parameters named as in `LlamaForCausalLM` checkpoints.
#[derive(Clone, Debug)]
pub struct Llama {
    /// Its config.
    pub config: LlamaConfig,
}

impl Llama {
    /// Declare `input_ids: i64[batch, seq]`.
    pub fn input(&self, ctx: &mut ForwardCtx) -> Result<Tensor> {
        ctx.input("input_ids", &[Dim::sym("batch"), Dim::sym("seq")], DType::I64)
    }

    /// Logits `[batch, seq, vocab]` (with a KV cache: the last position's, `[batch, 1, vocab]`).
    pub fn forward(&self, ctx: &mut ForwardCtx, ids: &Tensor) -> Result<Tensor> {
        let c = &self.config;
        c.validate().map_err(|m| config::invalid("llama", m))?;
        let d = c.hidden_size;
        let hd = c.head_dim.unwrap_or(d / c.num_attention_heads);
        let (q_out, kv_out) = (c.num_attention_heads * hd, c.num_key_value_heads * hd);
        let embed = Embedding::new("embed_tokens", c.vocab_size, d);
        let (table, format, h) = ctx.scope("model", |ctx| {
            let table = embed.weight(ctx)?;
            let format = embed.format(ctx);
            let mut h = embed.lookup(ctx, &table, ids)?;
            for i in 0..c.num_hidden_layers {
                let block = LlamaBlock {
                    input_norm: RmsNorm::new("input_layernorm", d, c.rms_norm_eps),
                    attn: MultiHeadAttention {
                        name: "self_attn".into(),
                        n_heads: c.num_attention_heads,
                        n_kv_heads: c.num_key_value_heads,
                        head_dim: hd,
                        qkv: QkvProjection::Separate {
                            q: Linear::new("q_proj", d, q_out, false),
                            k: Linear::new("k_proj", d, kv_out, false),
                            v: Linear::new("v_proj", d, kv_out, false),
                        },
                        out: Linear::new("o_proj", q_out, d, false),
                        rope: Some(Rope { theta: c.theta() }),
                        causal: true,
                        divide_scores: false,
                        dropout: Dropout { p: 0.0 },
                    },
                    post_norm: RmsNorm::new("post_attention_layernorm", d, c.rms_norm_eps),
                    mlp: SwiGlu {
                        name: "mlp".into(),
                        gate: Linear::new("gate_proj", d, c.intermediate_size, false),
                        up: Linear::new("up_proj", d, c.intermediate_size, false),
                        down: Linear::new("down_proj", c.intermediate_size, d, false),
                    },
                };
                h = ctx.scope(&format!("layers.{i}"), |ctx| block.forward(ctx, &h))?;
            }
            let h = RmsNorm::new("norm", d, c.rms_norm_eps).forward(ctx, &h)?;
            Ok::<_, rustral_frontend::Error>((table, format, crate::last_position(ctx, &h)?))
        })?;
        if c.tie_word_embeddings {
            ctx.scope("lm_head", |_| match format {
                Some(format) => h.quant_matmul(&table, format),
                None => h.matmul(&table.transpose(0, 1)?),
            })
        } else {
            Linear::new("lm_head", d, c.vocab_size, false).forward(ctx, &h)
        }
    }
}
