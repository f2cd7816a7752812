//! 3x3 stride-1 convolutions by Winograd's minimal filtering F(2x2, 3x3) (Lavin and Gray,
//! "Fast Algorithms for Convolutional Neural Networks", 2015): each 2x2 block of outputs is
//! `A^T [(G g G^T) * (B^T d B)] A` for its 4x4 input patch `d`, so the channel sums become 16
//! GEMMs, one per point of the 4x4 transform, with 16 multiply-adds per 2x2 outputs where
//! im2col does 36. The transforms' coefficients are 0, +-1 and +-1/2, exact in binary, so
//! the result differs from a direct sum only by the order of the additions.
//!
//! Tiles of all images are taken in blocks: per block, the input transform writes
//! `v[p] = [c, tiles]`, the GEMMs make `m[p] = u[p] . v[p]` (`u[p] = [o, c]`, the filters'
//! transform, made once per call, in parallel), and the output transform writes each tile's 2x2 outputs
//! with the bias and the activation. A block's values stay in L2 between the three steps.

#[allow(clippy::wildcard_imports)]
use super::*;
use matmul::{Dst, View, epilogue_body, gemm_into_on};

/// Points of the 4x4 transform.
const POINTS: usize = 16;

/// Tiles each transform step takes at once (one vector of lanes, or a few).
const LANES: usize = 16;

/// Values (transformed inputs and products) that one block of tiles holds at most: 1 MiB.
const BLOCK_VALUES: usize = 1 << 18;

/// Tiles a block has at least (a GEMM of fewer columns than this spends more on packing the
/// filters than it computes).
const MIN_BLOCK_TILES: usize = 64;

/// Whether a convolution is one this kernel runs: a 3x3 window at stride 1, no dilation, one
/// group, and enough channels in and out for the 16 products to be GEMM-sized.
pub(super) fn applies(win: &rustral_ir::Window2d, groups: usize, c: usize, o: usize) -> bool {
    static OFF: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    // `RUSTRAL_NO_WINOGRAD=1` runs these convolutions as im2col and a GEMM, to measure one
    // against the other in one build.
    !*OFF.get_or_init(|| std::env::var_os("RUSTRAL_NO_WINOGRAD").is_some())
        && win.kernel == [3, 3]
        && win.stride == [1, 1]
        && win.dilation == [1, 1]
        && groups == 1
        && c >= 16
        && o >= 16
}

/// `act(conv(x, w) + bias)` for `x: [n, c, h, wd]`, `w: [o, c, 3, 3]` and the output
/// `[n, o, oh, ow]` (`oh = h + 2 * padding[0] - 2`); None when an operand is shorter than its
/// shape says.
#[allow(clippy::too_many_arguments)]
pub(super) fn conv2d(
    x: &[f32],
    [n, c, h, wd]: [usize; 4],
    w: &[f32],
    bias: Option<&[f32]>,
    padding: [usize; 2],
    act: Activation,
    [o, oh, ow]: [usize; 3],
) -> Option<Vec<f32>> {
    if x.len() < n * c * h * wd || w.len() < o * c * 9 || bias.is_some_and(|b| b.len() < o) {
        return None;
    }
    let mut result = vec![0.0f32; n * o * oh * ow];
    if result.is_empty() {
        return Some(result);
    }
    let u = filters(w, o, c);
    let grid = Grid { c, h, w: wd, th: oh.div_ceil(2), tw: ow.div_ceil(2), oh, ow, padding };
    // Blocks of whole tile rows (a row: `tw` tiles of one image), so that the transforms run
    // along contiguous input and output rows.
    let tile_rows = n * grid.th;
    let per_block = (BLOCK_VALUES / (POINTS * (c + o) * grid.tw)).max(MIN_BLOCK_TILES.div_ceil(grid.tw)).min(tile_rows);
    // A row's transforms run in whole lanes: the last row's lanes reach past the block's tiles.
    let ld = per_block * grid.tw + LANES;
    let blocks = tile_rows.div_ceil(per_block);
    let dst = Dst(result.as_mut_ptr());
    let threads = rayon::current_num_threads();
    let run = |b: usize, scratch: &mut Vec<f32>, par: gemm::Parallelism| -> bool {
        let rows = b * per_block..((b + 1) * per_block).min(tile_rows);
        let count = rows.len() * grid.tw;
        if scratch.len() < POINTS * (c + o) * ld {
            scratch.resize(POINTS * (c + o) * ld, 0.0);
        }
        let (v, m) = scratch.split_at_mut(POINTS * c * ld);
        inputs(x, &grid, rows.clone(), ld, v);
        for p in 0..POINTS {
            let lhs = View { data: &u[p * o * c..(p + 1) * o * c], rows: o, cols: c, rs: c, cs: 1 };
            let rhs = View { data: &v[p * c * ld..(p + 1) * c * ld], rows: c, cols: count, rs: ld, cs: 1 };
            if !gemm_into_on(&mut m[p * o * ld..(p + 1) * o * ld], ld, lhs, rhs, 1.0, false, par, false) {
                return false;
            }
        }
        // SAFETY: `result` holds `n * o * oh * ow` values, and a block writes only the output
        // rows of its own tile rows, which no other block has.
        unsafe { outputs(m, &grid, o, rows, ld, bias, act, dst) };
        true
    };
    let done = if blocks >= threads || threads == 1 {
        (0..blocks).into_par_iter().map_init(Vec::new, |s, b| run(b, s, gemm::Parallelism::None)).all(|ok| ok)
    } else {
        let mut scratch = Vec::new();
        (0..blocks).all(|b| run(b, &mut scratch, gemm::Parallelism::Rayon(threads)))
    };
    done.then_some(result)
}

/// The tiling of a batch: `th x tw` tiles of 2x2 outputs an image; tile row `r` is row
/// `r % th` of image `r / th`.
struct Grid {
    c: usize,
    h: usize,
    w: usize,
    th: usize,
    tw: usize,
    oh: usize,
    ow: usize,
    padding: [usize; 2],
}

/// `u[p][f][k] = (G g G^T)[p]` for filter `f`'s 3x3 weights `g` of channel `k`, with
/// `G = [[1, 0, 0], [1/2, 1/2, 1/2], [1/2, -1/2, 1/2], [0, 0, 1]]`: point `p`'s matrix is
/// `[o, c]`. The filters run in parallel (ResNet-18's last stage transforms 16 MiB of them a
/// call), each writing its row of every point's matrix. (Rows `16 c` apart, one filter's
/// points side by side, made the GEMMs' packing read rows 32 KiB apart: 15% slower there.)
fn filters(w: &[f32], o: usize, c: usize) -> Vec<f32> {
    let mut u = vec![0.0f32; POINTS * o * c];
    let dst = Dst(u.as_mut_ptr());
    let fresh = || vec![0.0f32; POINTS * c];
    w.par_chunks(9 * c).take(o).enumerate().for_each_init(fresh, |rows, (f, w)| {
        filter(w, c, rows);
        for (p, row) in rows.chunks_exact(c).enumerate() {
            // SAFETY: `u` holds `16 o c` values, so row `f` of point `p` lies inside it, and
            // only filter `f`'s task writes it.
            unsafe { std::slice::from_raw_parts_mut(dst.at((p * o + f) * c), c) }.copy_from_slice(row);
        }
    });
    u
}

simd::multiversion! {
    /// One filter's transform (`filters`), `u[p][k]` for its `c` channels, `LANES` at a time.
    fn filter(w: &[f32], c: usize, u: &mut [f32]) {
        for k0 in (0..c).step_by(LANES) {
            let len = LANES.min(c - k0);
            let mut g = [[0.0f32; LANES]; 9];
            for (l, taps) in w[k0 * 9..(k0 + len) * 9].chunks_exact(9).enumerate() {
                for (t, &value) in taps.iter().enumerate() {
                    g[t][l] = value;
                }
            }
            // G g: 4 rows of 3 (row-major taps `3 i + j`), then (G g) G^T: 4 rows of 4.
            let half = |x: &[f32; LANES], y: &[f32; LANES], z: &[f32; LANES], sign: f32| -> [f32; LANES] {
                std::array::from_fn(|l| 0.5 * (x[l] + sign * y[l] + z[l]))
            };
            let col = |j: usize| [g[j], half(&g[j], &g[3 + j], &g[6 + j], 1.0), half(&g[j], &g[3 + j], &g[6 + j], -1.0), g[6 + j]];
            let (c0, c1, c2) = (col(0), col(1), col(2));
            for i in 0..4 {
                let row = [c0[i], half(&c0[i], &c1[i], &c2[i], 1.0), half(&c0[i], &c1[i], &c2[i], -1.0), c2[i]];
                for (j, lanes) in row.iter().enumerate() {
                    let at = (i * 4 + j) * c + k0;
                    u[at..at + len].copy_from_slice(&lanes[..len]);
                }
            }
        }
    }
}

/// Ask for the cache lines of `len` values from `at` (an address past the input is never
/// read, only prefetched: the hint has no effect there).
#[inline(always)]
fn prefetch(at: *const f32, len: usize) {
    #[cfg(target_arch = "x86_64")]
    for line in (0..len).step_by(16) {
        // SAFETY: a prefetch reads nothing and cannot fault, whatever the address.
        #[allow(unused_unsafe)]
        unsafe {
            std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(at.wrapping_add(line).cast());
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (at, len);
}

simd::multiversion! {
    /// `v[p][k][j] = (B^T d B)[p]` for tile `j` of tile rows `rows` (its 4x4 input patch `d` of
    /// channel `k`, zero outside the image), with `B^T = [[1, 0, -1, 0], [0, 1, 1, 0],
    /// [0, -1, 1, 0], [0, 1, 0, -1]]`; `v`'s rows are `ld` apart. Each input row is split into
    /// its even and odd columns first, so that the patches of `LANES` tiles side by side are
    /// contiguous lanes.
    fn inputs(x: &[f32], grid: &Grid, rows: std::ops::Range<usize>, ld: usize, v: &mut [f32]) {
        let Grid { c, h, w, th, tw, padding, .. } = *grid;
        // Tile `tx`'s patch columns are `2 tx - padding + 0..4`: even[tx], odd[tx], even[tx + 1],
        // odd[tx + 1] of the row shifted by the padding.
        let span = tw.div_ceil(LANES) * LANES + 1;
        let mut split = vec![0.0f32; 8 * span];
        // Column `col` of a row is value `q = col + padding[1]` of the padded row: `even[q / 2]`
        // or `odd[q / 2]`. The values left and right of the row are zeros written once (every
        // in-image row writes the same places; a row outside the image zeroes its pair whole), and `first` is the first column at
        // an even `q`.
        let first = padding[1] % 2;
        let base = (first + padding[1]) / 2;
        for k in 0..c {
            for (ri, r) in rows.clone().enumerate() {
                let (img, ty) = (r / th, r % th);
                let plane = &x[(img * c + k) * h * w..(img * c + k + 1) * h * w];
                for (a, eo) in split.chunks_exact_mut(2 * span).enumerate() {
                    let y = (2 * ty + a).wrapping_sub(padding[0]);
                    if y >= h {
                        eo.fill(0.0);
                        continue;
                    }
                    let (even, odd) = eo.split_at_mut(span);
                    // Read straight from the image: a copy into a padded row first stalled the
                    // loads that read it back (40% of this function's samples on one load).
                    let row = &plane[y * w..(y + 1) * w];
                    // The same row of the next channel, a plane further on: 64 channels' rows
                    // read a few at a time are more streams than the hardware prefetcher follows.
                    prefetch(row.as_ptr().wrapping_add(h * w), w);
                    if first == 1 && w > 0 {
                        odd[base - 1] = row[0];
                    }
                    let body = &row[first.min(w)..];
                    let pairs = body.chunks_exact(2);
                    if let [last] = pairs.remainder() {
                        even[base + body.len() / 2] = *last;
                    }
                    for ((e, o), pair) in even[base..].iter_mut().zip(&mut odd[base..]).zip(pairs) {
                        (*e, *o) = (pair[0], pair[1]);
                    }
                }
                for t0 in (0..tw).step_by(LANES) {
                    // d B for each of the 4 rows: columns even[t], odd[t], even[t + 1], odd[t + 1].
                    let mut e = [[[0.0f32; LANES]; 4]; 4];
                    for (a, ea) in e.iter_mut().enumerate() {
                        let lane = |half: usize, shift: usize| -> [f32; LANES] {
                            let at = (2 * a + half) * span + t0 + shift;
                            split[at..at + LANES].try_into().unwrap_or([0.0; LANES])
                        };
                        let (d0, d1, d2, d3) = (lane(0, 0), lane(1, 0), lane(0, 1), lane(1, 1));
                        for l in 0..LANES {
                            ea[0][l] = d0[l] - d2[l];
                        }
                        for l in 0..LANES {
                            ea[1][l] = d1[l] + d2[l];
                        }
                        for l in 0..LANES {
                            ea[2][l] = d2[l] - d1[l];
                        }
                        for l in 0..LANES {
                            ea[3][l] = d1[l] - d3[l];
                        }
                    }
                    // B^T (d B), written to the 16 rows of `v` (a column at a time, as the
                    // rows' lanes are laid out).
                    let j = ri * tw + t0;
                    #[allow(clippy::needless_range_loop)]
                    for col in 0..4 {
                        let (e0, e1, e2, e3) = (&e[0][col], &e[1][col], &e[2][col], &e[3][col]);
                        let mut out = [[0.0f32; LANES]; 4];
                        for l in 0..LANES {
                            out[0][l] = e0[l] - e2[l];
                            out[1][l] = e1[l] + e2[l];
                            out[2][l] = e2[l] - e1[l];
                            out[3][l] = e1[l] - e3[l];
                        }
                        // Whole lanes: past the row's last tile they land on the next row's
                        // first tiles, which are written after them, or on the block's slack.
                        for (row, lanes) in out.iter().enumerate() {
                            let at = ((row * 4 + col) * c + k) * ld + j;
                            v[at..at + LANES].copy_from_slice(lanes);
                        }
                    }
                }
            }
        }
    }
}

/// `x + y + z + c`, lane by lane.
#[inline(always)]
fn plus3(x: &[f32; LANES], y: &[f32; LANES], z: &[f32; LANES], c: f32) -> [f32; LANES] {
    std::array::from_fn(|l| x[l] + y[l] + z[l] + c)
}

/// `x - y - z + c`, lane by lane.
#[inline(always)]
fn minus2(x: &[f32; LANES], y: &[f32; LANES], z: &[f32; LANES], c: f32) -> [f32; LANES] {
    std::array::from_fn(|l| x[l] - y[l] - z[l] + c)
}

simd::multiversion! {
    /// Each tile's 2x2 outputs `A^T m A + bias`, then the activation, from the products
    /// `m[p][f][j]` (rows `ld` apart), with `A^T = [[1, 1, 1, 0], [0, 1, -1, -1]]`, `LANES`
    /// tiles at a time, written as whole output rows through `dst`.
    ///
    /// # Safety
    /// `dst` must address the whole output (`n * o * oh * ow` values), and no other thread may
    /// write the output rows of tile rows `rows` meanwhile.
    #[allow(clippy::too_many_arguments)]
    unsafe fn outputs(
        m: &[f32],
        grid: &Grid,
        o: usize,
        rows: std::ops::Range<usize>,
        ld: usize,
        bias: Option<&[f32]>,
        act: Activation,
        dst: Dst,
    ) {
        let Grid { th, tw, oh, ow, .. } = *grid;
        let mut lines = vec![0.0f32; 2 * (tw.div_ceil(LANES) * LANES) * 2];
        let width = lines.len() / 2;
        for f in 0..o {
            let b = bias.map_or(0.0, |b| b[f]);
            for (ri, r) in rows.clone().enumerate() {
                let (img, ty) = (r / th, r % th);
                for t0 in (0..tw).step_by(LANES) {
                    let j = ri * tw + t0;
                    let mut mm = [[0.0f32; LANES]; POINTS];
                    for (p, lanes) in mm.iter_mut().enumerate() {
                        let at = (p * o + f) * ld + j;
                        lanes.copy_from_slice(&m[at..at + LANES]);
                    }
                    // A^T m: 2 rows of 4 (row 0: m0 + m1 + m2, row 1: m1 - m2 - m3 of each
                    // column), then (A^T m) A the same along the rows, plus the bias. Spelled out
                    // column by column: a loop over the columns was vectorised across them, by
                    // gathers.
                    let r0 = |col: usize| plus3(&mm[col], &mm[4 + col], &mm[8 + col], 0.0);
                    let r1 = |col: usize| minus2(&mm[4 + col], &mm[8 + col], &mm[12 + col], 0.0);
                    let (a0, a1, a2, a3) = (r0(0), r0(1), r0(2), r0(3));
                    let (b0, b1, b2, b3) = (r1(0), r1(1), r1(2), r1(3));
                    let mut y = [
                        plus3(&a0, &a1, &a2, b),
                        minus2(&a1, &a2, &a3, b),
                        plus3(&b0, &b1, &b2, b),
                        minus2(&b1, &b2, &b3, b),
                    ];
                    for lanes in &mut y {
                        epilogue_body(lanes, act);
                    }
                    // Output rows 2 ty and 2 ty + 1 of the lanes' tiles, their columns interleaved.
                    for (q, line) in lines.chunks_exact_mut(width).enumerate() {
                        let pairs = line[2 * t0..2 * (t0 + LANES)].chunks_exact_mut(2);
                        for (pair, (&left, &right)) in pairs.zip(y[2 * q].iter().zip(&y[2 * q + 1])) {
                            pair.copy_from_slice(&[left, right]);
                        }
                    }
                }
                for (q, line) in lines.chunks_exact(width).enumerate() {
                    let yy = 2 * ty + q;
                    if yy < oh {
                        // SAFETY: output row `yy` of filter `f` of image `img` lies inside the
                        // output, and only this tile row writes it (the caller's contract).
                        let out = unsafe { std::slice::from_raw_parts_mut(dst.at(((img * o + f) * oh + yy) * ow), ow) };
                        out.copy_from_slice(&line[..ow]);
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::conv2d;
    use crate::cpu::kernels::window::tests::{naive, operands};
    use rustral_ir::{Activation, Window2d};

    /// Against a direct f64 sum: even and odd output sizes (a last tile half outside),
    /// padding 0, 1 and 2 (tiles that start in the padding), one image and a batch whose tiles
    /// cross image boundaries within a block, with and without a bias and ReLU, on one and two
    /// threads (two threads: the blocks in parallel where there are several, as in the last
    /// case's 34 tile rows of 20 tiles, more than a block's 25; else one block's GEMMs on both).
    #[test]
    fn matches_a_direct_convolution() {
        let cases = [
            (1, 16, 8, 8, 16, [1, 1]),
            (3, 17, 9, 7, 20, [1, 1]),
            (2, 16, 6, 11, 16, [0, 2]),
            (1, 24, 13, 5, 32, [2, 0]),
            (2, 16, 34, 40, 16, [1, 1]),
        ];
        for (n, c, h, w, o, padding) in cases {
            let (x, wt, bias) = operands(n, [c, h, w], o, c * 9);
            let win = Window2d { kernel: [3, 3], stride: [1, 1], padding, dilation: [1, 1] };
            let (oh, ow) = (h + 2 * padding[0] - 2, w + 2 * padding[1] - 2);
            for epilogue in [false, true] {
                let zeros = vec![0.0; o];
                let want = naive(&x, [n, c, h, w], &wt, if epilogue { &bias } else { &zeros }, &win, 1, o, epilogue);
                let (b, act) = if epilogue { (Some(&bias[..]), Activation::Relu) } else { (None, Activation::None) };
                for threads in [1, 2] {
                    let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().expect("pool");
                    let got =
                        pool.install(|| conv2d(&x, [n, c, h, w], &wt, b, padding, act, [o, oh, ow])).expect("runs");
                    assert_eq!(got.len(), want.len());
                    for (e, (&g, &wv)) in got.iter().zip(&want).enumerate() {
                        // The sums run over 9c products of magnitude <= 1.6 * 0.72: 1e-5 relative to
                        // that scale is f32 rounding, far below a wrong tap or a missed tile.
                        assert!(
                            (f64::from(g) - wv).abs() <= 1e-5 * (9 * c) as f64,
                            "n {n} c {c} {h}x{w} o {o} padding {padding:?} epilogue {epilogue}, {threads} thread(s), [{e}]: {g} vs {wv}"
                        );
                    }
                }
            }
        }
    }

    /// An operand shorter than its shape says is refused, not read past.
    #[test]
    fn short_operands_are_refused() {
        let x = vec![1.0f32; 16 * 4 * 4 - 1];
        let w = vec![1.0f32; 16 * 16 * 9];
        assert!(conv2d(&x, [1, 16, 4, 4], &w, None, [1, 1], Activation::None, [16, 4, 4]).is_none());
        let x = vec![1.0f32; 16 * 4 * 4];
        assert!(conv2d(&x, [1, 16, 4, 4], &w[1..], None, [1, 1], Activation::None, [16, 4, 4]).is_none());
        assert!(conv2d(&x, [1, 16, 4, 4], &w, Some(&[0.0; 15]), [1, 1], Activation::None, [16, 4, 4]).is_none());
    }
}
