//! Matrix products: the `gemm` crate's GEMM per batch, with the bias and activation of an
//! epilogue applied to each output block while it is in cache.

#[allow(clippy::wildcard_imports)]
use super::*;
use crate::cpu::blas::{Blas, Operand};

simd::multiversion! {
    /// Apply the activation to GEMM output values (the bias is already in them), the
    /// activation chosen outside the loop so that each loop vectorises.
    fn epilogue(values: &mut [f32], act: Activation) {
        epilogue_body(values, act);
    }
}

/// `epilogue`'s loops, inlined into each caller's vector code.
#[inline(always)]
pub(super) fn epilogue_body(values: &mut [f32], act: Activation) {
    match act {
        Activation::None => {}
        Activation::Relu => values.iter_mut().for_each(|v| *v = relu(*v)),
        Activation::GeluErf => values.iter_mut().for_each(|v| *v = gelu_erf(*v)),
        Activation::GeluTanh => values.iter_mut().for_each(|v| *v = gelu_tanh(*v)),
        Activation::Silu => values.iter_mut().for_each(|v| *v = silu(*v)),
        Activation::Tanh => values.iter_mut().for_each(|v| *v = simd::tanh(*v)),
        Activation::Sigmoid => values.iter_mut().for_each(|v| *v = sigmoid(*v)),
    }
}

simd::multiversion! {
    /// `v = act(v + bias[j])` over rows of `bias.len()` values: a bias and an activation in one
    /// pass over the product.
    fn bias_epilogue(values: &mut [f32], bias: &[f32], act: Activation) {
        for row in values.chunks_exact_mut(bias.len()) {
            for (v, &b) in row.iter_mut().zip(bias) {
                *v += b;
            }
            epilogue_body(row, act);
        }
    }
}

/// Apply `act` to output values (a convolution's epilogue uses the matmul's).
pub(super) fn apply_epilogue(values: &mut [f32], act: Activation) {
    epilogue(values, act);
}

/// Output rows per parallel task of a single product's epilogue.
const EPILOGUE_ROWS: usize = 16;

/// A matrix in a slice: element `(i, j)` at `data[i * rs + j * cs]`.
#[derive(Clone, Copy)]
pub(super) struct View<'a> {
    pub data: &'a [f32],
    pub rows: usize,
    pub cols: usize,
    pub rs: usize,
    pub cs: usize,
}

impl View<'_> {
    /// Whether every element lies inside `data`.
    fn fits(&self) -> bool {
        if self.rows == 0 || self.cols == 0 {
            return true;
        }
        let last = (self.rows - 1).checked_mul(self.rs).zip((self.cols - 1).checked_mul(self.cs));
        matches!(last, Some((r, c)) if r.checked_add(c).is_some_and(|end| end < self.data.len()))
    }
}

/// `dst = scale * lhs . rhs` (or `dst += ...` when `accumulate`) by the `gemm` crate (on the
/// kernel path this process runs: `sgemm.rs`), `dst` row-major with row stride `dst_rs`; false
/// (nothing written) when a view or `dst` does not fit its slice, so that a caller gives the
/// work back to the reference rather than reading out of bounds. The vendor BLAS (`RUSTRAL_BLAS`) runs it instead where one is loaded.
pub(super) fn gemm_into(
    dst: &mut [f32],
    dst_rs: usize,
    lhs: View<'_>,
    rhs: View<'_>,
    scale: f32,
    accumulate: bool,
    par: gemm::Parallelism,
) -> bool {
    gemm_into_on(dst, dst_rs, lhs, rhs, scale, accumulate, par, true)
}

/// `gemm_into`, on the vendor BLAS only when `vendor` and one is loaded (a convolution passes
/// false: see `window.rs`).
#[allow(clippy::too_many_arguments)]
pub(super) fn gemm_into_on(
    dst: &mut [f32],
    dst_rs: usize,
    lhs: View<'_>,
    rhs: View<'_>,
    scale: f32,
    accumulate: bool,
    par: gemm::Parallelism,
    vendor: bool,
) -> bool {
    let (m, k, n) = (lhs.rows, lhs.cols, rhs.cols);
    let out = View { data: dst, rows: m, cols: n, rs: dst_rs, cs: 1 };
    if rhs.rows != k || dst_rs < n || !lhs.fits() || !rhs.fits() || !out.fits() {
        return false;
    }
    if m == 0 || n == 0 {
        return true;
    }
    if k == 0 {
        // An empty contraction is zero (the GEMM must not run on it).
        if !accumulate {
            dst.chunks_mut(dst_rs).take(m).for_each(|row| row[..n].fill(0.0));
        }
        return true;
    }
    if vendor
        && let Ok(Some(blas)) = crate::cpu::blas::blas()
        && blas_gemm(blas, dst, dst_rs, lhs, rhs, scale, accumulate, par)
    {
        return true;
    }
    // SAFETY: `fits` checked that every element the three views address lies in its slice.
    unsafe {
        super::sgemm::sgemm(
            super::sgemm::kernels(),
            (m, n, k),
            dst.as_mut_ptr(),
            (1, dst_rs as isize),
            accumulate,
            lhs.data.as_ptr(),
            (lhs.cs as isize, lhs.rs as isize),
            rhs.data.as_ptr(),
            (rhs.cs as isize, rhs.rs as isize),
            if accumulate { 1.0 } else { 0.0 },
            scale,
            par,
        );
    }
    true
}

/// Multiply-adds below which a vendor BLAS's product runs on one thread (splitting it would
/// cost more in task hand-offs than it saves).
const BLAS_PARALLEL_WORK: usize = 1 << 20;

/// A view as a CBLAS operand: row-major (`cs == 1`) or its transpose (`rs == 1`) with a leading
/// dimension the library accepts; None for other layouts (a broadcast's zero stride).
fn blas_operand(v: &View<'_>) -> Option<Operand> {
    let ptr = v.data.as_ptr();
    if v.cs == 1 && (v.rs >= v.cols || v.rows == 1) {
        Some(Operand { ptr, trans: false, ld: v.rs.max(v.cols).max(1) })
    } else if v.rs == 1 && (v.cs >= v.rows || v.cols == 1) {
        Some(Operand { ptr, trans: true, ld: v.cs.max(v.rows).max(1) })
    } else {
        None
    }
}

/// The output's base pointer, shared by the tasks that write its disjoint parts.
#[derive(Clone, Copy)]
pub(super) struct Dst(pub(super) *mut f32);
impl Dst {
    /// The element `offset` past the base (a method, so that a closure captures the whole
    /// `Dst`, which is `Sync`, rather than its raw pointer).
    ///
    /// # Safety
    /// `offset` must lie inside the output.
    pub(super) unsafe fn at(self, offset: usize) -> *mut f32 {
        // SAFETY: the caller's contract.
        unsafe { self.0.add(offset) }
    }
}
// SAFETY: each task writes only its own rows or columns of the output (see `blas_gemm`).
unsafe impl Send for Dst {}
// SAFETY: as above.
unsafe impl Sync for Dst {}

/// `gemm_into` by the vendor BLAS (`crate::cpu::blas`), the views already checked against
/// their slices: one call on one thread, or under `Parallelism::Rayon` one call per thread on
/// its share of the output's rows (of its columns when there are too few rows, as in a decode
/// step's matrix-vector product). False (nothing written) for a layout or size CBLAS cannot
/// take, which the `gemm` crate then runs.
#[allow(clippy::too_many_arguments)]
fn blas_gemm(
    blas: &Blas,
    dst: &mut [f32],
    dst_rs: usize,
    lhs: View<'_>,
    rhs: View<'_>,
    scale: f32,
    accumulate: bool,
    par: gemm::Parallelism,
) -> bool {
    let (m, k, n) = (lhs.rows, lhs.cols, rhs.cols);
    let (Some(a), Some(b)) = (blas_operand(&lhs), blas_operand(&rhs)) else { return false };
    // Every part is smaller than the whole, so a whole that fits 32-bit sizes cannot fail part
    // way through.
    if [m, n, k, a.ld, b.ld, dst_rs].iter().any(|&v| i32::try_from(v).is_err()) {
        return false;
    }
    let beta = if accumulate { 1.0 } else { 0.0 };
    let threads = match par {
        gemm::Parallelism::Rayon(0) => rayon::current_num_threads(),
        gemm::Parallelism::Rayon(t) => t,
        _ => 1,
    };
    let parts = if m.saturating_mul(n).saturating_mul(k) < BLAS_PARALLEL_WORK { 1 } else { threads.max(1) };
    let c = Dst(dst.as_mut_ptr());
    // Split the rows while each part keeps a few micro-kernel rows, else the columns.
    let by_rows = m >= parts * 16;
    let (len, step) = if by_rows { (m, m.div_ceil(parts)) } else { (n, n.div_ceil(parts)) };
    let part = |p: usize| {
        let (start, end) = (p * step, ((p + 1) * step).min(len));
        if start >= end {
            return;
        }
        // SAFETY: the views fit their slices (checked by `gemm_into`), so every sub-matrix
        // does; part `p` writes only output rows (or columns) `start..end`, which no other
        // part writes.
        unsafe {
            if by_rows {
                let a = Operand { ptr: a.ptr.add(start * lhs.rs), ..a };
                blas.sgemm(end - start, n, k, scale, a, b, beta, c.at(start * dst_rs), dst_rs);
            } else {
                let b = Operand { ptr: b.ptr.add(start * rhs.cs), ..b };
                blas.sgemm(m, end - start, k, scale, a, b, beta, c.at(start), dst_rs);
            }
        }
    };
    if parts == 1 {
        part(0);
    } else {
        (0..parts).into_par_iter().for_each(part);
    }
    true
}

/// Batched matmul (batch dims broadcast) with an optional bias over the last axis (which the
/// GEMM accumulates onto, or the activation's pass adds), and an activation applied to each
/// output block right after its GEMM, while it is in cache. The GEMM is the `gemm` crate's;
/// a weight shared by every batch makes one tall GEMM, other batches run in parallel, and a
/// single product uses its own parallel kernel on the pool's threads.
pub(super) fn matmul(
    a: (&[f32], &[usize]),
    b: (&[f32], &[usize]),
    bias: Option<(&[f32], &[usize])>,
    act: Activation,
    out: &[usize],
) -> Option<Vec<f32>> {
    let (ra, rb, ro) = (a.1.len(), b.1.len(), out.len());
    let (m, k, n) = (a.1[ra - 2], a.1[ra - 1], b.1[rb - 1]);
    let batch_out = &out[..ro - 2];
    let batches: usize = batch_out.iter().product();
    let bias_row: Option<&[f32]> = match bias {
        Some((v, s)) if s.len() == 1 && s[0] == n => Some(v),
        Some(_) => return None,
        None => None,
    };
    let sa = strides(&a.1[..ra - 2], batch_out);
    let sb = strides(&b.1[..rb - 2], batch_out);
    let offset = |index: usize, st: &[usize], block: usize| {
        let mut rem = index;
        let mut off = 0;
        for d in (0..batch_out.len()).rev() {
            off += (rem % batch_out[d]) * st[d] * block;
            rem /= batch_out[d];
        }
        off
    };
    // Without an activation the bias goes in first and the GEMM adds the product to it (`dst =
    // dst + a.b` is what its micro-kernel does anyway from the second block of the contraction
    // on), so no pass over the output adds it afterwards. With one, the bias joins the
    // activation's pass instead. The output's first pass (the bias rows, or zeros the GEMM
    // overwrites) is written by the pool's threads: a `vec!` of zeros is one thread's memset
    // once the allocator reuses freed blocks of that size.
    let early_bias = bias_row.filter(|_| act == Activation::None);
    let late_bias = bias_row.filter(|_| act != Activation::None);
    let mut c = filled(batches * m * n, EPILOGUE_ROWS * n.max(1), |_, o| match early_bias {
        // Chunks are whole rows (`n` is the bias's length), so each starts at its first value.
        Some(row) => o.chunks_mut(row.len()).for_each(|r| {
            r.iter_mut().zip(row).for_each(|(d, &b)| {
                d.write(b);
            })
        }),
        None => o.iter_mut().for_each(|d| {
            d.write(0.0);
        }),
    });
    let accumulate = early_bias.is_some();
    let finish = |values: &mut [f32]| match late_bias {
        Some(row) => bias_epilogue(values, row, act),
        None => epilogue(values, act),
    };
    if c.is_empty() {
        // No product to write (a zero batch dim, m or n): the GEMM must not run on an empty
        // destination.
        return Some(c);
    }
    let product = |a_off: usize, b_off: usize, rows: usize, dst: &mut [f32], par: gemm::Parallelism| {
        let lhs = View { data: a.0.get(a_off..).unwrap_or_default(), rows, cols: k, rs: k, cs: 1 };
        let rhs = View { data: b.0.get(b_off..).unwrap_or_default(), rows: k, cols: n, rs: n, cs: 1 };
        gemm_into(dst, n, lhs, rhs, 1.0, accumulate, par)
    };
    // A right operand shared by every batch (its batch strides all zero, as a weight is) against
    // left batches laid out one after another: one GEMM of `batches * m` rows, as for
    // `[batch, seq, d] x [d, n]`, so that the weight is packed once rather than once per batch
    // and the product runs on the pool's threads however few the batches.
    let stacked = batches > 1 && sb.iter().all(|&s| s == 0) && (0..batches).all(|i| offset(i, &sa, m * k) == i * m * k);
    if batches > 1 && !stacked {
        let fits = c.par_chunks_mut(m * n).enumerate().all(|(i, dst)| {
            let done = product(offset(i, &sa, m * k), offset(i, &sb, k * n), m, dst, gemm::Parallelism::None);
            if done {
                finish(dst);
            }
            done
        });
        fits.then_some(c)
    } else {
        let threads = rayon::current_num_threads();
        let rows = if stacked { batches * m } else { m };
        let par = if threads > 1 { gemm::Parallelism::Rayon(threads) } else { gemm::Parallelism::None };
        if !product(0, 0, rows, &mut c, par) {
            return None;
        }
        // One product's output is spread over the pool's threads, so its epilogue is too
        // (on one thread it would cost as much as the GEMM's own parallel speed-up saves).
        if act != Activation::None {
            c.par_chunks_mut(EPILOGUE_ROWS * n).for_each(finish);
        }
        Some(c)
    }
}

#[cfg(test)]
mod tests {
    use super::{View, blas_gemm, matmul};
    use crate::cpu::blas::{Blas, test_library};
    use rustral_ir::Activation;

    /// The vendor BLAS path against an f64 product on every layout it takes: operands as
    /// stored and transposed, accumulating or not, scaled, with a row stride wider than the
    /// output, on one call, split by rows and split by columns; a broadcast (zero-stride)
    /// operand is left to the `gemm` crate.
    #[test]
    fn blas_products_match_on_every_layout_and_split() {
        let Some(path) = test_library() else { return };
        let blas = Blas::open(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
        let pool = rayon::ThreadPoolBuilder::new().num_threads(2).build().expect("pool");
        // (m, k, n): one call (small), rows split, columns split (a decode step's few rows).
        for (m, k, n) in [(5, 7, 3), (96, 130, 150), (2, 700, 1000)] {
            let a: Vec<f32> = (0..m * k).map(|i| ((i * 7 % 13) as f32 - 6.0) / 8.0).collect();
            let b: Vec<f32> = (0..k * n).map(|i| ((i * 5 % 11) as f32 - 5.0) / 9.0).collect();
            let (at, bt) = (transpose(&a, m, k), transpose(&b, k, n));
            for (a_trans, b_trans, accumulate) in
                [(false, false, false), (true, false, true), (false, true, false), (true, true, true)]
            {
                let lhs = if a_trans {
                    View { data: &at, rows: m, cols: k, rs: 1, cs: m }
                } else {
                    View { data: &a, rows: m, cols: k, rs: k, cs: 1 }
                };
                let rhs = if b_trans {
                    View { data: &bt, rows: k, cols: n, rs: 1, cs: k }
                } else {
                    View { data: &b, rows: k, cols: n, rs: n, cs: 1 }
                };
                let ld = n + 3;
                let mut dst = vec![0.5f32; m * ld];
                let done = pool
                    .install(|| blas_gemm(&blas, &mut dst, ld, lhs, rhs, 2.0, accumulate, gemm::Parallelism::Rayon(2)));
                assert!(done, "({m}, {k}, {n}) a^T {a_trans} b^T {b_trans}: not taken");
                for i in 0..m {
                    for j in 0..ld {
                        let want = if j < n {
                            let dot: f64 = (0..k).map(|p| f64::from(a[i * k + p]) * f64::from(b[p * n + j])).sum();
                            2.0 * dot + if accumulate { 0.5 } else { 0.0 }
                        } else {
                            0.5 // past the output's columns: untouched
                        };
                        let got = f64::from(dst[i * ld + j]);
                        assert!(
                            (got - want).abs() <= 1e-4 * want.abs().max(1.0) * (k as f64).sqrt(),
                            "({m}, {k}, {n}) a^T {a_trans} b^T {b_trans} acc {accumulate}: [{i}, {j}] {got} vs {want}"
                        );
                    }
                }
            }
        }
        let (a, b) = (vec![1.0f32; 4], vec![1.0f32; 4]);
        let broadcast = View { data: &a, rows: 2, cols: 2, rs: 0, cs: 1 };
        let rhs = View { data: &b, rows: 2, cols: 2, rs: 2, cs: 1 };
        let mut dst = vec![0.0f32; 4];
        assert!(!blas_gemm(&blas, &mut dst, 2, broadcast, rhs, 1.0, false, gemm::Parallelism::None));
    }

    fn transpose(x: &[f32], rows: usize, cols: usize) -> Vec<f32> {
        (0..rows * cols).map(|t| x[(t % rows) * cols + t / rows]).collect()
    }

    /// `act(a.b + bias)` in f64 with the textbook activations.
    fn naive(a: &[f32], b: &[f32], bias: &[f32], (m, k, n): (usize, usize, usize), act: Activation) -> Vec<f64> {
        let f = |x: f64| match act {
            Activation::None => x,
            Activation::Relu => x.max(0.0),
            Activation::GeluErf | Activation::GeluTanh => {
                // erf-based GELU; the tanh form is within 1e-3 of it at these magnitudes.
                0.5 * x * (1.0 + libm_erf(x / std::f64::consts::SQRT_2))
            }
            Activation::Silu => x / (1.0 + (-x).exp()),
            Activation::Tanh => x.tanh(),
            Activation::Sigmoid => 1.0 / (1.0 + (-x).exp()),
        };
        let mut out = vec![0.0; m * n];
        for i in 0..m {
            for j in 0..n {
                let dot: f64 = (0..k).map(|p| a[i * k + p] as f64 * b[p * n + j] as f64).sum();
                out[i * n + j] = f(dot + bias[j] as f64);
            }
        }
        out
    }

    /// erf by its series and continued fraction are overkill here: Abramowitz-Stegun 7.1.26 in
    /// f64 (1.5e-7), far inside the tolerance below.
    fn libm_erf(x: f64) -> f64 {
        let t = 1.0 / (1.0 + 0.3275911 * x.abs());
        let y = 1.0
            - (((((1.061405429 * t - 1.453152027) * t) + 1.421413741) * t - 0.284496736) * t + 0.254829592)
                * t
                * (-x * x).exp();
        y.copysign(x)
    }

    /// (a shape, b shape, out shape, whether b has a batch dim).
    type Case<'a> = (&'a [usize], &'a [usize], &'a [usize], usize);

    /// The bias reaches every output with and without an activation (it goes into the GEMM
    /// without one, into the activation's pass with one), for one product, a stacked batch
    /// against a shared weight and a batch of separate products, on one and two threads.
    #[test]
    fn bias_and_activation_on_every_path() {
        let (m, k, n) = (37, 19, 23);
        let a: Vec<f32> = (0..2 * m * k).map(|i| ((i * 7 % 13) as f32 - 6.0) / 8.0).collect();
        let b: Vec<f32> = (0..2 * k * n).map(|i| ((i * 5 % 11) as f32 - 5.0) / 9.0).collect();
        let bias: Vec<f32> = (0..n).map(|j| j as f32 / 4.0 - 2.5).collect();
        let acts = [Activation::None, Activation::Relu, Activation::GeluTanh, Activation::Silu, Activation::Sigmoid];
        for threads in [1, 2] {
            let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().expect("pool");
            pool.install(|| {
                for act in acts {
                    let cases: [Case<'_>; 3] = [
                        (&[m, k], &[k, n], &[m, n], 0),
                        (&[2, m, k], &[k, n], &[2, m, n], 0),
                        (&[2, m, k], &[2, k, n], &[2, m, n], 1),
                    ];
                    for (sa, sb, so, b_batched) in cases {
                        let batches = if so.len() == 3 { 2 } else { 1 };
                        let got = matmul(
                            (&a[..batches * m * k], sa),
                            (&b[..(1 + b_batched) * k * n], sb),
                            Some((&bias, &[n])),
                            act,
                            so,
                        )
                        .expect("runs");
                        for i in 0..batches {
                            let bi = if b_batched == 1 { i } else { 0 };
                            let want = naive(
                                &a[i * m * k..(i + 1) * m * k],
                                &b[bi * k * n..(bi + 1) * k * n],
                                &bias,
                                (m, k, n),
                                act,
                            );
                            for (e, (&g, &w)) in got[i * m * n..(i + 1) * m * n].iter().zip(&want).enumerate() {
                                assert!(
                                    (g as f64 - w).abs() <= 2e-3 * w.abs().max(1.0),
                                    "{act:?} {sa:?}x{sb:?} on {threads} thread(s), batch {i}, element {e}: {g} vs {w}"
                                );
                            }
                        }
                    }
                }
            });
        }
    }
}
