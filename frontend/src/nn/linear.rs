//! Linear projections and embedding tables.

use super::Module;
use crate::{Dim, ForwardCtx, Init, Result, Tensor};

/// How a checkpoint stores a projection's weight.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WeightLayout {
    /// `[out, in]`, as PyTorch's `nn.Linear` (traced as `x @ transpose(w)`).
    OutIn,
    /// `[in, out]`, as GPT-2's `Conv1D` (traced as `x @ w`).
    InOut,
}

/// `y = x @ W (+ b)` over the last axis.
#[derive(Clone, Debug)]
pub struct Linear {
    /// Scope name (`query`, `self.query`, `c_attn`).
    pub name: String,
    /// Input features.
    pub d_in: usize,
    /// Output features.
    pub d_out: usize,
    /// Whether there is a bias.
    pub bias: bool,
    /// Weight layout in checkpoints.
    pub layout: WeightLayout,
}

impl Linear {
    /// A projection in PyTorch's layout.
    pub fn new(name: &str, d_in: usize, d_out: usize, bias: bool) -> Linear {
        Linear { name: name.into(), d_in, d_out, bias, layout: WeightLayout::OutIn }
    }

    /// The same in GPT-2's `Conv1D` layout.
    pub fn conv1d(name: &str, d_in: usize, d_out: usize) -> Linear {
        Linear { name: name.into(), d_in, d_out, bias: true, layout: WeightLayout::InOut }
    }
}

impl Module for Linear {
    #[track_caller]
    fn forward(&self, ctx: &mut ForwardCtx, x: &Tensor) -> Result<Tensor> {
        super::called_here(|| -> Result<Tensor> {
            ctx.scope(&self.name, |ctx| {
                let init = Init::Normal { std: 0.02 };
                if let (Some(format), WeightLayout::OutIn) = (ctx.quantized("weight"), self.layout) {
                    let w = ctx.quantized_param("weight", self.d_out, self.d_in, format)?;
                    let y = x.quant_matmul(&w, format)?;
                    return if self.bias {
                        y.add(&ctx.param("bias", &[Dim::fixed(self.d_out)], Init::Zeros)?)
                    } else {
                        Ok(y)
                    };
                }
                let w = match self.layout {
                    WeightLayout::OutIn => {
                        ctx.param("weight", &[Dim::fixed(self.d_out), Dim::fixed(self.d_in)], init)?.transpose(0, 1)?
                    }
                    WeightLayout::InOut => {
                        ctx.param("weight", &[Dim::fixed(self.d_in), Dim::fixed(self.d_out)], init)?
                    }
                };
                let y = x.matmul(&w)?;
                if self.bias { y.add(&ctx.param("bias", &[Dim::fixed(self.d_out)], Init::Zeros)?) } else { Ok(y) }
            })
        })
    }
}

/// A lookup table: `weight[ids]` for integer ids of any shape.
#[derive(Clone, Debug)]
pub struct Embedding {
    /// Scope name (`word_embeddings`, `wte`).
    pub name: String,
    /// Rows.
    pub vocab: usize,
    /// Row width.
    pub dim: usize,
}

impl Embedding {
    /// A table of `vocab` rows of `dim`.
    pub fn new(name: &str, vocab: usize, dim: usize) -> Embedding {
        Embedding { name: name.into(), vocab, dim }
    }

    /// The table itself (for tied output projections): f32 `[vocab, dim]`, or `u8` blocks
    /// `[vocab, row_bytes]` when the trace binds it quantized.
    #[track_caller]
    pub fn weight(&self, ctx: &mut ForwardCtx) -> Result<Tensor> {
        super::called_here(|| -> Result<Tensor> {
            ctx.scope(&self.name, |ctx| match ctx.quantized("weight") {
                Some(format) => ctx.quantized_param("weight", self.vocab, self.dim, format),
                None => {
                    ctx.param("weight", &[Dim::fixed(self.vocab), Dim::fixed(self.dim)], Init::Normal { std: 0.02 })
                }
            })
        })
    }

    /// The block format of the table, when it is bound quantized.
    pub fn format(&self, ctx: &mut ForwardCtx) -> Option<rustral_ir::QuantFormat> {
        ctx.scope(&self.name, |ctx| ctx.quantized("weight"))
    }

    /// Rows of `table` (from [`Embedding::weight`]) for `ids`: a quantized table's rows are
    /// gathered as blocks and dequantized, so only the picked rows are unpacked.
    #[track_caller]
    pub fn lookup(&self, ctx: &mut ForwardCtx, table: &Tensor, ids: &Tensor) -> Result<Tensor> {
        super::called_here(|| -> Result<Tensor> {
            let format = self.format(ctx);
            ctx.scope(&self.name, |_| match format {
                Some(format) => table.gather(ids, 0)?.dequantize(format),
                None => table.gather(ids, 0),
            })
        })
    }
}

impl Module for Embedding {
    #[track_caller]
    fn forward(&self, ctx: &mut ForwardCtx, ids: &Tensor) -> Result<Tensor> {
        super::called_here(|| -> Result<Tensor> {
            let w = self.weight(ctx)?;
            self.lookup(ctx, &w, ids)
        })
    }
}
