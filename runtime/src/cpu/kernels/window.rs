//! Sliding-window kernels over NCHW f32 tensors. Convolution is im2col and the `gemm`
//! crate's GEMM per image and group (`out[g] = w[g] @ cols[g]`, bias accumulated onto), with
//! no im2col at all for a 1x1 stride-1 unpadded convolution, whose columns are the image
//! itself. Pooling, `unfold` and `fold` are direct loops, planes in parallel.

#[allow(clippy::wildcard_imports)]
use super::*;
use matmul::{View, gemm_into};
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
                for y in 0..oh {
                    let line = &mut dst[y * ow..(y + 1) * ow];
                    match win.source(0, y, ta, h) {
                        None => line.fill(0.0),
                        Some(sy) => {
                            for (xo, d) in line.iter_mut().enumerate() {
                                *d = win.source(1, xo, tb, w).map_or(0.0, |sx| src[sy * w + sx]);
                            }
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
    let image = |i: usize, dst: &mut [f32], par: gemm::Parallelism| -> bool {
        let mut cols = if direct { Vec::new() } else { vec![0.0f32; depth * blocks] };
        (0..groups).all(|g| {
            let plane = &x[(i * c + g * cg) * h * wd..(i * c + (g + 1) * cg) * h * wd];
            let rhs_data: &[f32] = if direct {
                plane
            } else {
                im2col(plane, [h, wd], cg, win, &mut cols);
                &cols
            };
            let lhs = View { data: &w[g * og * depth..(g + 1) * og * depth], rows: og, cols: depth, rs: depth, cs: 1 };
            let rhs = View { data: rhs_data, rows: depth, cols: blocks, rs: blocks, cs: 1 };
            gemm_into(&mut dst[g * og * blocks..(g + 1) * og * blocks], blocks, lhs, rhs, 1.0, true, par)
        }) && {
            // The activation on the image's output while it is in cache.
            matmul::apply_epilogue(dst, act);
            true
        }
    };
    let threads = rayon::current_num_threads();
    let fits = if n >= threads || threads == 1 {
        result.par_chunks_mut(o * blocks).enumerate().all(|(i, dst)| image(i, dst, gemm::Parallelism::None))
    } else {
        result.chunks_mut(o * blocks).enumerate().all(|(i, dst)| image(i, dst, gemm::Parallelism::Rayon(threads)))
    };
    fits.then_some(result)
}

fn pool(x: &[f32], xs: &[usize], win: &Window2d, out: &[usize], max: bool) -> Vec<f32> {
    let (h, w, oh, ow) = (xs[2], xs[3], out[2], out[3]);
    let mut result = vec![0.0f32; out.iter().product()];
    let divisor = win.taps() as f32;
    result.par_chunks_mut((oh * ow).max(1)).enumerate().for_each(|(p, dst)| {
        let src = &x[p * h * w..(p + 1) * h * w];
        for y in 0..oh {
            for xo in 0..ow {
                let mut acc = if max { f32::NEG_INFINITY } else { 0.0 };
                for ta in 0..win.kernel[0] {
                    let Some(sy) = win.source(0, y, ta, h) else { continue };
                    for tb in 0..win.kernel[1] {
                        let Some(sx) = win.source(1, xo, tb, w) else { continue };
                        let v = src[sy * w + sx];
                        acc = if !max {
                            acc + v
                        } else if v.is_nan() || v > acc {
                            v
                        } else {
                            acc
                        };
                    }
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
