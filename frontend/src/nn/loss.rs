//! Losses.

use crate::{Dim, ForwardCtx, Result, Tensor};

/// Mean cross-entropy of `logits[..., classes]` against integer `targets[...]`:
/// `-mean(log_softmax(logits)[target])`, the target picked by a one-hot mask built from iota.
pub fn cross_entropy(ctx: &mut ForwardCtx, logits: &Tensor, targets: &Tensor) -> Result<Tensor> {
    ctx.scope("cross_entropy", |ctx| {
        let logp = logits.log_softmax(-1)?;
        let mut dims = logits.dims().to_vec();
        let classes = ctx.iota(&dims, dims.len() - 1, targets.dtype())?;
        dims.pop();
        dims.push(Dim::fixed(1));
        let onehot = classes.eq(&targets.reshape(&dims)?)?.cast(logits.dtype())?;
        let picked = logp.mul(&onehot)?.sum(&[-1], false)?;
        let all: Vec<isize> = (0..picked.rank() as isize).collect();
        let mean = if all.is_empty() { picked } else { picked.mean(&all, false)? };
        mean.neg()
    })
}
