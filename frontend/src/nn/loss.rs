//! Losses.

use crate::{Dim, ForwardCtx, Result, Tensor};

/// Mean cross-entropy of `logits[..., classes]` against integer `targets[...]`:
/// `mean(-log_softmax(logits)[target])`, the target picked by a one-hot mask built from iota.
/// Traced as those primitives; the `fuse-cross-entropy` pass turns each row's loss into one
/// `cross_entropy` op whose gradient is `softmax - onehot`.
#[track_caller]
pub fn cross_entropy(ctx: &mut ForwardCtx, logits: &Tensor, targets: &Tensor) -> Result<Tensor> {
    super::called_here(|| -> Result<Tensor> {
        ctx.scope("cross_entropy", |ctx| {
            let logp = logits.log_softmax(-1)?;
            let mut dims = logits.dims().to_vec();
            let classes = ctx.iota(&dims, dims.len() - 1, targets.dtype())?;
            dims.pop();
            dims.push(Dim::fixed(1));
            let onehot = classes.eq(&targets.reshape(&dims)?)?.cast(logits.dtype())?;
            let nll = logp.mul(&onehot)?.sum(&[-1], false)?.neg()?;
            let all: Vec<isize> = (0..nll.rank() as isize).collect();
            if all.is_empty() { Ok(nll) } else { nll.mean(&all, false) }
        })
    })
}
