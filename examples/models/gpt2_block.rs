// A model file: one GPT-2-small block (pre-LayerNorm, causal self-attention, GELU MLP,
// residuals) from Rustral's GPT-2 config:
// `rustral-compile examples/models/gpt2_block.rs --shape batch=2 --shape seq=32 --run --check`.
use rustral::models::Gpt2Config;
use rustral::prelude::*;

pub fn model(ctx: &mut ForwardCtx) -> rustral::Result<Vec<Tensor>> {
    let block = Gpt2Config::small(1).block()?;
    let x = ctx.input("x", &[Dim::sym("batch"), Dim::sym("seq"), Dim::fixed(768)], DType::F32)?;
    Ok(vec![ctx.scope("h.0", |ctx| block.forward(ctx, &x))?])
}
