//! Quantized matrix products: f32 activations against weights that stay in their GGML blocks.
//! Decode (a few rows of activations) is a GEMV that dequantizes each block in registers and
//! never writes a weight to memory: bandwidth-bound, it reads 0.56 (Q4_1) or 1.06 (Q8_0) bytes
//! a weight where f32 reads 4. Prefill (many rows) dequantizes a panel of weight rows at a
//! time into a cache-sized f32 scratch and runs the `gemm` crate's GEMM on it, so that each
//! weight is unpacked once per prompt instead of once per token.
//!
//! The AVX2 paths (chosen at run time, F16C for the block scales) exist for the formats real
//! checkpoints use most (Q4_0, Q4_1, Q8_0); every format also has a portable path that
//! dequantizes a block to the stack and takes its dot product. Both give the reference's
//! values up to f32 summation order.

use rayon::prelude::*;
use rustral_ir::QuantFormat;

/// Activation rows at or below which the product is a GEMV per row.
const GEMV_ROWS: usize = 4;
/// Weight rows dequantized per GEMM panel.
const PANEL: usize = 64;

/// `x[m, k] @ dequantize(w[n, row_bytes])^T` as `[m, n]`; None when the sizes disagree.
pub(super) fn quant_matmul(x: &[f32], k: usize, w: &[u8], n: usize, format: QuantFormat) -> Option<Vec<f32>> {
    let row_bytes = format.row_bytes(k).ok()?;
    if k == 0 || !x.len().is_multiple_of(k) || w.len() != n * row_bytes {
        return None;
    }
    let m = x.len() / k;
    let mut out = vec![0.0f32; m * n];
    if m == 0 || n == 0 {
        return Some(out);
    }
    if m <= GEMV_ROWS {
        for (xr, orow) in x.chunks_exact(k).zip(out.chunks_exact_mut(n)) {
            gemv(xr, w, row_bytes, format, orow);
        }
    } else {
        gemm_panels(x, m, k, w, row_bytes, format, &mut out, n);
    }
    Some(out)
}

/// One activation row against every weight row, in parallel over chunks of weight rows.
fn gemv(x: &[f32], w: &[u8], row_bytes: usize, format: QuantFormat, out: &mut [f32]) {
    let block = format.block_size();
    // Per-block sums of x: the minimum (Q4_1) and offset (Q4_0) terms of a block's dot
    // product are one multiply by them.
    let xsum: Vec<f32> = x.chunks_exact(block).map(|c| c.iter().sum()).collect();
    let threads = rayon::current_num_threads().max(1);
    // Chunks of whole row groups, a few per thread to balance.
    let chunk = out.len().div_ceil(threads * 4).max(ROWS);
    out.par_chunks_mut(chunk).enumerate().for_each(|(c, dst)| {
        let first = c * chunk;
        rows_dot(&w[first * row_bytes..(first + dst.len()) * row_bytes], row_bytes, x, &xsum, format, dst);
    });
}

/// Weight rows a parallel task takes at least. (Interleaving several rows in one loop, for
/// more accumulator chains, measured slower: the extra memory streams defeat the prefetcher
/// on large matrices; each row keeps four chains of its own instead.)
const ROWS: usize = 16;

/// A row kernel: `out[r] = row r of w . x` for consecutive rows.
type RowsKernel = unsafe fn(&[u8], usize, &[f32], &[f32], &mut [f32]);

/// `out[r] = row r of w . x` for consecutive rows of `w`.
fn rows_dot(w: &[u8], row_bytes: usize, x: &[f32], xsum: &[f32], format: QuantFormat, out: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if crate::cpu::simd::has_avx2() && std::arch::is_x86_feature_detected!("f16c") {
        let kernel: Option<RowsKernel> = match format {
            QuantFormat::Q4_1 => Some(avx2::q4_1),
            QuantFormat::Q4_0 => Some(avx2::q4_0),
            QuantFormat::Q8_0 => Some(avx2::q8_0),
            _ => None,
        };
        if let Some(kernel) = kernel {
            // SAFETY: the CPU has AVX2, FMA and F16C; each row holds whole blocks of x's
            // length (checked by `quant_matmul`).
            unsafe { kernel(w, row_bytes, x, xsum, out) };
            return;
        }
    }
    for (r, o) in out.iter_mut().enumerate() {
        *o = portable_dot(&w[r * row_bytes..(r + 1) * row_bytes], x, format);
    }
}

/// Dequantize a block at a time to the stack and take its dot product.
fn portable_dot(row: &[u8], x: &[f32], format: QuantFormat) -> f32 {
    let (bs, bb) = (format.block_size(), format.block_bytes());
    let mut buf = [0.0f32; 256];
    let mut acc = [0.0f32; 8];
    for (blk, xb) in row.chunks_exact(bb).zip(x.chunks_exact(bs)) {
        let y = &mut buf[..bs];
        format.dequantize(blk, y).expect("a whole block: `quant_matmul` checked the row sizes");
        for (yc, xc) in y.chunks_exact(8).zip(xb.chunks_exact(8)) {
            for l in 0..8 {
                acc[l] += yc[l] * xc[l];
            }
        }
    }
    acc.iter().sum()
}

/// Raw pointer to the output, shared by panels that write disjoint columns.
#[derive(Clone, Copy)]
struct OutPtr(*mut f32);
// SAFETY: each panel writes only its own columns of the output.
unsafe impl Send for OutPtr {}
unsafe impl Sync for OutPtr {}

impl OutPtr {
    /// The pointer (a method, so that closures capture the `Send` wrapper, not the field).
    fn get(self) -> *mut f32 {
        self.0
    }
}

/// Many activation rows: per panel of `PANEL` weight rows, dequantize to f32 and GEMM.
#[allow(clippy::too_many_arguments)]
fn gemm_panels(
    x: &[f32],
    m: usize,
    k: usize,
    w: &[u8],
    row_bytes: usize,
    format: QuantFormat,
    out: &mut [f32],
    n: usize,
) {
    let dst = OutPtr(out.as_mut_ptr());
    let panels = n.div_ceil(PANEL);
    (0..panels).into_par_iter().for_each_init(
        || vec![0.0f32; PANEL * k],
        |scratch, p| {
            let (r0, rows) = (p * PANEL, PANEL.min(n - p * PANEL));
            let panel = &mut scratch[..rows * k];
            format
                .dequantize(&w[r0 * row_bytes..(r0 + rows) * row_bytes], panel)
                .expect("whole rows of blocks: `quant_matmul` checked the sizes");
            let dst = dst.get();
            // SAFETY: dst points at out (m * n values); this panel's columns r0..r0+rows of
            // every row are written by it alone. x is m*k, the panel rows*k, read as its
            // transpose (k x rows, column stride k).
            unsafe {
                super::sgemm::sgemm(
                    super::sgemm::kernels(),
                    (m, rows, k),
                    dst.add(r0),
                    (1, n as isize),
                    false,
                    x.as_ptr(),
                    (1, k as isize),
                    panel.as_ptr(),
                    (k as isize, 1),
                    0.0,
                    1.0,
                    gemm::Parallelism::None,
                );
            }
        },
    );
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use std::arch::x86_64::*;

    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    fn hsum(v: __m256) -> f32 {
        let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
        let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
        let s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
        _mm_cvtss_f32(s)
    }

    /// The two f16 at `p` as f32 lanes 0 and 1.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn halves(p: *const u8) -> __m128 {
        _mm_cvtph_ps(_mm_cvtsi32_si128(unsafe { std::ptr::read_unaligned(p.cast::<i32>()) }))
    }

    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    fn i8s(v: __m128i) -> __m256 {
        _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(v))
    }

    /// `sum(q * x)` over 32 nibbles (low nibbles are weights 0..16, high 16..32). The 16
    /// bytes are broadcast to both 128-bit lanes and `vpshufb` spreads four bytes a lane into
    /// dwords: in-lane shuffles only, no lane-crossing widening.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn nibble_dot(q: *const u8, x: *const f32) -> __m256 {
        let mask = _mm256_set1_epi8(0x0F);
        let q = _mm256_broadcastsi128_si256(unsafe { _mm_loadu_si128(q.cast()) });
        let lo = _mm256_and_si256(q, mask);
        let hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), mask);
        // Dword j of lane l takes byte 4l + j (first eight weights), or 8 + 4l + j.
        let z = -128i8;
        let m0 = _mm256_setr_epi8(
            0, z, z, z, 1, z, z, z, 2, z, z, z, 3, z, z, z, 4, z, z, z, 5, z, z, z, 6, z, z, z, 7, z, z, z,
        );
        let m1 = _mm256_setr_epi8(
            8, z, z, z, 9, z, z, z, 10, z, z, z, 11, z, z, z, 12, z, z, z, 13, z, z, z, 14, z, z, z, 15, z, z, z,
        );
        let f = |v: __m256i, m: __m256i| _mm256_cvtepi32_ps(_mm256_shuffle_epi8(v, m));
        unsafe {
            let a = _mm256_fmadd_ps(f(lo, m1), _mm256_loadu_ps(x.add(8)), _mm256_mul_ps(f(lo, m0), _mm256_loadu_ps(x)));
            let b = _mm256_fmadd_ps(
                f(hi, m1),
                _mm256_loadu_ps(x.add(24)),
                _mm256_mul_ps(f(hi, m0), _mm256_loadu_ps(x.add(16))),
            );
            _mm256_add_ps(a, b)
        }
    }

    /// Q4_1: `sum_b d_b * sum(q x) + m_b * sum(x)`. A block's scale pair converts to lanes
    /// `[d, m]`; the minimum's term accumulates in lane 1 of a 128-bit sum as
    /// `[d, m] * [0, sum(x)]`. Blocks go four at a time into four register accumulators: four
    /// FMA chains in flight instead of one waiting on its own latency.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn q4_1(w: &[u8], row_bytes: usize, x: &[f32], xsum: &[f32], out: &mut [f32]) {
        let blocks = (row_bytes / 20).min(xsum.len()).min(x.len() / 32);
        // [0, sum(x_b), 0, 0] per block, shared by every row.
        let pairs: Vec<__m128> = xsum[..blocks].iter().map(|&s| _mm_set_ps(0.0, 0.0, s, 0.0)).collect();
        #[inline(always)]
        unsafe fn step(row: *const u8, x: &[f32], pairs: &[__m128], b: usize, acc: &mut __m256, macc: &mut __m128) {
            unsafe {
                let p = row.add(b * 20);
                let dm = halves(p);
                let s = nibble_dot(p.add(4), x.as_ptr().add(b * 32));
                *acc = _mm256_fmadd_ps(_mm256_broadcastss_ps(dm), s, *acc);
                *macc = _mm_fmadd_ps(dm, *pairs.get_unchecked(b), *macc);
            }
        }
        for (r, o) in out.iter_mut().enumerate() {
            let row = unsafe { w.as_ptr().add(r * row_bytes) };
            let (mut a0, mut a1, mut a2, mut a3) =
                (_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps());
            let (mut m0, mut m1) = (_mm_setzero_ps(), _mm_setzero_ps());
            let mut b = 0;
            unsafe {
                while b + 4 <= blocks {
                    step(row, x, &pairs, b, &mut a0, &mut m0);
                    step(row, x, &pairs, b + 1, &mut a1, &mut m1);
                    step(row, x, &pairs, b + 2, &mut a2, &mut m0);
                    step(row, x, &pairs, b + 3, &mut a3, &mut m1);
                    b += 4;
                }
                while b < blocks {
                    step(row, x, &pairs, b, &mut a0, &mut m0);
                    b += 1;
                }
            }
            let m = _mm_add_ps(m0, m1);
            let a = _mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3));
            *o = hsum(a) + _mm_cvtss_f32(_mm_shuffle_ps(m, m, 1));
        }
    }

    /// Q4_0: `sum_b d_b * (sum(q x) - 8 sum(x))`.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn q4_0(w: &[u8], row_bytes: usize, x: &[f32], xsum: &[f32], out: &mut [f32]) {
        let blocks = row_bytes / 18;
        for (r, o) in out.iter_mut().enumerate() {
            let mut acc = _mm256_setzero_ps();
            let mut off = 0.0f32;
            for (b, &xs) in xsum.iter().enumerate().take(blocks) {
                unsafe {
                    let p = w.as_ptr().add(r * row_bytes + b * 18);
                    let d = _mm_cvtss_f32(halves(p));
                    let s = nibble_dot(p.add(2), x.as_ptr().add(b * 32));
                    acc = _mm256_fmadd_ps(_mm256_set1_ps(d), s, acc);
                    off += d * xs;
                }
            }
            *o = hsum(acc) - 8.0 * off;
        }
    }

    /// `sum(q * x)` over a Q8_0 block's 32 signed bytes: four 8-byte loads that widen as they
    /// load (`vpmovsxbd ymm, m64`), no shuffles.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn byte_dot(q: *const u8, xp: *const f32) -> __m256 {
        unsafe {
            let w = |o: usize| i8s(_mm_loadl_epi64(q.add(o).cast()));
            let a = _mm256_fmadd_ps(w(8), _mm256_loadu_ps(xp.add(8)), _mm256_mul_ps(w(0), _mm256_loadu_ps(xp)));
            let b =
                _mm256_fmadd_ps(w(24), _mm256_loadu_ps(xp.add(24)), _mm256_mul_ps(w(16), _mm256_loadu_ps(xp.add(16))));
            _mm256_add_ps(a, b)
        }
    }

    /// Q8_0: `sum_b d_b * sum(q x)`, four blocks at a time into four register accumulators.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn q8_0(w: &[u8], row_bytes: usize, x: &[f32], _xsum: &[f32], out: &mut [f32]) {
        let blocks = (row_bytes / 34).min(x.len() / 32);
        #[inline(always)]
        unsafe fn step(row: *const u8, x: &[f32], b: usize, acc: &mut __m256) {
            unsafe {
                let p = row.add(b * 34);
                let s = byte_dot(p.add(2), x.as_ptr().add(b * 32));
                *acc = _mm256_fmadd_ps(_mm256_broadcastss_ps(halves(p)), s, *acc);
            }
        }
        for (r, o) in out.iter_mut().enumerate() {
            let row = unsafe { w.as_ptr().add(r * row_bytes) };
            let (mut a0, mut a1, mut a2, mut a3) =
                (_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps());
            let mut b = 0;
            unsafe {
                while b + 4 <= blocks {
                    step(row, x, b, &mut a0);
                    step(row, x, b + 1, &mut a1);
                    step(row, x, b + 2, &mut a2);
                    step(row, x, b + 3, &mut a3);
                    b += 4;
                }
                while b < blocks {
                    step(row, x, b, &mut a0);
                    b += 1;
                }
            }
            *o = hsum(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Random blocks with small finite f16 scales.
    fn random_rows(format: QuantFormat, n: usize, k: usize, seed: u64) -> Vec<u8> {
        let mut s = seed;
        let mut next = || {
            s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (s >> 33) as u8
        };
        let mut w: Vec<u8> = (0..n * format.row_bytes(k).unwrap()).map(|_| next()).collect();
        let scales: &[usize] = match format {
            QuantFormat::Q6K => &[208],
            QuantFormat::Q4_1 | QuantFormat::Q4K | QuantFormat::Q5K => &[0, 2],
            _ => &[0],
        };
        for blk in w.chunks_exact_mut(format.block_bytes()) {
            for &o in scales {
                let v = half::f16::from_f32((f32::from(blk[o]) - 128.0) / 2048.0);
                blk[o..o + 2].copy_from_slice(&v.to_le_bytes());
            }
        }
        w
    }

    /// Against dequantize-then-multiply in f64, for every format, GEMV and GEMM shapes.
    #[test]
    fn matches_dequantized_product() {
        for format in QuantFormat::ALL {
            let (n, k) = (70, 512);
            let w = random_rows(format, n, k, 7);
            let mut dense = vec![0.0f32; n * k];
            format.dequantize(&w, &mut dense).unwrap();
            for m in [1, 3, 9] {
                let x: Vec<f32> = (0..m * k).map(|i| ((i * 37 % 101) as f32 - 50.0) / 50.0).collect();
                let got = quant_matmul(&x, k, &w, n, format).unwrap();
                for i in 0..m {
                    for j in 0..n {
                        let want: f64 = (0..k).map(|t| f64::from(x[i * k + t]) * f64::from(dense[j * k + t])).sum();
                        let scale: f64 =
                            (0..k).map(|t| (f64::from(x[i * k + t]) * f64::from(dense[j * k + t])).abs()).sum();
                        let err = (f64::from(got[i * n + j]) - want).abs();
                        assert!(err <= 1e-5 * scale + 1e-6, "{format} m={m} [{i},{j}]: {} vs {want}", got[i * n + j]);
                    }
                }
            }
        }
    }

    #[test]
    fn refuses_mismatched_sizes() {
        let w = random_rows(QuantFormat::Q4_1, 2, 64, 1);
        assert!(quant_matmul(&[0.0; 64], 64, &w[..39], 2, QuantFormat::Q4_1).is_none());
        assert!(quant_matmul(&[0.0; 60], 60, &w, 2, QuantFormat::Q4_1).is_none());
    }
}
