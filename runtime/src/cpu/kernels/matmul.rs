//! Matrix products: the `gemm` crate's GEMM per batch, with the bias and activation of an
//! epilogue applied to each output block while it is in cache.

#[allow(clippy::wildcard_imports)]
use super::*;

simd::multiversion! {
    /// Apply the activation to GEMM output values (the bias is already in them), the
    /// activation chosen outside the loop so that each loop vectorises.
    fn epilogue(values: &mut [f32], act: Activation) {
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

/// Batched matmul (batch dims broadcast) with an optional bias over the last axis, which the
/// GEMM accumulates onto, and an activation applied to each output block right after its
/// GEMM, while it is in cache. The GEMM is the `gemm` crate's; a weight shared by every batch
/// makes one tall GEMM, other batches run in parallel, and a single product uses its own
/// parallel kernel on the pool's threads.
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
    // The bias goes in first and the GEMM adds the product to it (`dst = dst + a.b` is what
    // its micro-kernel does anyway from the second block of the contraction on), so no pass
    // over the output adds it afterwards; only an activation is left to the epilogue.
    let mut c = match bias_row {
        Some(row) => row.repeat(batches * m),
        None => vec![0.0f32; batches * m * n],
    };
    let accumulate = bias_row.is_some();
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
                epilogue(dst, act);
            }
            done
        });
        fits.then_some(c)
    } else {
        let threads = rayon::current_num_threads();
        let par = if threads > 1 { gemm::Parallelism::Rayon(threads) } else { gemm::Parallelism::None };
        let rows = if stacked { batches * m } else { m };
        if !product(0, 0, rows, &mut c, par) {
            return None;
        }
        // One product's output is spread over the pool's threads, so its epilogue is too
        // (on one thread it would cost as much as the GEMM's own parallel speed-up saves).
        if act != Activation::None {
            c.par_chunks_mut(EPILOGUE_ROWS * n).for_each(|rows| epilogue(rows, act));
        }
        Some(c)
    }
}
