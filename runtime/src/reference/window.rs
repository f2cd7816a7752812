//! The sliding-window ops in f64, written as their declarations read: every output element
//! visits its window's taps through `Window2d::source`, with no im2col and no reordering, so
//! that each target's faster kernel is checked against the definition itself.

use ndarray::{ArrayD, IxDyn};
use rustral_ir::{Op, Window2d};

type R<T> = Result<T, String>;

/// Evaluate `conv2d`, `max_pool2d`, `avg_pool2d`, `unfold` or `fold`.
pub(super) fn eval(op: &Op, args: &[&ArrayD<f64>], out_shape: &[usize]) -> R<ArrayD<f64>> {
    let x = args[0].as_standard_layout();
    let x = x.as_slice().ok_or("a standard-layout array has a slice")?;
    let xs = args[0].shape();
    let kernel = match op {
        Op::Conv2d { .. } => Some([args[1].shape()[2], args[1].shape()[3]]),
        _ => None,
    };
    let win = op.window2d(kernel).ok_or_else(|| format!("{} has no window geometry", op.name()))?;
    let mut out = ArrayD::zeros(IxDyn(out_shape));
    let data = out.as_slice_mut().ok_or("a new array is contiguous")?;
    match op {
        Op::Conv2d { groups, .. } => {
            let w = args[1].as_standard_layout();
            let bias = args.get(2).map(|b| b.iter().copied().collect::<Vec<f64>>());
            conv2d(
                x,
                xs,
                w.as_slice().ok_or("weights are contiguous")?,
                bias.as_deref(),
                &win,
                *groups,
                out_shape,
                data,
            )
        }
        Op::MaxPool2d { .. } | Op::AvgPool2d { .. } => {
            let max = matches!(op, Op::MaxPool2d { .. });
            for_nchw(out_shape, data, |n, c, y, xo| {
                let mut acc = if max { f64::NEG_INFINITY } else { 0.0 };
                for (_, v) in window_values(x, xs, &win, n, c, y, xo) {
                    // NaN wins a max, as in PyTorch.
                    acc = if !max {
                        acc + v
                    } else if v.is_nan() || v > acc {
                        v
                    } else {
                        acc
                    };
                }
                if max { acc } else { acc / win.taps() as f64 }
            })
        }
        Op::Unfold { .. } => {
            let (c, ow) = (xs[1], win.out_len(1, xs[3])?);
            let (rows, blocks) = (out_shape[1], out_shape[2]);
            for (i, o) in data.iter_mut().enumerate() {
                let (n, row, l) = (i / (rows * blocks), (i / blocks) % rows, i % blocks);
                let (k, tap) = (row / win.taps(), row % win.taps());
                let (ta, tb) = (tap / win.kernel[1], tap % win.kernel[1]);
                debug_assert!(k < c);
                let sy = win.source(0, l / ow, ta, xs[2]);
                let sx = win.source(1, l % ow, tb, xs[3]);
                if let (Some(sy), Some(sx)) = (sy, sx) {
                    *o = x[((n * c + k) * xs[2] + sy) * xs[3] + sx];
                }
            }
        }
        Op::Fold { .. } => {
            // The adjoint of unfold: every column element added where unfold read it.
            let (c, h, w) = (out_shape[1], out_shape[2], out_shape[3]);
            let (oh, ow) = (win.out_len(0, h)?, win.out_len(1, w)?);
            let (rows, blocks) = (xs[1], xs[2]);
            debug_assert_eq!(blocks, oh * ow);
            for (i, &v) in x.iter().enumerate() {
                let (n, row, l) = (i / (rows * blocks), (i / blocks) % rows, i % blocks);
                let (k, tap) = (row / win.taps(), row % win.taps());
                let (ta, tb) = (tap / win.kernel[1], tap % win.kernel[1]);
                if let (Some(sy), Some(sx)) = (win.source(0, l / ow, ta, h), win.source(1, l % ow, tb, w)) {
                    data[((n * c + k) * h + sy) * w + sx] += v;
                }
            }
        }
        other => return Err(format!("{} is not a sliding-window op", other.name())),
    }
    Ok(out)
}

/// Fill an NCHW output with `f(n, c, y, x)`.
fn for_nchw(shape: &[usize], data: &mut [f64], f: impl Fn(usize, usize, usize, usize) -> f64) {
    let [_, c, h, w] = shape[..] else { return };
    for (i, o) in data.iter_mut().enumerate() {
        *o = f(i / (c * h * w), (i / (h * w)) % c, (i / w) % h, i % w);
    }
}

/// The in-range values of window (`y`, `x`) of channel `c` of batch `n`, with their tap index.
fn window_values<'a>(
    x: &'a [f64],
    xs: &'a [usize],
    win: &'a Window2d,
    n: usize,
    c: usize,
    y: usize,
    xo: usize,
) -> impl Iterator<Item = (usize, f64)> + 'a {
    (0..win.kernel[0]).flat_map(move |ta| {
        (0..win.kernel[1]).filter_map(move |tb| {
            let sy = win.source(0, y, ta, xs[2])?;
            let sx = win.source(1, xo, tb, xs[3])?;
            Some((ta * win.kernel[1] + tb, x[((n * xs[1] + c) * xs[2] + sy) * xs[3] + sx]))
        })
    })
}

#[allow(clippy::too_many_arguments)]
fn conv2d(
    x: &[f64],
    xs: &[usize],
    w: &[f64],
    bias: Option<&[f64]>,
    win: &Window2d,
    groups: usize,
    out_shape: &[usize],
    data: &mut [f64],
) {
    let (cg, og) = (xs[1] / groups, out_shape[1] / groups);
    let taps = win.taps();
    for_nchw(out_shape, data, |n, f, y, xo| {
        let first = (f / og) * cg;
        let mut acc = bias.map_or(0.0, |b| b[f]);
        for k in 0..cg {
            for (tap, v) in window_values(x, xs, win, n, first + k, y, xo) {
                acc += v * w[(f * cg + k) * taps + tap];
            }
        }
        acc
    });
}
