// A model file: LayerNorm written by hand from primitives (mean, variance, rsqrt, scale and
// shift). At -O2 the passes recognise it and fuse it into one `layer_norm` kernel:
// `rustral-compile examples/models/layer_norm.rs --emit opt-ir`.
use rustral::prelude::*;

pub fn model(ctx: &mut ForwardCtx) -> rustral::Result<Vec<Tensor>> {
    let d = 64;
    let x = ctx.input("x", &[Dim::sym("batch"), Dim::sym("seq"), Dim::fixed(d)], DType::F32)?;
    let gamma = ctx.param("ln.weight", &[Dim::fixed(d)], Init::Ones)?;
    let beta = ctx.param("ln.bias", &[Dim::fixed(d)], Init::Zeros)?;
    let mean = x.mean(&[-1], true)?;
    let centred = x.sub(&mean)?;
    let var = centred.square()?.mean(&[-1], true)?;
    let normed = centred.mul(&var.add_scalar(1e-5)?.rsqrt()?)?;
    Ok(vec![normed.mul(&gamma)?.add(&beta)?])
}
