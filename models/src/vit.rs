//! ViT as Hugging Face's `ViTModel` computes it: non-overlapping patches embedded by a
//! convolution whose stride is its kernel, a learned `[CLS]` token and learned positions,
//! pre-LN encoder layers (`layernorm_before`, attention, `layernorm_after`, MLP), a final
//! LayerNorm, and a pooler (dense + tanh) on the `[CLS]` token.

use crate::config::{self, ConfigError, Key, null_or_false};
use rustral_frontend::nn::{
    Activation, Conv2d, Dropout, LayerNorm, Linear, Mlp, Module, MultiHeadAttention, QkvProjection,
};
use rustral_frontend::{DType, Dim, ForwardCtx, Init, Result, Tensor};
use serde::Deserialize;
use std::path::Path;

/// The fields of a Hugging Face ViT `config.json` that the model uses.
#[derive(Clone, Debug, Deserialize, PartialEq)]
pub struct VitConfig {
    /// Model width.
    pub hidden_size: usize,
    /// Encoder layers.
    pub num_hidden_layers: usize,
    /// Attention heads.
    pub num_attention_heads: usize,
    /// MLP width.
    pub intermediate_size: usize,
    /// MLP activation (`gelu`).
    #[serde(default = "gelu")]
    pub hidden_act: String,
    /// LayerNorm epsilon.
    #[serde(default = "eps")]
    pub layer_norm_eps: f64,
    /// Image height and width.
    pub image_size: usize,
    /// Patch height and width.
    pub patch_size: usize,
    /// Image channels.
    #[serde(default = "three")]
    pub num_channels: usize,
    /// Whether the query, key and value projections have biases.
    #[serde(default = "yes")]
    pub qkv_bias: bool,
    /// The pooler's width (`hidden_size` when absent).
    #[serde(default)]
    pub pooler_output_size: Option<usize>,
    /// The pooler's activation (`tanh`).
    #[serde(default = "tanh")]
    pub pooler_act: String,
}

fn gelu() -> String {
    "gelu".into()
}
fn eps() -> f64 {
    1e-12
}
fn three() -> usize {
    3
}
fn yes() -> bool {
    true
}
fn tanh() -> String {
    "tanh".into()
}

const VIT_KEYS: &[Key] = &[
    Key { name: "pooler_act", supported: |v| v.is_null() || v == "tanh", expected: "tanh" },
    Key { name: "use_mask_token", supported: null_or_false, expected: "false" },
];

impl VitConfig {
    /// Read a `config.json`.
    pub fn from_file(path: &Path) -> Result<VitConfig, ConfigError> {
        config::read(path, VIT_KEYS, VitConfig::validate)
    }

    /// The first problem that would make this config fail to trace or compute nonsense.
    pub fn validate(&self) -> std::result::Result<(), String> {
        config::size("hidden_size", self.hidden_size)?;
        config::heads("hidden_size", self.hidden_size, "num_attention_heads", self.num_attention_heads)?;
        config::layers("num_hidden_layers", self.num_hidden_layers)?;
        config::size("intermediate_size", self.intermediate_size)?;
        config::size("image_size", self.image_size)?;
        config::size("patch_size", self.patch_size)?;
        config::size("num_channels", self.num_channels)?;
        config::eps("layer_norm_eps", self.layer_norm_eps)?;
        if self.patch_size > self.image_size {
            return Err(format!("patch_size {} is larger than image_size {}", self.patch_size, self.image_size));
        }
        if let Some(p) = self.pooler_output_size {
            config::size("pooler_output_size", p)?;
        }
        if Activation::from_hf(&self.hidden_act).is_none() {
            return Err(format!("hidden_act {:?} is not supported (relu, gelu, gelu_new, silu)", self.hidden_act));
        }
        Ok(())
    }

    /// ViT-B/16 at 224x224.
    pub fn base_patch16() -> VitConfig {
        VitConfig {
            hidden_size: 768,
            num_hidden_layers: 12,
            num_attention_heads: 12,
            intermediate_size: 3072,
            hidden_act: "gelu".into(),
            layer_norm_eps: 1e-12,
            image_size: 224,
            patch_size: 16,
            num_channels: 3,
            qkv_bias: true,
            pooler_output_size: None,
            pooler_act: "tanh".into(),
        }
    }

    /// A small config for tests.
    pub fn tiny() -> VitConfig {
        VitConfig {
            hidden_size: 32,
            num_hidden_layers: 2,
            num_attention_heads: 4,
            intermediate_size: 64,
            image_size: 32,
            patch_size: 8,
            ..VitConfig::base_patch16()
        }
    }
}

/// ViT with parameters named as in `ViTModel` checkpoints.
#[derive(Clone, Debug)]
pub struct Vit {
    /// Its config.
    pub config: VitConfig,
}

impl Vit {
    /// Declare `pixel_values: f32[batch, channels, image_size, image_size]`.
    pub fn input(&self, ctx: &mut ForwardCtx) -> Result<Tensor> {
        let (c, s) = (self.config.num_channels, self.config.image_size);
        ctx.input("pixel_values", &[Dim::sym("batch"), Dim::fixed(c), Dim::fixed(s), Dim::fixed(s)], DType::F32)
    }

    /// `last_hidden_state` `[batch, 1 + patches, hidden]` and `pooler_output`
    /// `[batch, pooler_output_size]`.
    pub fn forward(&self, ctx: &mut ForwardCtx, pixels: &Tensor) -> Result<(Tensor, Tensor)> {
        let c = &self.config;
        c.validate().map_err(|m| config::invalid("vit", m))?;
        let d = c.hidden_size;
        let grid = c.image_size / c.patch_size;
        let tokens = grid * grid + 1;
        let batch = pixels.dim(0)?;
        let mut h = ctx.scope("embeddings", |ctx| {
            let patches = ctx.scope("patch_embeddings", |ctx| {
                let conv = Conv2d::new("projection", c.num_channels, d, c.patch_size).stride(c.patch_size);
                let map = conv.forward(ctx, pixels)?;
                map.reshape(&[batch.clone(), Dim::fixed(d), Dim::fixed(grid_len(&map)?)])?.transpose(1, 2)
            })?;
            let cls =
                ctx.param("cls_token", &[Dim::fixed(1), Dim::fixed(1), Dim::fixed(d)], Init::Normal { std: 0.02 })?;
            let cls = cls.broadcast_to(&[batch.clone(), Dim::fixed(1), Dim::fixed(d)])?;
            let positions = ctx.param(
                "position_embeddings",
                &[Dim::fixed(1), Dim::fixed(tokens), Dim::fixed(d)],
                Init::Normal { std: 0.02 },
            )?;
            Tensor::concat(&[&cls, &patches], 1)?.add(&positions)
        })?;
        let act = Activation::from_hf(&c.hidden_act).expect("validated");
        let heads = c.num_attention_heads;
        for i in 0..c.num_hidden_layers {
            h = ctx.scope(&format!("encoder.layer.{i}"), |ctx| {
                let attention = MultiHeadAttention {
                    name: "attention".into(),
                    n_heads: heads,
                    n_kv_heads: heads,
                    head_dim: d / heads,
                    qkv: QkvProjection::Separate {
                        q: Linear::new("attention.query", d, d, c.qkv_bias),
                        k: Linear::new("attention.key", d, d, c.qkv_bias),
                        v: Linear::new("attention.value", d, d, c.qkv_bias),
                    },
                    out: Linear::new("output.dense", d, d, true),
                    rope: None,
                    causal: false,
                    divide_scores: false,
                    dropout: Dropout { p: 0.0 },
                };
                let normed = LayerNorm::new("layernorm_before", d, c.layer_norm_eps).forward(ctx, &h)?;
                let a = attention.forward(ctx, &normed, None)?;
                let h = h.add(&a)?;
                let mlp = Mlp {
                    name: String::new(),
                    up: Linear::new("intermediate.dense", d, c.intermediate_size, true),
                    act,
                    down: Linear::new("output.dense", c.intermediate_size, d, true),
                };
                let normed = LayerNorm::new("layernorm_after", d, c.layer_norm_eps).forward(ctx, &h)?;
                let m = mlp.forward(ctx, &normed)?;
                h.add(&m)
            })?;
        }
        let h = LayerNorm::new("layernorm", d, c.layer_norm_eps).forward(ctx, &h)?;
        let pooled = ctx.scope("pooler", |ctx| {
            let first = h.slice(1, 0, 1usize)?.reshape(&[batch.clone(), Dim::fixed(d)])?;
            Linear::new("dense", d, c.pooler_output_size.unwrap_or(d), true).forward(ctx, &first)?.tanh()
        })?;
        Ok((h, pooled))
    }
}

/// Height times width of an NCHW tensor's static grid.
fn grid_len(t: &Tensor) -> Result<usize> {
    let (h, w) = (t.dim(2)?, t.dim(3)?);
    Ok(h.as_static().unwrap_or(0) * w.as_static().unwrap_or(0))
}
