//! Row kernels: LayerNorm and RMSNorm, softmax, reductions, cross-entropy; rows in parallel.

#[allow(clippy::wildcard_imports)]
use super::*;

/// LayerNorm (`center`) or RMSNorm over rows of `width`, in parallel over rows; each row is
/// read twice (statistics, then normalise) and written once.
pub(super) fn norm(x: &[f32], width: usize, g: Option<&[f32]>, b: Option<&[f32]>, eps: f32, center: bool) -> Vec<f32> {
    if width == 0 {
        return vec![0.0f32; x.len()];
    }
    let rows_per_task = (BLOCK / width).max(1) * width;
    filled(x.len(), rows_per_task, |start, o| norm_rows(o, &x[start..start + o.len()], width, g, b, eps, center))
}

simd::multiversion! {
    /// Normalise consecutive rows of `width`.
    fn norm_rows(
        o: &mut [MaybeUninit<f32>],
        x: &[f32],
        width: usize,
        g: Option<&[f32]>,
        b: Option<&[f32]>,
        eps: f32,
        center: bool,
    ) {
        for (o, row) in o.chunks_mut(width).zip(x.chunks(width)) {
            let n = width as f32;
            let mean = if center { simd::sum(row) / n } else { 0.0 };
            let var = simd::sum_sq_dev(row, mean) / n;
            let inv = 1.0 / (var + eps).sqrt();
            match (g, b) {
                (Some(g), Some(b)) => o
                    .iter_mut()
                    .zip(row)
                    .zip(g.iter().zip(b))
                    .for_each(|((d, &v), (&gg, &bb))| _ = d.write((v - mean) * inv * gg + bb)),
                // `+ 0.0` as the IR defines it (an absent beta is 0): -0 becomes +0.
                (Some(g), None) => {
                    o.iter_mut().zip(row).zip(g).for_each(|((d, &v), &gg)| _ = d.write((v - mean) * inv * gg + 0.0))
                }
                _ => o.iter_mut().zip(row).for_each(|(d, &v)| _ = d.write((v - mean) * inv + 0.0)),
            }
        }
    }
}

/// Softmax over rows of `width`, in parallel over rows.
pub(super) fn softmax(x: &[f32], width: usize) -> Vec<f32> {
    if width == 0 {
        return vec![0.0f32; x.len()];
    }
    let rows_per_task = (BLOCK / width).max(1) * width;
    filled(x.len(), rows_per_task, |start, o| softmax_rows(o, &x[start..start + o.len()], width))
}

simd::multiversion! {
    /// Softmax of consecutive rows of `width`.
    fn softmax_rows(o: &mut [MaybeUninit<f32>], x: &[f32], width: usize) {
        // A `for` loop, not `for_each`: the latter's `fold` is a separate function that is
        // not compiled with this copy's target features.
        for (o, row) in o.chunks_mut(width).zip(x.chunks(width)) {
            softmax_row::<FMA>(row, o);
        }
    }
}

#[inline(always)]
pub(super) fn softmax_in_place<const FMA: bool>(row: &mut [f32]) {
    let max = simd::max_for_shift(row);
    let inv = 1.0 / simd::exp_shifted_in_place::<FMA>(row, max);
    row.iter_mut().for_each(|v| *v *= inv);
}

/// Softmax of `row` into `o` (one length): the maximum, then the exponentials written and
/// summed in one pass, then the scaling.
#[inline(always)]
pub(super) fn softmax_row<const FMA: bool>(row: &[f32], o: &mut [MaybeUninit<f32>]) {
    let max = simd::max_for_shift(row);
    let sum = simd::exp_shifted_into::<FMA>(row, max, o);
    // SAFETY: `exp_shifted_into` wrote every value of `o` (`o` and `row` have one length).
    let o = unsafe { &mut *(o as *mut [MaybeUninit<f32>] as *mut [f32]) };
    let inv = 1.0 / sum;
    o.iter_mut().for_each(|d| *d *= inv);
}

/// Reduce rows of `width` into `rows` values (an empty row gives the reduction's identity).
pub(super) fn reduce_last(x: &[f32], width: usize, r: ReduceOp, rows: usize) -> Vec<f32> {
    if width == 0 {
        let fill = match r {
            ReduceOp::Sum => 0.0,
            ReduceOp::Mean => f32::NAN,
            ReduceOp::Max => f32::NEG_INFINITY,
            ReduceOp::Min => f32::INFINITY,
        };
        return vec![fill; rows];
    }
    x.par_chunks(width)
        .map(|row| match r {
            ReduceOp::Sum => simd::sum(row),
            ReduceOp::Mean => simd::sum(row) / width as f32,
            ReduceOp::Max => simd::max(row),
            ReduceOp::Min => {
                row.iter().fold(f32::INFINITY, |m, &v| if v.is_nan() || m.is_nan() { f32::NAN } else { m.min(v) })
            }
        })
        .collect()
}

/// Reduce `x[outer, len, inner]` over its middle axis, a whole inner row at a time (so the
/// combining loop runs over contiguous memory and vectorises).
pub(super) fn reduce_middle(x: &[f32], outer: usize, len: usize, inner: usize, r: ReduceOp) -> Vec<f32> {
    let identity = match r {
        ReduceOp::Sum => 0.0,
        ReduceOp::Mean => f32::NAN,
        ReduceOp::Max => f32::NEG_INFINITY,
        ReduceOp::Min => f32::INFINITY,
    };
    let mut out = vec![identity; outer * inner];
    if len == 0 || out.is_empty() {
        return out;
    }
    let nan_aware =
        |a: f32, b: f32, pick: fn(f32, f32) -> f32| if a.is_nan() || b.is_nan() { f32::NAN } else { pick(a, b) };
    out.par_chunks_mut(inner).enumerate().for_each(|(o, dst)| {
        let block = &x[o * len * inner..(o + 1) * len * inner];
        dst.copy_from_slice(&block[..inner]);
        for row in block.chunks_exact(inner).skip(1) {
            match r {
                ReduceOp::Sum | ReduceOp::Mean => {
                    for (d, &v) in dst.iter_mut().zip(row) {
                        *d += v;
                    }
                }
                ReduceOp::Max => {
                    for (d, &v) in dst.iter_mut().zip(row) {
                        *d = nan_aware(*d, v, f32::max);
                    }
                }
                ReduceOp::Min => {
                    for (d, &v) in dst.iter_mut().zip(row) {
                        *d = nan_aware(*d, v, f32::min);
                    }
                }
            }
        }
        if r == ReduceOp::Mean {
            let inv = 1.0 / len as f32;
            for d in dst.iter_mut() {
                *d *= inv;
            }
        }
    });
    out
}

/// Each row's `max + log(sum(exp(x - max))) - x[target]`, rows in parallel; None (the
/// reference reports it) when a target is out of range.
pub(super) fn cross_entropy(x: (&[f32], &[usize]), targets: &Storage) -> Option<Vec<f32>> {
    let Storage::Wide(targets) = targets else { return None };
    let width = *x.1.last()?;
    if width == 0 || targets.data.iter().any(|&t| !(t >= 0.0 && t < width as f64)) {
        return None; // no classes: the reference gives the empty result or the error
    }
    let row = |(row, &t): (&[f32], &f64)| log_sum_exp(row) - row[t as usize];
    Some(x.0.par_chunks(width).zip(targets.data.as_slice()?.par_iter()).map(row).collect())
}

simd::multiversion! {
    /// `ln sum e^x` of a row, shifted by its maximum.
    fn log_sum_exp(row: &[f32]) -> f32 {
        let max = simd::max_for_shift(row);
        max + simd::sum_exp_shifted::<FMA>(row, max).ln()
    }
}
