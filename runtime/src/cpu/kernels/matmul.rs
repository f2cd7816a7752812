//! Matrix products: the `gemm` crate's GEMM per batch, with the bias and activation of an
//! epilogue applied to each output block while it is in cache.

#[allow(clippy::wildcard_imports)]
use super::*;

#[inline(always)]
pub(super) fn each(rows: &mut [f32], n: usize, bias: Option<&[f32]>, f: impl Fn(f32) -> f32 + Copy) {
    for row in rows.chunks_mut(n) {
        match bias {
            Some(b) => row.iter_mut().zip(b).for_each(|(v, &bb)| *v = f(*v + bb)),
            None => row.iter_mut().for_each(|v| *v = f(*v)),
        }
    }
}

simd::multiversion! {
    /// Add the bias row and apply the activation to GEMM output rows of width `n`, with the
    /// activation chosen outside the loop so each loop vectorises.
    fn epilogue(rows: &mut [f32], n: usize, bias: Option<&[f32]>, act: Activation) {
        match act {
            Activation::None if bias.is_none() => {}
            Activation::None => each(rows, n, bias, identity),
            Activation::Relu => each(rows, n, bias, relu),
            Activation::GeluErf => each(rows, n, bias, gelu_erf),
            Activation::GeluTanh => each(rows, n, bias, gelu_tanh),
            Activation::Silu => each(rows, n, bias, silu),
            Activation::Tanh => each(rows, n, bias, simd::tanh),
            Activation::Sigmoid => each(rows, n, bias, sigmoid),
        }
    }
}

/// Batched matmul (batch dims broadcast) with an optional bias over the last axis and an
/// activation applied to each output block right after its GEMM, while it is in cache. The
/// GEMM is the `gemm` crate's; batches run in parallel, a single product uses its own
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
    let mut c = vec![0.0f32; batches * m * n];
    if c.is_empty() {
        // No product to write (a zero batch dim, m or n): the GEMM must not run on an empty
        // destination.
        return Some(c);
    }
    if k == 0 {
        // An empty contraction is zero; the epilogue still applies.
        epilogue(&mut c, n, bias_row, act);
        return Some(c);
    }
    let product = |a_off: usize, b_off: usize, rows: usize, dst: &mut [f32], par: gemm::Parallelism| {
        // SAFETY: the slices hold rows*k, k*n and rows*n elements at these offsets (shapes
        // were checked by the verifier and bound from the buffers' own lengths).
        unsafe {
            gemm::gemm(
                rows,
                n,
                k,
                dst.as_mut_ptr(),
                1,
                n as isize,
                false,
                a.0.as_ptr().add(a_off),
                1,
                k as isize,
                b.0.as_ptr().add(b_off),
                1,
                n as isize,
                0.0,
                1.0,
                false,
                false,
                false,
                par,
            );
        }
        epilogue(dst, n, bias_row, act);
    };
    if batches > 1 {
        c.par_chunks_mut(m * n).enumerate().for_each(|(i, dst)| {
            product(offset(i, &sa, m * k), offset(i, &sb, k * n), m, dst, gemm::Parallelism::None)
        });
    } else {
        let threads = rayon::current_num_threads();
        let par = if threads > 1 { gemm::Parallelism::Rayon(threads) } else { gemm::Parallelism::None };
        product(0, 0, m, &mut c, par);
    }
    Some(c)
}
