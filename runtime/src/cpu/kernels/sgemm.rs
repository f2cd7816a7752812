//! The `gemm` crate's f32 product on the kernel path this process runs.
//!
//! `gemm::gemm` always takes the CPU's widest kernels, so on an AVX-512 machine
//! `RUSTRAL_CPU_KERNELS=avx2` used to narrow every loop but the GEMMs, which are most of a
//! model's time: the figure was neither an AVX-512 nor an AVX2 machine's. Here, when the path is
//! narrowed below the CPU's widest, the product runs the same crate's AVX2+FMA (or scalar)
//! micro-kernels through its generic driver instead, so that one machine measures what an AVX2
//! (or baseline) machine would run. Otherwise it is `gemm::gemm` itself.

use gemm::Parallelism;

/// Which kernels the product runs on: `gemm::gemm`'s own choice (the widest) or a narrower set.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kernels {
    Widest,
    Fma,
    Scalar,
}

/// The kernels this process's GEMMs run on (see the module doc).
pub(crate) fn kernels() -> Kernels {
    use crate::cpu::simd::{kernel_path, widest_path};
    match kernel_path() {
        p if p == widest_path() => Kernels::Widest,
        "avx2" => Kernels::Fma,
        _ => Kernels::Scalar,
    }
}

/// `dst = alpha * dst + beta * lhs . rhs` (`alpha` ignored unless `read_dst`), every matrix by
/// its base pointer and its column and row strides in elements, as `gemm::gemm` takes them,
/// on the kernels `kernels()` names.
///
/// # Safety
/// As `gemm::gemm`: every element the three matrices address (m x k, k x n, m x n) must be
/// valid, the destination's for writes and not overlapping the operands, and the strides
/// non-negative.
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn sgemm(
    on: Kernels,
    (m, n, k): (usize, usize, usize),
    dst: *mut f32,
    (dst_cs, dst_rs): (isize, isize),
    read_dst: bool,
    lhs: *const f32,
    (lhs_cs, lhs_rs): (isize, isize),
    rhs: *const f32,
    (rhs_cs, rhs_rs): (isize, isize),
    alpha: f32,
    beta: f32,
    par: Parallelism,
) {
    #[cfg(target_arch = "x86_64")]
    if on != Kernels::Widest {
        // `gemm::gemm` also flips negative strides; this path takes none (the contract).
        debug_assert!(
            [dst_cs, dst_rs, lhs_cs, lhs_rs, rhs_cs, rhs_rs].iter().all(|&s| s >= 0),
            "sgemm: negative stride"
        );
        // `gemm::gemm`'s own first step (for speed; either way is correct): its micro-kernels
        // want a column-major destination, so a row-major product is computed as its transpose
        // (rhs^T . lhs^T).
        let (m, n, dst_cs, dst_rs, lhs, lhs_cs, lhs_rs, rhs, rhs_cs, rhs_rs) = if dst_cs.abs() < dst_rs.abs() {
            (n, m, dst_rs, dst_cs, rhs, rhs_rs, rhs_cs, lhs, lhs_rs, lhs_cs)
        } else {
            (m, n, dst_cs, dst_rs, lhs, lhs_cs, lhs_rs, rhs, rhs_cs, rhs_rs)
        };
        // The narrower set's driver, or false when the CPU lacks a feature it asks for.
        macro_rules! drive {
            ($simd:ty, $kernels:path, $lanes:expr) => {{
                use $kernels as ukr;
                let Some(simd) = <$simd as gemm_common::simd::MixedSimd<f32, f32, f32, f32>>::try_new() else {
                    return false;
                };
                // SAFETY: the caller's contract; the driver is the one `gemm::gemm` runs for this
                // kernel set, with the same constants (`gemm_common::gemm_def!(f32, 2)`).
                unsafe {
                    gemm_common::gemm::gemm_basic_generic::<
                        _,
                        f32,
                        { $lanes },
                        { ukr::MR_DIV_N * $lanes },
                        { ukr::NR },
                        { ukr::MR_DIV_N },
                        { ukr::H_M },
                        { ukr::H_N },
                    >(
                        simd,
                        m,
                        n,
                        k,
                        dst,
                        dst_cs,
                        dst_rs,
                        read_dst,
                        lhs,
                        lhs_cs,
                        lhs_rs,
                        rhs,
                        rhs_cs,
                        rhs_rs,
                        alpha,
                        beta,
                        false,
                        false,
                        false,
                        |a, b, c| a * b + c,
                        &ukr::UKR,
                        &ukr::H_UKR,
                        false,
                        par,
                    )
                };
                true
            }};
        }
        let narrowed = || match on {
            Kernels::Fma => drive!(gemm_common::simd::V3, gemm_f32::microkernel::fma::f32, 8),
            _ => drive!(gemm_common::simd::Scalar, gemm_f32::microkernel::scalar::f32, 1),
        };
        if narrowed() {
            return;
        }
        // Else the CPU lacks one of the features pulp's V3 asks for beyond AVX2 and FMA (BMI1/2,
        // LZCNT, POPCNT; every AVX-512 CPU has them), and the crate's own choice runs.
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = on; // only x86-64 has narrower kernel sets
    // SAFETY: the caller's contract is `gemm::gemm`'s.
    unsafe {
        gemm::gemm(
            m, n, k, dst, dst_cs, dst_rs, read_dst, lhs, lhs_cs, lhs_rs, rhs, rhs_cs, rhs_rs, alpha, beta, false,
            false, false, par,
        )
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every kernel set this CPU can run gives the f64 product, for both destination layouts
    /// (the transposition above), strided and transposed operands, accumulation, shapes that
    /// leave partial micro-tiles, and the tiny products the crate sends to other paths.
    #[test]
    fn every_kernel_set_computes_the_product() {
        let sets: &[Kernels] = match crate::cpu::simd::widest_path() {
            "baseline" => &[Kernels::Widest, Kernels::Scalar],
            _ => &[Kernels::Widest, Kernels::Fma, Kernels::Scalar],
        };
        let value = |i: usize| ((i * 37 % 23) as f32 - 11.0) / 7.0;
        for &(m, n, k) in &[(1, 1, 1), (3, 5, 2), (4, 4, 4), (17, 33, 65), (64, 48, 200), (1, 70, 30), (70, 1, 30)] {
            for (transpose_lhs, col_major_dst) in [(false, false), (true, false), (false, true), (true, true)] {
                let lhs: Vec<f32> = (0..m * k).map(value).collect();
                let rhs: Vec<f32> = (0..k * n * 2).map(|i| value(i + 5)).collect();
                // lhs is m x k row-major, or read as the transpose of a k x m matrix; rhs k x n
                // with a row stride of 2n (every other row of a wider matrix's storage).
                let (lhs_cs, lhs_rs) = if transpose_lhs { (m as isize, 1) } else { (1, k as isize) };
                let (rhs_cs, rhs_rs) = (1isize, 2 * n as isize);
                let (dst_cs, dst_rs) = if col_major_dst { (m as isize, 1) } else { (1, n as isize) };
                let at = |data: &[f32], cs: isize, rs: isize, r: usize, c: usize| {
                    data[(r as isize * rs + c as isize * cs) as usize] as f64
                };
                let start: Vec<f32> = (0..m * n).map(|i| value(i + 9)).collect();
                for &on in sets {
                    for accumulate in [false, true] {
                        let mut dst = start.clone();
                        // SAFETY: the strides above address exactly the three buffers.
                        unsafe {
                            sgemm(
                                on,
                                (m, n, k),
                                dst.as_mut_ptr(),
                                (dst_cs, dst_rs),
                                accumulate,
                                lhs.as_ptr(),
                                (lhs_cs, lhs_rs),
                                rhs.as_ptr(),
                                (rhs_cs, rhs_rs),
                                1.0,
                                0.5,
                                Parallelism::None,
                            )
                        };
                        for r in 0..m {
                            for c in 0..n {
                                let dot: f64 = (0..k)
                                    .map(|d| at(&lhs, lhs_cs, lhs_rs, r, d) * at(&rhs, rhs_cs, rhs_rs, d, c))
                                    .sum();
                                let before = if accumulate { at(&start, dst_cs, dst_rs, r, c) } else { 0.0 };
                                let want = before + 0.5 * dot;
                                let got = at(&dst, dst_cs, dst_rs, r, c);
                                assert!(
                                    (got - want).abs() <= 1e-4 * (1.0 + want.abs()),
                                    "{on:?} {m}x{n}x{k} lhs^T {transpose_lhs} col-major dst {col_major_dst} \
                                     accumulate {accumulate}: [{r},{c}] = {got}, want {want}"
                                );
                            }
                        }
                    }
                }
            }
        }
    }
}
