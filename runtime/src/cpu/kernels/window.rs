//! Sliding-window kernels over NCHW f32 tensors. Convolution is im2col and the `gemm`
//! crate's GEMM per image and group (`out[g] = w[g] @ cols[g]`, bias accumulated onto), with
//! no im2col at all for a 1x1 stride-1 unpadded convolution, whose columns are the image
//! itself. Pooling, `unfold` and `fold` are direct loops, planes in parallel.

#[allow(clippy::wildcard_imports)]
use super::*;
use matmul::{View, gemm_into_on};
use rustral_ir::Window2d;

/// Run a sliding-window op on f32 operands; None when a shape is not the NCHW it needs.
pub(super) fn window(op: &Op, args: &[(&[f32], &[usize])], out: &[usize]) -> Option<Vec<f32>> {
    let (x, xs) = args[0];
    let kernel = match op {
        Op::Conv2d { .. } | Op::Conv2dEpilogue { .. } => Some([*args[1].1.get(2)?, *args[1].1.get(3)?]),
        _ => None,
    };
    let win = op.window2d(kernel)?;
    match op {
        Op::Conv2d { groups, .. } => {
            conv2d(x, xs, args[1].0, args.get(2).map(|b| b.0), &win, *groups, Activation::None, out)
        }
        Op::Conv2dEpilogue { groups, activation, .. } => {
            conv2d(x, xs, args[1].0, args.get(2).map(|b| b.0), &win, *groups, *activation, out)
        }
        Op::MaxPool2d { .. } => Some(pool(x, xs, &win, out, true)),
        Op::AvgPool2d { .. } => Some(pool(x, xs, &win, out, false)),
        Op::Unfold { .. } => Some(unfold(x, xs, &win, out)),
        Op::Fold { .. } => Some(fold(x, xs, &win, out)),
        _ => None,
    }
}

/// `cols[(k * taps + tap) * blocks + window]` of one image's channels `channels`, each
/// `[h, w]` (im2col).
fn im2col(plane: &[f32], [h, w]: [usize; 2], channels: usize, win: &Window2d, cols: &mut [f32]) {
    let (oh, ow) = (win.out_len(0, h).unwrap_or(0), win.out_len(1, w).unwrap_or(0));
    let blocks = oh * ow;
    for k in 0..channels {
        let src = &plane[k * h * w..(k + 1) * h * w];
        for ta in 0..win.kernel[0] {
            for tb in 0..win.kernel[1] {
                let row = ((k * win.kernel[0] + ta) * win.kernel[1] + tb) * blocks;
                let dst = &mut cols[row..row + blocks];
                // The columns whose tap lies inside, found once per tap: the rest is padding.
                let xs = win.outputs_inside(1, tb, w, ow);
                let (step, first) =
                    (win.stride[1], (xs.start * win.stride[1] + tb * win.dilation[1]).wrapping_sub(win.padding[1]));
                for y in 0..oh {
                    let line = &mut dst[y * ow..(y + 1) * ow];
                    let Some(sy) = win.source(0, y, ta, h) else {
                        line.fill(0.0);
                        continue;
                    };
                    line[..xs.start].fill(0.0);
                    line[xs.end..].fill(0.0);
                    let inside = &mut line[xs.clone()];
                    let from = &src[sy * w..(sy + 1) * w];
                    if inside.is_empty() {
                        continue;
                    }
                    if step == 1 {
                        inside.copy_from_slice(&from[first..first + inside.len()]);
                    } else {
                        for (j, d) in inside.iter_mut().enumerate() {
                            *d = from[first + j * step];
                        }
                    }
                }
            }
        }
    }
}

#[allow(clippy::too_many_arguments)]
fn conv2d(
    x: &[f32],
    xs: &[usize],
    w: &[f32],
    bias: Option<&[f32]>,
    win: &Window2d,
    groups: usize,
    act: Activation,
    out: &[usize],
) -> Option<Vec<f32>> {
    let (&[n, c, h, wd], &[_, o, oh, ow]) = (xs, out) else { return None };
    let (cg, og, blocks) = (c / groups, o / groups, oh * ow);
    let depth = cg * win.taps();
    let direct = win.kernel == [1, 1] && win.stride == [1, 1] && win.padding == [0, 0];
    let mut result = vec![0.0f32; n * o * blocks];
    if result.is_empty() {
        return Some(result);
    }
    if let Some(b) = bias {
        for (f, chunk) in result.chunks_mut(blocks).enumerate() {
            chunk.fill(b[f % o]);
        }
    }
    // `cols` is a worker's im2col buffer, kept across its images: a fresh one per image costs
    // a page fault per 4 KiB (megabytes an image).
    let image = |i: usize, dst: &mut [f32], cols: &mut Vec<f32>, par: gemm::Parallelism| -> bool {
        if !direct && cols.len() < depth * blocks {
            cols.resize(depth * blocks, 0.0);
        }
        (0..groups).all(|g| {
            let plane = &x[(i * c + g * cg) * h * wd..(i * c + (g + 1) * cg) * h * wd];
            let rhs_data: &[f32] = if direct {
                plane
            } else {
                im2col(plane, [h, wd], cg, win, cols);
                &cols[..depth * blocks]
            };
            let lhs = View { data: &w[g * og * depth..(g + 1) * og * depth], rows: og, cols: depth, rs: depth, cs: 1 };
            let rhs = View { data: rhs_data, rows: depth, cols: blocks, rs: blocks, cs: 1 };
            // Always the `gemm` crate: these im2col products (few rows, many columns) ran slower
            // on MKL (ResNet-18 at 1 thread on an Emerald Rapids core: 462-484 against 435-444
            // ms, back to back).
            let out = &mut dst[g * og * blocks..(g + 1) * og * blocks];
            gemm_into_on(out, blocks, lhs, rhs, 1.0, true, par, false)
        }) && {
            // The activation on the image's output while it is in cache.
            matmul::apply_epilogue(dst, act);
            true
        }
    };
    let threads = rayon::current_num_threads();
    let fits = if n >= threads || threads == 1 {
        result
            .par_chunks_mut(o * blocks)
            .enumerate()
            .map_init(Vec::new, |cols, (i, dst)| image(i, dst, cols, gemm::Parallelism::None))
            .all(|done| done)
    } else {
        let mut cols = Vec::new();
        result
            .chunks_mut(o * blocks)
            .enumerate()
            .all(|(i, dst)| image(i, dst, &mut cols, gemm::Parallelism::Rayon(threads)))
    };
    fits.then_some(result)
}

/// `a` or `b`, whichever is larger, NaN winning (PyTorch's max pooling).
#[inline(always)]
fn nan_max(a: f32, b: f32) -> f32 {
    if b > a || b.is_nan() { b } else { a }
}

/// Pooling, separably: per output row, the window's input rows are combined into one row
/// (contiguous, so it vectorises), and each output of the row combines its taps of that row.
/// Both max and sum are associative, so the order changes nothing but NaN-free rounding of
/// the sum.
fn pool(x: &[f32], xs: &[usize], win: &Window2d, out: &[usize], max: bool) -> Vec<f32> {
    let (h, w, oh, ow) = (xs[2], xs[3], out[2], out[3]);
    let mut result = vec![0.0f32; out.iter().product()];
    let divisor = win.taps() as f32;
    // Which taps of each output row and column lie inside the image, found once.
    let rows: Vec<std::ops::Range<usize>> = (0..oh).map(|y| win.taps_inside(0, y, h)).collect();
    let cols: Vec<std::ops::Range<usize>> = (0..ow).map(|x| win.taps_inside(1, x, w)).collect();
    let (s, d, p) = (win.stride, win.dilation, win.padding);
    let empty = if max { f32::NEG_INFINITY } else { 0.0 };
    result.par_chunks_mut((oh * ow).max(1)).enumerate().for_each(|(plane, dst)| {
        let src = &x[plane * h * w..(plane + 1) * h * w];
        let mut line = vec![empty; w];
        for (y, taps_y) in rows.iter().enumerate() {
            line.fill(empty);
            for ta in taps_y.clone() {
                let row = &src[(y * s[0] + ta * d[0] - p[0]) * w..][..w];
                if max {
                    line.iter_mut().zip(row).for_each(|(a, &b)| *a = nan_max(*a, b));
                } else {
                    line.iter_mut().zip(row).for_each(|(a, &b)| *a += b);
                }
            }
            for (xo, taps_x) in cols.iter().enumerate() {
                let x0 = (xo * s[1]).wrapping_sub(p[1]);
                let mut acc = empty;
                for tb in taps_x.clone() {
                    let v = line[x0.wrapping_add(tb * d[1])];
                    acc = if max { nan_max(acc, v) } else { acc + v };
                }
                dst[y * ow + xo] = if max { acc } else { acc / divisor };
            }
        }
    });
    result
}

fn unfold(x: &[f32], xs: &[usize], win: &Window2d, out: &[usize]) -> Vec<f32> {
    let (c, h, w) = (xs[1], xs[2], xs[3]);
    let per_image = out[1] * out[2];
    let mut result = vec![0.0f32; out.iter().product()];
    result.par_chunks_mut(per_image.max(1)).enumerate().for_each(|(i, dst)| {
        im2col(&x[i * c * h * w..(i + 1) * c * h * w], [h, w], c, win, dst);
    });
    result
}

fn fold(x: &[f32], xs: &[usize], win: &Window2d, out: &[usize]) -> Vec<f32> {
    let (h, w) = (out[2], out[3]);
    let blocks = xs[2];
    let (oh, ow) = (win.out_len(0, h).unwrap_or(0), win.out_len(1, w).unwrap_or(0));
    let taps = win.taps();
    let mut result = vec![0.0f32; out.iter().product()];
    // Plane (image, channel) p gathers the `taps` rows of channel p, which no other plane reads.
    result.par_chunks_mut((h * w).max(1)).enumerate().for_each(|(p, dst)| {
        let rows = &x[p * taps * blocks..(p + 1) * taps * blocks];
        for ta in 0..win.kernel[0] {
            for tb in 0..win.kernel[1] {
                let row = &rows[(ta * win.kernel[1] + tb) * blocks..][..blocks];
                for y in 0..oh {
                    let Some(sy) = win.source(0, y, ta, h) else { continue };
                    for xo in 0..ow {
                        if let Some(sx) = win.source(1, xo, tb, w) {
                            dst[sy * w + sx] += row[y * ow + xo];
                        }
                    }
                }
            }
        }
    });
    result
}
