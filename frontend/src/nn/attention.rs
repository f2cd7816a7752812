//! Multi-head attention as model code writes it: projections, head split (reshape + permute),
//! optional rotary embedding, grouped-query head sharing, scaled scores, masks, softmax,
//! context, head merge and output projection. The fusion pass recognises this as `attention`.

use super::{Dropout, Linear, Module};
use crate::{DType, Dim, ForwardCtx, Result, Tensor};

/// The most negative f32: what Hugging Face adds for masked positions (exp of it is 0).
const MASKED: f64 = -3.402_823_466_385_288_6e38;

/// How queries, keys and values are projected from the input.
#[derive(Clone, Debug)]
pub enum QkvProjection {
    /// Three projections (BERT, LLaMA).
    Separate {
        /// Query projection.
        q: Linear,
        /// Key projection.
        k: Linear,
        /// Value projection.
        v: Linear,
    },
    /// One projection to `[q | k | v]` along the last axis (GPT-2's `c_attn`).
    Fused(Linear),
}

/// Rotary position embedding, Hugging Face's `rotate_half` convention.
#[derive(Clone, Copy, Debug)]
pub struct Rope {
    /// Base of the frequencies (10000 in LLaMA).
    pub theta: f64,
}

/// Self-attention over `[batch, seq, d_model]`.
#[derive(Clone, Debug)]
pub struct MultiHeadAttention {
    /// Scope name (`attention`, `attn`, `self_attn`).
    pub name: String,
    /// Query heads.
    pub n_heads: usize,
    /// Key/value heads (fewer than `n_heads` for grouped-query attention).
    pub n_kv_heads: usize,
    /// Width of one head.
    pub head_dim: usize,
    /// Input projections.
    pub qkv: QkvProjection,
    /// Output projection.
    pub out: Linear,
    /// Rotary embedding of queries and keys.
    pub rope: Option<Rope>,
    /// Mask future positions.
    pub causal: bool,
    /// Divide scores by `sqrt(head_dim)` (BERT's spelling) instead of multiplying by its
    /// inverse; both are what real model code writes.
    pub divide_scores: bool,
    /// Dropout on the attention probabilities (training only).
    pub dropout: Dropout,
}

impl MultiHeadAttention {
    /// Trace attention of `x` with an optional additive mask broadcastable to
    /// `[batch, heads, seq, seq]` (see `padding_mask`).
    #[track_caller]
    pub fn forward(&self, ctx: &mut ForwardCtx, x: &Tensor, mask: Option<&Tensor>) -> Result<Tensor> {
        super::called_here(|| -> Result<Tensor> {
            ctx.scope(&self.name, |ctx| {
                let (q, k, v) = self.project(ctx, x)?;
                let (mut q, mut k) = (self.split_heads(&q, self.n_heads)?, self.split_heads(&k, self.n_kv_heads)?);
                let v = self.split_heads(&v, self.n_kv_heads)?;
                // A cache keeps key/value heads unrepeated (cached_attention shares them).
                let shared_v = if ctx.kv_capacity().is_some() { v.clone() } else { self.repeat_kv(&v)? };
                if let Some(rope) = self.rope {
                    (q, k) = rope.apply(ctx, &q, &k)?;
                }
                if ctx.kv_capacity().is_some() {
                    return self.cached(ctx, &q, &k, &v, mask);
                }
                let k = self.repeat_kv(&k)?;
                let scores = q.matmul(&k.transpose(-2, -1)?)?;
                let d = (self.head_dim as f64).sqrt();
                let mut scores = if self.divide_scores { scores.div_scalar(d)? } else { scores.mul_scalar(1.0 / d)? };
                if let Some(m) = mask {
                    scores = scores.add(m)?;
                }
                if self.causal {
                    scores = causal_mask(ctx, &scores)?;
                }
                let probs = self.dropout.forward(ctx, &scores.softmax(-1)?)?;
                let merged = self.merge_heads(&probs.matmul(&shared_v)?)?;
                self.out.forward(ctx, &merged)
            })
        })
    }

    /// Attention for generation: this step's keys and values are written into the layer's
    /// cache at the position, and the queries attend to the filled part of the cache with
    /// grouped-query heads and the causal mask offset by the position (`cached_attention`).
    fn cached(
        &self,
        ctx: &mut ForwardCtx,
        q: &Tensor,
        k: &Tensor,
        v: &Tensor,
        mask: Option<&Tensor>,
    ) -> Result<Tensor> {
        if mask.is_some() || !self.causal {
            let message = "a KV cache needs causal attention without an extra mask".to_string();
            return Err(crate::Error::Argument { op: "attention".into(), path: ctx.path(), message });
        }
        let (keys, values) = match (ctx.cache("key", k)?, ctx.cache("value", v)?) {
            (Some(keys), Some(values)) => (keys, values),
            _ => unreachable!("called with a KV cache"),
        };
        let position = ctx.position()?.expect("a KV cache has a position");
        let scale = 1.0 / (self.head_dim as f64).sqrt();
        let context = q.cached_attention(&keys, &values, &position, scale)?;
        self.out.forward(ctx, &self.merge_heads(&context)?)
    }

    fn project(&self, ctx: &mut ForwardCtx, x: &Tensor) -> Result<(Tensor, Tensor, Tensor)> {
        match &self.qkv {
            QkvProjection::Separate { q, k, v } => Ok((q.forward(ctx, x)?, k.forward(ctx, x)?, v.forward(ctx, x)?)),
            QkvProjection::Fused(qkv) => {
                let y = qkv.forward(ctx, x)?;
                let (dq, dkv) = (self.n_heads * self.head_dim, self.n_kv_heads * self.head_dim);
                Ok((y.slice(-1, 0, dq)?, y.slice(-1, dq, dq + dkv)?, y.slice(-1, dq + dkv, dq + 2 * dkv)?))
            }
        }
    }

    /// `[b, s, h * d] -> [b, h, s, d]`.
    fn split_heads(&self, x: &Tensor, heads: usize) -> Result<Tensor> {
        let (b, s) = (x.dim(0)?, x.dim(1)?);
        x.reshape(&[b, s, Dim::fixed(heads), Dim::fixed(self.head_dim)])?.permute(&[0, 2, 1, 3])
    }

    /// `[b, h, s, d] -> [b, s, h * d]`.
    fn merge_heads(&self, x: &Tensor) -> Result<Tensor> {
        let (b, s) = (x.dim(0)?, x.dim(2)?);
        x.permute(&[0, 2, 1, 3])?.reshape(&[b, s, Dim::fixed(self.n_heads * self.head_dim)])
    }

    /// Share each key/value head among `n_heads / n_kv_heads` query heads.
    fn repeat_kv(&self, x: &Tensor) -> Result<Tensor> {
        let rep = self.n_heads / self.n_kv_heads.max(1);
        if rep == 1 {
            return Ok(x.clone());
        }
        let (b, s, d) = (x.dim(0)?, x.dim(2)?, Dim::fixed(self.head_dim));
        let kvh = Dim::fixed(self.n_kv_heads);
        x.reshape(&[b.clone(), kvh.clone(), Dim::fixed(1), s.clone(), d.clone()])?
            .broadcast_to(&[b.clone(), kvh, Dim::fixed(rep), s.clone(), d.clone()])?
            .reshape(&[b, Dim::fixed(self.n_heads), s, d])
    }
}

/// Keep score `[.., i, j]` where `j <= i`, else the most negative f32 (scores are `[.., s, s]`).
fn causal_mask(ctx: &mut ForwardCtx, scores: &Tensor) -> Result<Tensor> {
    ctx.scope("causal_mask", |ctx| {
        let s = scores.dim(-1)?;
        let rows = ctx.iota(&[s.clone(), Dim::fixed(1)], 0, DType::I64)?;
        let cols = ctx.iota(&[Dim::fixed(1), s], 1, DType::I64)?;
        let visible = cols.le(&rows)?;
        visible.select(scores, &ctx.scalar(MASKED, scores.dtype())?)
    })
}

/// The additive mask for a `[batch, seq]` attention mask of 1 (attend) and 0 (padding):
/// `(1 - mask) * most_negative_f32`, shaped `[batch, 1, 1, seq]`.
#[track_caller]
pub fn padding_mask(ctx: &mut ForwardCtx, mask: &Tensor) -> Result<Tensor> {
    super::called_here(|| -> Result<Tensor> {
        ctx.scope("padding_mask", |_| {
            let (b, s) = (mask.dim(0)?, mask.dim(1)?);
            let inverted = mask.mul_scalar(-1.0)?.add_scalar(1.0)?;
            inverted.mul_scalar(MASKED)?.reshape(&[b, Dim::fixed(1), Dim::fixed(1), s])
        })
    })
}

impl Rope {
    /// Rotate queries and keys of shape `[b, h, s, d]`: `x * cos + rotate_half(x) * sin`, with
    /// angles `position * theta^(-2i/d)` repeated over both halves (computed once for both).
    #[track_caller]
    pub fn apply(&self, ctx: &mut ForwardCtx, q: &Tensor, k: &Tensor) -> Result<(Tensor, Tensor)> {
        super::called_here(|| -> Result<(Tensor, Tensor)> {
            ctx.scope("rope", |ctx| {
                let (s, d) = (q.dim(2)?, q.dim(3)?);
                let Some(d) = d.as_static().filter(|d| d % 2 == 0) else {
                    let message = format!("head dim {d} must be static and even");
                    return Err(crate::Error::Argument { op: "rope".into(), path: ctx.path(), message });
                };
                let half = d / 2;
                let inv_freq: Vec<f64> = (0..half)
                    .map(|i| 1.0 / self.theta.powf((2 * i) as f64 / d as f64))
                    .map(|f| f as f32 as f64)
                    .collect();
                let inv_freq = ctx.constant(&inv_freq, &[1, half], q.dtype())?;
                let pos = match ctx.position()? {
                    // Generation: positions start at the step's first token.
                    Some(first) => ctx.iota(&[s, Dim::fixed(1)], 0, DType::I64)?.add(&first)?.cast(q.dtype())?,
                    None => ctx.iota(&[s, Dim::fixed(1)], 0, q.dtype())?,
                };
                let freqs = pos.mul(&inv_freq)?;
                let angles = Tensor::concat(&[&freqs, &freqs], -1)?;
                let (cos, sin) = (angles.cos()?, angles.sin()?);
                let rotate = |x: &Tensor| -> Result<Tensor> {
                    let (x1, x2) = (x.slice(-1, 0, half)?, x.slice(-1, half, d)?);
                    let rotated = Tensor::concat(&[&x2.neg()?, &x1], -1)?;
                    x.mul(&cos)?.add(&rotated.mul(&sin)?)
                };
                Ok((rotate(q)?, rotate(k)?))
            })
        })
    }
}
