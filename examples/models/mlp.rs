// A model file (the frontend's contract, exactly as a user writes it): a one-layer
// perceptron, tanh, then each row centred and doubled. `rustral-compile examples/models/mlp.rs`.
use rustral::prelude::*;

pub fn model(ctx: &mut ForwardCtx) -> rustral::Result<Vec<Tensor>> {
    let x = ctx.input("x", &[Dim::sym("batch"), Dim::fixed(8)], DType::F32)?;
    let w = ctx.param("w", &[Dim::fixed(8), Dim::fixed(4)], Init::Normal { std: 0.1 })?;
    let b = ctx.param("b", &[Dim::fixed(4)], Init::Zeros)?;
    let h = x.matmul(&w)?.add(&b)?.tanh()?;
    let m = h.mean(&[-1], true)?;
    Ok(vec![h.sub(&m)?.mul_scalar(2.0)?])
}
