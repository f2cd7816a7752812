//! Dropout: the identity in inference (no nodes at all), and in training a mask drawn from a
//! `random_uniform` whose seed the context derives from the trace seed.

use super::Module;
use crate::{ForwardCtx, Mode, Result, Tensor};

/// Zero each element with probability `p` and scale the rest by `1 / (1 - p)`.
#[derive(Clone, Copy, Debug)]
pub struct Dropout {
    /// Drop probability in `[0, 1)`.
    pub p: f64,
}

impl Module for Dropout {
    #[track_caller]
    fn forward(&self, ctx: &mut ForwardCtx, x: &Tensor) -> Result<Tensor> {
        super::called_here(|| -> Result<Tensor> {
            if !(0.0..1.0).contains(&self.p) {
                let message = format!("drop probability {} is not in [0, 1)", self.p);
                return Err(crate::Error::Argument { op: "dropout".into(), path: ctx.path(), message });
            }
            if ctx.mode() == Mode::Inference || self.p == 0.0 {
                return Ok(x.clone());
            }
            ctx.scope("dropout", |ctx| {
                let u = ctx.random_uniform(x.dims(), x.dtype())?;
                let keep = u.ge(&ctx.scalar(self.p, x.dtype())?)?;
                let zero = ctx.scalar(0.0, x.dtype())?;
                keep.select(&x.mul_scalar(1.0 / (1.0 - self.p))?, &zero)
            })
        })
    }
}
