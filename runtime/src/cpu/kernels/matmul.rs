//! Matrix products: the `gemm` crate's GEMM per batch, with the bias and activation of an
//! epilogue applied to each output block while it is in cache.

#[allow(clippy::wildcard_imports)]
use super::*;

simd::multiversion! {
    /// Apply the activation to GEMM output values (the bias is already in them), the
    /// activation chosen outside the loop so that each loop vectorises.
    fn epilogue(values: &mut [f32], act: Activation) {
        epilogue_body(values, act);
    }
}

/// `epilogue`'s loops, inlined into each caller's vector code.
#[inline(always)]
fn epilogue_body(values: &mut [f32], act: Activation) {
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

/// `dst = scale * lhs . rhs` (or `dst += ...` when `accumulate`) by the `gemm` crate, `dst`
/// row-major with row stride `dst_rs`; false (nothing written) when a view or `dst` does not
/// fit its slice, so that a caller gives the work back to the reference rather than reading
/// out of bounds.
pub(super) fn gemm_into(
    dst: &mut [f32],
    dst_rs: usize,
    lhs: View<'_>,
    rhs: View<'_>,
    scale: f32,
    accumulate: bool,
    par: gemm::Parallelism,
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
    // SAFETY: `fits` checked that every element the three views address lies in its slice.
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            dst.as_mut_ptr(),
            1,
            dst_rs as isize,
            accumulate,
            lhs.data.as_ptr(),
            lhs.cs as isize,
            lhs.rs as isize,
            rhs.data.as_ptr(),
            rhs.cs as isize,
            rhs.rs as isize,
            if accumulate { 1.0 } else { 0.0 },
            scale,
            false,
            false,
            false,
            par,
        );
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
    use super::matmul;
    use rustral_ir::Activation;

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
