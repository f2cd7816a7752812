//! Sliding-window kernels over NCHW f32 tensors. Convolution is im2col and the `gemm`
//! crate's GEMM per image and group (`out[g] = w[g] @ cols[g]`, bias accumulated onto), with
//! no im2col at all for a 1x1 stride-1 unpadded convolution, whose columns are the image
//! itself. Pooling, `unfold` and `fold` are direct loops, planes in parallel.

#[allow(clippy::wildcard_imports)]
use super::*;
use matmul::{View, gemm_into_on};
use rustral_ir::Window2d;
use std::ops::Range;

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
            conv2d(x, xs, args[1].0, args.get(2).map(|b| b.0), &win, *groups, Activation::None, out, BAND_VALUES)
        }
        Op::Conv2dEpilogue { groups, activation, .. } => {
            conv2d(x, xs, args[1].0, args.get(2).map(|b| b.0), &win, *groups, *activation, out, BAND_VALUES)
        }
        Op::MaxPool2d { .. } => Some(pool(x, xs, &win, out, true)),
        Op::AvgPool2d { .. } => Some(pool(x, xs, &win, out, false)),
        Op::Unfold { .. } => Some(unfold(x, xs, &win, out)),
        Op::Fold { .. } => Some(fold(x, xs, &win, out)),
        _ => None,
    }
}

/// `cols[(k * taps + tap) * blocks + window]` of one image's channels `channels`, each
/// `[h, w]`, for the windows of output rows `ys` (`blocks` of them: im2col of a band).
fn im2col(plane: &[f32], [h, w]: [usize; 2], channels: usize, win: &Window2d, ys: Range<usize>, cols: &mut [f32]) {
    let blocks = ys.len() * win.out_len(1, w).unwrap_or(0);
    let rows = win.taps() * blocks;
    for k in 0..channels {
        let (src, dst) = (&plane[k * h * w..(k + 1) * h * w], &mut cols[k * rows..(k + 1) * rows]);
        im2col_channel(src, [h, w], win, ys.clone(), dst, blocks, 0);
    }
}

simd::multiversion! {
    /// One channel's im2col rows for the windows of output rows `ys`: tap `t`'s windows at
    /// `rows[t * ld + first..][..ys.len() * ow]`, so that the rows of several images can sit side by
    /// side in one matrix of row stride `ld`.
    fn im2col_channel(
        src: &[f32],
        hw: [usize; 2],
        win: &Window2d,
        ys: Range<usize>,
        rows: &mut [f32],
        ld: usize,
        first_col: usize,
    ) {
        let [h, w] = hw;
        let ow = win.out_len(1, w).unwrap_or(0);
        let blocks = ys.len() * ow;
        for ta in 0..win.kernel[0] {
            for tb in 0..win.kernel[1] {
                let row = (ta * win.kernel[1] + tb) * ld + first_col;
                let dst = &mut rows[row..row + blocks];
                // The columns whose tap lies inside, found once per tap: the rest is padding.
                let xs = win.outputs_inside(1, tb, w, ow);
                let (step, first) =
                    (win.stride[1], (xs.start * win.stride[1] + tb * win.dilation[1]).wrapping_sub(win.padding[1]));
                for y in ys.clone() {
                    let line = &mut dst[(y - ys.start) * ow..(y - ys.start + 1) * ow];
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
                        strided_copy(inside, &from[first..], step);
                    }
                }
            }
        }
    }
}

/// `dst[j] = src[j * step]` (while `src` lasts): a stride-2 window (ResNet's stem, its
/// downsampling convolutions) by vector shuffles; other strides by an iterator that needs no
/// bounds check per element.
#[inline(always)]
fn strided_copy(dst: &mut [f32], src: &[f32], step: usize) {
    if step == 2 {
        // Sixteen outputs from 32 inputs a step, fixed sizes the compiler vectorises whole; a
        // loop of unknown length left most of a 112-wide row to its scalar remainder.
        let whole = (dst.len() / 16).min(src.len() / 32);
        let (head, tail) = dst.split_at_mut(whole * 16);
        for (d, s) in head.chunks_exact_mut(16).zip(src.chunks_exact(32)) {
            d.iter_mut().enumerate().for_each(|(i, d)| *d = s[2 * i]);
        }
        tail.iter_mut().zip(src[whole * 32..].chunks(2)).for_each(|(d, pair)| *d = pair[0]);
    } else {
        dst.iter_mut().zip(src.iter().step_by(step)).for_each(|(d, &s)| *d = s);
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
    band_values: usize,
) -> Option<Vec<f32>> {
    let (&[n, c, h, wd], &[_, o, oh, ow]) = (xs, out) else { return None };
    let (cg, og, blocks) = (c / groups, o / groups, oh * ow);
    let depth = cg * win.taps();
    let same = |size: usize, axis: usize| (size + 2 * win.padding[axis]).checked_sub(2);
    if winograd::applies(win, groups, c, o) && same(h, 0) == Some(oh) && same(wd, 1) == Some(ow) {
        return winograd::conv2d(x, [n, c, h, wd], w, bias, win.padding, act, [o, oh, ow]);
    }
    let direct = win.kernel == [1, 1] && win.stride == [1, 1] && win.padding == [0, 0];
    // Output rows per im2col band: as many as keep the band's columns within `band_values`.
    let band = if direct { oh } else { (band_values / (depth * ow).max(1)).clamp(1, oh.max(1)) };
    if n > 1 && !direct && blocks <= MERGE_BLOCKS {
        return conv2d_merged(x, [n, c, h, wd], w, bias, win, groups, act, [o, blocks], MERGE_VALUES);
    }
    let mut result = vec![0.0f32; n * o * blocks];
    if result.is_empty() {
        return Some(result);
    }
    // `cols` is a worker's im2col buffer, kept across its images: a fresh one per image costs
    // a page fault per 4 KiB (megabytes an image).
    let image = |i: usize, dst: &mut [f32], cols: &mut Vec<f32>, par: gemm::Parallelism| -> bool {
        if !direct && cols.len() < depth * band * ow {
            cols.resize(depth * band * ow, 0.0);
        }
        (0..groups).all(|g| {
            let plane = &x[(i * c + g * cg) * h * wd..(i * c + (g + 1) * cg) * h * wd];
            let lhs = View { data: &w[g * og * depth..(g + 1) * og * depth], rows: og, cols: depth, rs: depth, cs: 1 };
            (0..oh).step_by(band).all(|y0| {
                let ys = y0..(y0 + band).min(oh);
                let width = ys.len() * ow;
                // A 1x1 convolution is one band (`band == oh`): the image's planes are its columns.
                let rhs_data: &[f32] = if direct {
                    plane
                } else {
                    im2col(plane, [h, wd], cg, win, ys, cols);
                    &cols[..depth * width]
                };
                let rhs = View { data: rhs_data, rows: depth, cols: width, rs: width, cs: 1 };
                let out = &mut dst[g * og * blocks + y0 * ow..(g + 1) * og * blocks];
                // The band's bias before its product and its activation after it, on columns
                // still in cache (the bias written over the whole output first and the
                // activation over each whole image after took 7% of the stem's profile samples).
                if let Some(b) = bias {
                    for (f, row) in out.chunks_mut(blocks).enumerate() {
                        row[..width].fill(b[g * og + f]);
                    }
                }
                // Always the `gemm` crate: these im2col products (few rows, many columns) ran
                // slower on MKL (ResNet-18 at 1 thread on an Emerald Rapids core: 462-484 against
                // 435-444 ms, back to back).
                gemm_into_on(out, blocks, lhs, rhs, 1.0, bias.is_some(), par, false) && {
                    if act != Activation::None {
                        out.chunks_mut(blocks).for_each(|row| matmul::apply_epilogue(&mut row[..width], act));
                    }
                    true
                }
            })
        })
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

/// im2col values of one band of an image's output rows at most (1 MiB), so that the GEMM packs
/// columns still in cache rather than megabytes written out to memory and read back. Measured
/// on one Zen 4 core (1 MiB L2), ResNet-18 at batch 8 in three interleaved runs: 359-374 ms
/// with bands of 2^18 values, 376-530 ms without bands, 373-380 ms with 2^19; the 7x7 stem
/// (`[147, 12544]` columns an image) went from 39-64 to 37-39 ms. Bands of 2^16 lost on the
/// second stage, whose product then has too few columns a call (112).
const BAND_VALUES: usize = 1 << 18;

/// Output pixels per image at or below which a convolution's images share one GEMM: a deep
/// layer's per-image product (`[512, 4608] x [4608, 49]` in ResNet-18's last stage) has too
/// few columns for the micro-kernel and packs the whole weight once per image.
const MERGE_BLOCKS: usize = 256;

/// im2col values (16 MiB) that one merged GEMM takes at most: a batch whose columns would not
/// fit runs as several GEMMs of as many images as fit (at least one).
const MERGE_VALUES: usize = 1 << 22;

std::thread_local! {
    /// The calling thread's im2col and product buffers for `conv2d_merged`, kept across calls:
    /// fresh megabytes cost a page fault per 4 KiB on every convolution.
    static MERGE_SCRATCH: std::cell::Cell<Vec<f32>> = const { std::cell::Cell::new(Vec::new()) };
}

/// A convolution whose images share each GEMM: the im2col columns of `per` images side by side
/// (`[depth, per * blocks]`, written a channel's rows at a time in parallel), one GEMM against
/// the group's weights on the pool's threads, then each image's rows copied out of the product
/// with the bias and the activation on them. `cap` bounds the im2col values of one GEMM.
#[allow(clippy::too_many_arguments)]
fn conv2d_merged(
    x: &[f32],
    [n, c, h, wd]: [usize; 4],
    w: &[f32],
    bias: Option<&[f32]>,
    win: &Window2d,
    groups: usize,
    act: Activation,
    [o, blocks]: [usize; 2],
    cap: usize,
) -> Option<Vec<f32>> {
    let (cg, og, taps) = (c / groups, o / groups, win.taps());
    let depth = cg * taps;
    let oh = win.out_len(0, h).unwrap_or(0);
    let mut result = vec![0.0f32; n * o * blocks];
    if result.is_empty() || depth == 0 {
        // No output, or an empty contraction: the bias alone.
        for (f, chunk) in result.chunks_mut(blocks.max(1)).enumerate() {
            chunk.fill(bias.map_or(0.0, |b| b[f % o]));
        }
        matmul::apply_epilogue(&mut result, act);
        return Some(result);
    }
    let per = (cap / (depth * blocks)).clamp(1, n);
    let threads = rayon::current_num_threads();
    let par = if threads > 1 { gemm::Parallelism::Rayon(threads) } else { gemm::Parallelism::None };
    // Taken out of the cell for the call (a nested call on this thread, from a task this one
    // stole while it waited, finds the cell empty and grows its own).
    let mut buf = MERGE_SCRATCH.take();
    let mut done = true;
    for i0 in (0..n).step_by(per) {
        let imgs = per.min(n - i0);
        let ld = imgs * blocks;
        if buf.len() < (depth + og) * ld {
            buf.resize((depth + og) * ld, 0.0);
        }
        let (cols, prod) = buf.split_at_mut(depth * ld);
        let prod = &mut prod[..og * ld];
        for g in 0..groups {
            cols.par_chunks_mut(taps * ld).enumerate().for_each(|(k, rows)| {
                for i in 0..imgs {
                    let ch = (i0 + i) * c + g * cg + k;
                    im2col_channel(&x[ch * h * wd..(ch + 1) * h * wd], [h, wd], win, 0..oh, rows, ld, i * blocks);
                }
            });
            let lhs = View { data: &w[g * og * depth..(g + 1) * og * depth], rows: og, cols: depth, rs: depth, cs: 1 };
            let rhs = View { data: cols, rows: depth, cols: ld, rs: ld, cs: 1 };
            if !gemm_into_on(prod, ld, lhs, rhs, 1.0, false, par, false) {
                done = false;
                break;
            }
            let prod = &*prod;
            result[i0 * o * blocks..(i0 + imgs) * o * blocks].par_chunks_mut(o * blocks).enumerate().for_each(
                |(i, image)| {
                    let dst = &mut image[g * og * blocks..(g + 1) * og * blocks];
                    for (f, row) in dst.chunks_exact_mut(blocks).enumerate() {
                        let b = bias.map_or(0.0, |b| b[g * og + f]);
                        row.iter_mut().zip(&prod[f * ld + i * blocks..][..blocks]).for_each(|(d, &p)| *d = p + b);
                    }
                    // The activation on the image's rows while they are in cache.
                    matmul::apply_epilogue(dst, act);
                },
            );
        }
        if !done {
            break;
        }
    }
    MERGE_SCRATCH.set(buf);
    done.then_some(result)
}

/// `a` or `b`, whichever is larger, NaN winning (PyTorch's max pooling).
#[inline(always)]
fn nan_max(a: f32, b: f32) -> f32 {
    if b > a || b.is_nan() { b } else { a }
}

/// Pooling, separably: per output row, the window's input rows are combined into one row
/// (contiguous, so it vectorises), and each output of the row combines its taps of that row.
/// Both max and sum are associative, so the order changes nothing but NaN-free rounding of
/// the sum (and which NaN a max returns).
fn pool(x: &[f32], xs: &[usize], win: &Window2d, out: &[usize], max: bool) -> Vec<f32> {
    let (h, w, oh, ow) = (xs[2], xs[3], out[2], out[3]);
    let mut result = vec![0.0f32; out.iter().product()];
    // Which taps of each output row and column lie inside the image, found once.
    let rows: Vec<Range<usize>> = (0..oh).map(|y| win.taps_inside(0, y, h)).collect();
    let cols: Vec<Range<usize>> = (0..ow).map(|x| win.taps_inside(1, x, w)).collect();
    // The columns whose every tap lies inside (a contiguous run): there each output reads
    // `kernel` values at a fixed stride, a loop without per-column ranges.
    let full = |r: &Range<usize>| r.start == 0 && r.end == win.kernel[1];
    let lo = cols.iter().position(full).unwrap_or(ow);
    let hi = lo + cols[lo..].iter().take_while(|r| full(r)).count();
    let plan = Pool {
        w,
        rows: &rows,
        cols: &cols,
        interior: lo..hi,
        win,
        max,
        empty: if max { f32::NEG_INFINITY } else { 0.0 },
        divisor: win.taps() as f32,
    };
    result.par_chunks_mut((oh * ow).max(1)).enumerate().for_each_init(
        // The combined row, with `LINE_PAD` spare values so that the interior loop may read
        // whole groups of `stride` values past the last tap.
        || vec![0.0f32; w + LINE_PAD],
        |line, (plane, dst)| pool_plane(&x[plane * h * w..(plane + 1) * h * w], dst, line, &plan),
    );
    result
}

/// Spare values after a pooled row (see `pool`): the widest stride the interior loop takes.
const LINE_PAD: usize = 4;

/// What every plane of one pooling shares.
struct Pool<'a> {
    w: usize,
    rows: &'a [Range<usize>],
    cols: &'a [Range<usize>],
    interior: Range<usize>,
    win: &'a Window2d,
    max: bool,
    empty: f32,
    divisor: f32,
}

simd::multiversion! {
    /// One plane of `pool` (`src` its `h x w` input, `dst` its output rows); `line` holds at
    /// least `w + LINE_PAD` values.
    fn pool_plane(src: &[f32], dst: &mut [f32], line: &mut [f32], p: &Pool<'_>) {
        let Pool { w, rows, cols, ref interior, win, max, empty, divisor } = *p;
        let (s, d, pad) = (win.stride, win.dilation, win.padding);
        let ow = cols.len();
        for (y, (taps_y, out_row)) in rows.iter().zip(dst.chunks_mut(ow.max(1))).enumerate() {
            line.fill(empty);
            for ta in taps_y.clone() {
                let row = &src[(y * s[0] + ta * d[0] - pad[0]) * w..][..w];
                if max {
                    line.iter_mut().zip(row).for_each(|(a, &b)| *a = nan_max(*a, b));
                } else {
                    line.iter_mut().zip(row).for_each(|(a, &b)| *a += b);
                }
            }
            let inner = &mut out_row[interior.clone()];
            let base = (interior.start * s[1]).wrapping_sub(pad[1]);
            let done = match s[1] {
                1 => interior_taps::<1>(line, base, win.kernel[1], d[1], inner, max),
                2 => interior_taps::<2>(line, base, win.kernel[1], d[1], inner, max),
                3 => interior_taps::<3>(line, base, win.kernel[1], d[1], inner, max),
                4 => interior_taps::<4>(line, base, win.kernel[1], d[1], inner, max),
                _ => false,
            };
            // The columns left: the edges, or every column where the interior loop did not run.
            let left = if done { [0..interior.start, interior.end..ow] } else { [0..ow, ow..ow] };
            for xo in left.into_iter().flatten() {
                let taps_x = &cols[xo];
                let x0 = (xo * s[1]).wrapping_sub(pad[1]);
                let mut acc = empty;
                for tb in taps_x.clone() {
                    let v = line[x0.wrapping_add(tb * d[1])];
                    acc = if max { nan_max(acc, v) } else { acc + v };
                }
                out_row[xo] = acc;
            }
            if !max {
                out_row.iter_mut().for_each(|v| *v /= divisor);
            }
        }
    }
}

/// `out[i]` = the max (or sum) of `line[base + i * S + t * d]` over the taps `t < taps`, for
/// outputs whose taps all lie inside the row: tap by tap, each a loop over whole groups of
/// `S` values (one vector load per group and lane, no gather). False when `line` is too
/// short for that (the caller then takes the general loop).
#[inline(always)]
fn interior_taps<const S: usize>(line: &[f32], base: usize, taps: usize, d: usize, out: &mut [f32], max: bool) -> bool {
    let n = out.len();
    if n == 0 {
        return true;
    }
    for t in 0..taps {
        let Some(groups) = line.get(base + t * d..base + t * d + n * S) else { return false };
        let groups = groups.chunks_exact(S);
        match (t, max) {
            (0, _) => out.iter_mut().zip(groups).for_each(|(o, g)| *o = g[0]),
            (_, true) => out.iter_mut().zip(groups).for_each(|(o, g)| *o = nan_max(*o, g[0])),
            (_, false) => out.iter_mut().zip(groups).for_each(|(o, g)| *o += g[0]),
        }
    }
    true
}

fn unfold(x: &[f32], xs: &[usize], win: &Window2d, out: &[usize]) -> Vec<f32> {
    let (c, h, w) = (xs[1], xs[2], xs[3]);
    let per_image = out[1] * out[2];
    let mut result = vec![0.0f32; out.iter().product()];
    let oh = win.out_len(0, h).unwrap_or(0);
    result.par_chunks_mut(per_image.max(1)).enumerate().for_each(|(i, dst)| {
        im2col(&x[i * c * h * w..(i + 1) * c * h * w], [h, w], c, win, 0..oh, dst);
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

#[cfg(test)]
pub(super) mod tests {
    use super::{BAND_VALUES, conv2d, conv2d_merged, pool, strided_copy};
    use rustral_ir::{Activation, Window2d};

    /// Operands for `n` images of `[c, h, w]` and `o` filters of `depth` weights each, with
    /// values in a few distinct magnitudes and signs, and a bias per filter.
    pub(in crate::cpu::kernels) fn operands(
        n: usize,
        [c, h, w]: [usize; 3],
        o: usize,
        depth: usize,
    ) -> (Vec<f32>, Vec<f32>, Vec<f32>) {
        let x = (0..n * c * h * w).map(|i| ((i * 7 % 17) as f32 - 8.0) / 5.0).collect();
        let wt = (0..o * depth).map(|i| ((i * 5 % 11) as f32 - 5.0) / 7.0).collect();
        let bias = (0..o).map(|f| f as f32 / 3.0 - 1.0).collect();
        (x, wt, bias)
    }

    /// `got` within 1e-4 of `want`, relative where `|want| > 1`; `what` names the case.
    fn assert_close(got: &[f32], want: &[f64], what: &str) {
        assert_eq!(got.len(), want.len(), "{what}: length");
        for (e, (&g, &wv)) in got.iter().zip(want).enumerate() {
            assert!((f64::from(g) - wv).abs() <= 1e-4 * wv.abs().max(1.0), "{what}, [{e}]: {g} vs {wv}");
        }
    }

    /// A direct convolution in f64: `out[i, f, y, x] = act(b[f] + sum w[f, k, a, b] x[i, g*cg + k,
    /// y*s + a*d - p, ..])`, padding read as zero, `act` a ReLU where `relu` (else none).
    #[allow(clippy::too_many_arguments)]
    pub(in crate::cpu::kernels) fn naive(
        x: &[f32],
        [n, c, h, w]: [usize; 4],
        wt: &[f32],
        bias: &[f32],
        win: &Window2d,
        groups: usize,
        o: usize,
        relu: bool,
    ) -> Vec<f64> {
        let (oh, ow) = (win.out_len(0, h).unwrap(), win.out_len(1, w).unwrap());
        let (cg, og) = (c / groups, o / groups);
        let [kh, kw] = win.kernel;
        let mut out = vec![0.0f64; n * o * oh * ow];
        for i in 0..n {
            for f in 0..o {
                let g = f / og;
                for y in 0..oh {
                    for xo in 0..ow {
                        let mut acc = f64::from(bias[f]);
                        for k in 0..cg {
                            for a in 0..kh {
                                for b in 0..kw {
                                    let (Some(sy), Some(sx)) = (win.source(0, y, a, h), win.source(1, xo, b, w)) else {
                                        continue;
                                    };
                                    let xv = x[((i * c + g * cg + k) * h + sy) * w + sx];
                                    acc += f64::from(wt[((f * cg + k) * kh + a) * kw + b]) * f64::from(xv);
                                }
                            }
                        }
                        out[((i * o + f) * oh + y) * ow + xo] = if relu { acc.max(0.0) } else { acc };
                    }
                }
            }
        }
        out
    }

    /// Max and average pooling against a direct loop over each window, for every stride the
    /// interior loop specialises (1-4) and one it does not (5), dilation, padding and sizes
    /// where the interior is empty; the max returns NaN where one sits in the window and never
    /// a padding value (all inputs are negative, so a zero would show).
    #[test]
    fn pooling_matches_a_direct_loop() {
        let (n, c) = (2, 3);
        for (h, w) in [(9, 13), (4, 3), (1, 7)] {
            for kernel in [[3, 3], [2, 1], [1, 4]] {
                for stride in 1..=5 {
                    for (padding, dilation) in [([0, 0], [1, 1]), ([1, 1], [1, 1]), ([1, 0], [2, 2])] {
                        let win = Window2d { kernel, stride: [stride, stride], padding, dilation };
                        let (Ok(oh), Ok(ow)) = (win.out_len(0, h), win.out_len(1, w)) else { continue };
                        if padding.iter().zip(kernel).any(|(&p, k)| p > k / 2) {
                            continue; // PyTorch's rule: a window never lies wholly in padding
                        }
                        let mut x: Vec<f32> = (0..n * c * h * w).map(|i| -1.0 - ((i * 7 % 17) as f32) / 5.0).collect();
                        x[w + 2.min(w - 1)] = f32::NAN;
                        for max in [true, false] {
                            let got = pool(&x, &[n, c, h, w], &win, &[n, c, oh, ow], max);
                            for plane in 0..n * c {
                                for y in 0..oh {
                                    for xo in 0..ow {
                                        let mut vals = Vec::new();
                                        for a in 0..kernel[0] {
                                            for b in 0..kernel[1] {
                                                if let (Some(sy), Some(sx)) =
                                                    (win.source(0, y, a, h), win.source(1, xo, b, w))
                                                {
                                                    vals.push(x[(plane * h + sy) * w + sx]);
                                                }
                                            }
                                        }
                                        let g = got[(plane * oh + y) * ow + xo];
                                        let what = format!("{h}x{w} {win:?} max {max} [{plane},{y},{xo}]");
                                        if max {
                                            if vals.iter().any(|v| v.is_nan()) {
                                                assert!(g.is_nan(), "{what}: {g}, want NaN");
                                            } else {
                                                let want = vals.iter().copied().fold(f32::NEG_INFINITY, f32::max);
                                                assert_eq!(g, want, "{what}");
                                            }
                                        } else if !vals.iter().any(|v| v.is_nan()) {
                                            let want =
                                                vals.iter().map(|&v| f64::from(v)).sum::<f64>() / win.taps() as f64;
                                            assert!((f64::from(g) - want).abs() <= 1e-5, "{what}: {g} vs {want}");
                                        }
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
    }

    /// The merged path (images side by side in each GEMM) against a direct f64 convolution,
    /// with groups, stride, padding and dilation, a bias and a ReLU, on one and two threads,
    /// with every image in one GEMM and with a cap that splits the batch unevenly (5 images as
    /// 2 + 2 + 1); and the public entry point agrees with it.
    #[test]
    fn merged_images_match_a_direct_convolution() {
        let (n, c, h, w, o, groups) = (5, 4, 9, 7, 6, 2);
        let win = Window2d { kernel: [3, 2], stride: [2, 1], padding: [1, 1], dilation: [1, 2] };
        let depth = (c / groups) * win.taps();
        let (x, wt, bias) = operands(n, [c, h, w], o, depth);
        let (oh, ow) = (win.out_len(0, h).unwrap(), win.out_len(1, w).unwrap());
        let want = naive(&x, [n, c, h, w], &wt, &bias, &win, groups, o, true);
        for threads in [1, 2] {
            let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().expect("pool");
            for cap in [usize::MAX, 2 * depth * oh * ow] {
                let got = pool
                    .install(|| {
                        conv2d_merged(
                            &x,
                            [n, c, h, w],
                            &wt,
                            Some(&bias),
                            &win,
                            groups,
                            Activation::Relu,
                            [o, oh * ow],
                            cap,
                        )
                    })
                    .expect("runs");
                assert_close(&got, &want, &format!("cap {cap}, {threads} thread(s)"));
            }
            let entry = pool
                .install(|| {
                    conv2d(
                        &x,
                        &[n, c, h, w],
                        &wt,
                        Some(&bias),
                        &win,
                        groups,
                        Activation::Relu,
                        &[n, o, oh, ow],
                        BAND_VALUES,
                    )
                })
                .expect("runs");
            assert_close(&entry, &want, "conv2d");
        }
    }

    /// The per-image path in bands of output rows (im2col of a few rows, each band's GEMM writing
    /// its columns of the output) against a direct f64 convolution: bands of one row, of three
    /// rows (the last one short), and the whole image, with groups, stride, padding and a ReLU;
    /// and a 1x1 convolution, which takes the image as its columns and never bands. One thread
    /// runs an image per task, two run one image's GEMM on both.
    #[test]
    fn banded_im2col_matches_a_direct_convolution() {
        let (c, h, o, groups) = (4, 33, 6, 2);
        // The stem's window (7x7, stride 2, padding 3) on rows wide enough for the stride-2
        // copy's vector blocks (36 outputs a row); without a bias and activation as well.
        let stem = Window2d { kernel: [7, 7], stride: [2, 2], padding: [3, 3], dilation: [1, 1] };
        let cases = [
            (2, 23, Window2d { kernel: [3, 3], stride: [1, 1], padding: [1, 1], dilation: [1, 1] }, true),
            (1, 23, Window2d { kernel: [3, 2], stride: [2, 1], padding: [1, 0], dilation: [1, 2] }, true),
            (1, 23, Window2d { kernel: [1, 1], stride: [1, 1], padding: [0, 0], dilation: [1, 1] }, true),
            (1, 71, stem, true),
            (2, 71, stem, false),
        ];
        for (n, w, win, epilogue) in cases {
            let (oh, ow) = (win.out_len(0, h).unwrap(), win.out_len(1, w).unwrap());
            assert!(oh * ow > super::MERGE_BLOCKS, "the case must take the per-image path");
            let depth = (c / groups) * win.taps();
            let (x, wt, mut bias) = operands(n, [c, h, w], o, depth);
            if !epilogue {
                bias.fill(0.0);
            }
            let want = naive(&x, [n, c, h, w], &wt, &bias, &win, groups, o, epilogue);
            let (bias, act) = if epilogue { (Some(&bias[..]), Activation::Relu) } else { (None, Activation::None) };
            for rows in [1, 3, oh] {
                for threads in [1, 2] {
                    let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().expect("pool");
                    let out = [n, o, oh, ow];
                    let got = pool
                        .install(|| conv2d(&x, &[n, c, h, w], &wt, bias, &win, groups, act, &out, rows * depth * ow))
                        .expect("runs");
                    let what = format!("{:?} on {w} columns, bands of {rows} rows, {threads} thread(s)", win.kernel);
                    assert_close(&got, &want, &what);
                }
            }
        }
    }

    /// `strided_copy` takes every `step`-th value while the source lasts and leaves the rest of
    /// the destination alone, at every length around its 16-wide blocks.
    #[test]
    fn strided_copy_takes_every_step_th_value() {
        for step in [2, 3] {
            for len in 0..40 {
                for have in 0..=len * step + 2 {
                    let src: Vec<f32> = (0..have).map(|i| i as f32).collect();
                    let mut dst = vec![-1.0f32; len];
                    strided_copy(&mut dst, &src, step);
                    for (j, &d) in dst.iter().enumerate() {
                        let want = if j * step < have { (j * step) as f32 } else { -1.0 };
                        assert_eq!(d, want, "step {step}, {len} outputs from {have} values, [{j}]");
                    }
                }
            }
        }
    }
}
