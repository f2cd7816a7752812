// A model file: one GPT-2 block (pre-LayerNorm, causal self-attention, GELU MLP, residuals)
// built from Rustral's nn modules, at GPT-2 small's width:
// `rustral-compile models/examples/gpt2_block.rs --shape batch=2 --shape seq=32 --run --check`.
use rustral::frontend::nn::{
    Activation, Dropout, Gpt2Block, LayerNorm, Linear, Mlp, MultiHeadAttention, QkvProjection,
};
use rustral::prelude::*;

pub fn model(ctx: &mut ForwardCtx) -> rustral::Result<Vec<Tensor>> {
    let (d, heads) = (768, 12);
    let block = Gpt2Block {
        ln_1: LayerNorm::new("ln_1", d, 1e-5),
        attn: MultiHeadAttention {
            name: "attn".into(),
            n_heads: heads,
            n_kv_heads: heads,
            head_dim: d / heads,
            qkv: QkvProjection::Fused(Linear::conv1d("c_attn", d, 3 * d)),
            out: Linear::conv1d("c_proj", d, d),
            rope: None,
            causal: true,
            divide_scores: true,
            dropout: Dropout { p: 0.0 },
        },
        ln_2: LayerNorm::new("ln_2", d, 1e-5),
        mlp: Mlp {
            name: "mlp".into(),
            up: Linear::conv1d("c_fc", d, 4 * d),
            act: Activation::GeluTanh,
            down: Linear::conv1d("c_proj", 4 * d, d),
        },
        dropout: Dropout { p: 0.0 },
    };
    let x = ctx.input("x", &[Dim::sym("batch"), Dim::sym("seq"), Dim::fixed(d)], DType::F32)?;
    Ok(vec![ctx.scope("h.0", |ctx| block.forward(ctx, &x))?])
}
