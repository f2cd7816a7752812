//! Transformer blocks: post-LN (BERT), pre-LN (GPT-2), RMSNorm + SwiGLU + RoPE (LLaMA).

use super::{Dropout, LayerNorm, Mlp, Module, MultiHeadAttention, RmsNorm, SwiGlu};
use crate::{ForwardCtx, Result, Tensor};

/// BERT's layer: `h = LN(x + drop(attn(x)))`, `out = LN(h + drop(ffn(h)))`.
#[derive(Clone, Debug)]
pub struct BertLayer {
    /// Self-attention (scope `attention`).
    pub attention: MultiHeadAttention,
    /// `attention.output.LayerNorm`.
    pub attention_norm: LayerNorm,
    /// `intermediate.dense` and `output.dense`.
    pub ffn: Mlp,
    /// `output.LayerNorm`.
    pub output_norm: LayerNorm,
    /// Hidden dropout.
    pub dropout: Dropout,
}

impl BertLayer {
    /// Trace the layer with an additive attention mask.
    #[track_caller]
    pub fn forward(&self, ctx: &mut ForwardCtx, x: &Tensor, mask: Option<&Tensor>) -> Result<Tensor> {
        super::called_here(|| -> Result<Tensor> {
            let a = self.attention.forward(ctx, x, mask)?;
            let a = ctx.scope("attention.output", |ctx| self.dropout.forward(ctx, &a))?;
            let h = self.attention_norm.forward(ctx, &a.add(x)?)?;
            let f = self.ffn.forward(ctx, &h)?;
            let f = ctx.scope("output", |ctx| self.dropout.forward(ctx, &f))?;
            self.output_norm.forward(ctx, &f.add(&h)?)
        })
    }
}

/// GPT-2's block: `x + drop(attn(ln_1(x)))`, then `x + drop(mlp(ln_2(x)))`.
#[derive(Clone, Debug)]
pub struct Gpt2Block {
    /// `ln_1`.
    pub ln_1: LayerNorm,
    /// Causal self-attention (scope `attn`).
    pub attn: MultiHeadAttention,
    /// `ln_2`.
    pub ln_2: LayerNorm,
    /// `mlp.c_fc` and `mlp.c_proj`.
    pub mlp: Mlp,
    /// Residual dropout.
    pub dropout: Dropout,
}

impl Module for Gpt2Block {
    #[track_caller]
    fn forward(&self, ctx: &mut ForwardCtx, x: &Tensor) -> Result<Tensor> {
        super::called_here(|| -> Result<Tensor> {
            let h = self.ln_1.forward(ctx, x)?;
            let a = self.attn.forward(ctx, &h, None)?;
            let x = x.add(&ctx.scope("attn", |ctx| self.dropout.forward(ctx, &a))?)?;
            let h = self.ln_2.forward(ctx, &x)?;
            let m = self.mlp.forward(ctx, &h)?;
            x.add(&ctx.scope("mlp", |ctx| self.dropout.forward(ctx, &m))?)
        })
    }
}

/// LLaMA's block: `x + attn(rms(x))`, then `x + swiglu(rms(x))`.
#[derive(Clone, Debug)]
pub struct LlamaBlock {
    /// `input_layernorm`.
    pub input_norm: RmsNorm,
    /// Causal self-attention with RoPE and grouped-query heads (scope `self_attn`).
    pub attn: MultiHeadAttention,
    /// `post_attention_layernorm`.
    pub post_norm: RmsNorm,
    /// `mlp.gate_proj`, `mlp.up_proj`, `mlp.down_proj`.
    pub mlp: SwiGlu,
}

impl Module for LlamaBlock {
    #[track_caller]
    fn forward(&self, ctx: &mut ForwardCtx, x: &Tensor) -> Result<Tensor> {
        super::called_here(|| -> Result<Tensor> {
            let h = self.input_norm.forward(ctx, x)?;
            let x = x.add(&self.attn.forward(ctx, &h, None)?)?;
            let h = self.post_norm.forward(ctx, &x)?;
            x.add(&self.mlp.forward(ctx, &h)?)
        })
    }
}
