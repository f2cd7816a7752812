//! Vector-friendly f32 math and loops. `exp`, `tanh` and `erf` are branch-free polynomial
//! forms (within a few ulp; see the tests) so that loops over slices vectorise; the loop
//! drivers are compiled twice, once for AVX2+FMA (chosen at run time when the CPU has them)
//! and once for the baseline, so the binary stays portable.

use std::mem::MaybeUninit;

/// The polynomial `p(r) ~ e^r` on `|r| <= ln2/2` that `exp` evaluates, lowest degree first:
/// `1 + r` exactly, then a degree-5 fit of least maximum relative error (1.1e-7; with the
/// f32 rounding of the whole `exp`, under 2e-7 relative over the finite range). Five
/// multiply-adds where the Taylor series needs seven for the same accuracy. The JIT
/// evaluates the same table step for step.
pub(crate) const EXP_POLY: [f32; 6] = [1.0, 1.0, 0.499_992, 0.166_671_34, 0.041_894_5, 0.008_312_049];

/// `e^x` for f32: `2^n * p(r)` with `x = n ln 2 + r`, `|r| <= ln2/2`, p the polynomial
/// `EXP_POLY`; inputs are clamped to the finite range, NaN passes through the arithmetic.
/// The elementwise kernels, the JIT and the interpreter all evaluate this, so they agree bit
/// for bit; `exp_with::<true>` is the fused form the row kernels use.
#[inline(always)]
pub fn exp(x: f32) -> f32 {
    exp_with::<false>(x)
}

/// `a * b + c`: one fused multiply-add (one rounding) where `FMA`, which only the AVX2 and
/// AVX-512 copies of a `multiversion!` body pass (there it is one instruction; in the baseline
/// copy it would be a call to the C library's `fmaf`), else a multiply and an add.
#[inline(always)]
pub fn madd<const FMA: bool>(a: f32, b: f32, c: f32) -> f32 {
    if FMA { a.mul_add(b, c) } else { a * b + c }
}

/// `exp`, its multiply-adds fused where `FMA` (`madd`): eight fused operations where the
/// plain form has sixteen, a third fewer instructions per vector in softmax's loop. The
/// result differs from `exp`'s by rounding only (the same polynomial; the tests hold both
/// within 4e-7 relative of e^x), so only kernels checked against the reference by a tolerance use it
/// (softmax, attention, cross-entropy), not the elementwise bodies, which give the
/// interpreter's bits.
#[inline(always)]
pub fn exp_with<const FMA: bool>(x: f32) -> f32 {
    let y = exp_core::<FMA>(x.clamp(EXP_MIN, EXP_MAX));
    // A NaN input is NaN through `p` (NaN times any scale is NaN) and fails both tests.
    if x < EXP_MIN {
        0.0
    } else if x > EXP_MAX {
        f32::INFINITY
    } else {
        y
    }
}

/// The range `exp` evaluates its polynomial on: below it the result is 0, above it infinity
/// (the JIT's `exp` uses the same bounds).
pub(crate) const EXP_MIN: f32 = -87.33;
pub(crate) const EXP_MAX: f32 = 88.72;

/// `exp_with` for `x <= 0` or NaN (a softmax's shifted values, `erfc`'s `-a^2`): the same
/// bits there, with both clamps and the overflow test left out (four fewer operations a
/// vector, and two fewer constants held in registers). An `x` under the range gives 0 by
/// the test whatever `exp_core` made of it.
#[inline(always)]
pub fn exp_nonpositive<const FMA: bool>(x: f32) -> f32 {
    let y = exp_core::<FMA>(x);
    if x < EXP_MIN { 0.0 } else { y }
}

/// `2^n * p(r)` for `x` within `EXP_MIN..=EXP_MAX` (unchecked: outside it the result is
/// meaningless): the arithmetic every form of `exp` shares, for callers that know their
/// argument's range (`tanh`'s `2|x| <= 20`).
#[inline(always)]
fn exp_core<const FMA: bool>(x: f32) -> f32 {
    const LOG2E: f32 = std::f32::consts::LOG2_E;
    const LN2_HI: f32 = 0.693_359_4;
    const LN2_LO: f32 = -2.121_944_4e-4;
    // Round to nearest by adding 1.5 * 2^23 (no call to floorf, which does not vectorise
    // without SSE4.1).
    const ROUND: f32 = 12_582_912.0;
    let shifted = madd::<FMA>(x, LOG2E, ROUND);
    let n = shifted - ROUND;
    let r = madd::<FMA>(-n, LN2_LO, madd::<FMA>(-n, LN2_HI, x));
    let [c0, c1, c2, c3, c4, c5] = EXP_POLY;
    let p = madd::<FMA>(r, madd::<FMA>(r, madd::<FMA>(r, madd::<FMA>(r, madd::<FMA>(r, c5, c4), c3), c2), c1), c0);
    // `n + 127` read from the low mantissa bits of `shifted` (equal to `n as i32 + 127` over
    // the range): integer lane arithmetic, where `as i32` saturates lane by lane in scalar
    // code.
    let scale = f32::from_bits(shifted.to_bits().wrapping_sub(ROUND.to_bits() - 127) << 23);
    p * scale
}

/// `tanh(x) = 1 - 2 / (e^(2x) + 1)`, saturating to ±1, odd by construction.
#[inline(always)]
pub fn tanh(x: f32) -> f32 {
    let a = x.abs().min(10.0);
    // `2a <= 20` is within `exp`'s range, so its clamps and tests would change nothing.
    let t = 1.0 - 2.0 / (exp_core::<false>(2.0 * a) + 1.0);
    // For small |x| the subtraction above loses digits; the Taylor series is exact there.
    let small = a * (1.0 - a * a * (1.0 / 3.0 - a * a * (2.0 / 15.0)));
    let t = if a < 0.0625 { small } else { t };
    // `min` above drops NaN, so NaN is passed through here.
    if x.is_nan() { x } else { t.copysign(x) }
}

/// `erfc(a)` for `a >= 0` by Abramowitz and Stegun 7.1.26: keeps the tail's magnitude where
/// `1 - erf` would cancel to zero (relative error 3e-5 at 2, a few percent by 9).
#[inline(always)]
fn erfc_nonneg(a: f32) -> f32 {
    let t = 1.0 / (1.0 + 0.327_591_1 * a);
    let poly = t * (0.254_829_6 + t * (-0.284_496_72 + t * (1.421_413_7 + t * (-1.453_152_1 + t * 1.061_405_4))));
    poly * exp_nonpositive::<false>(-a * a)
}

/// `erf(x)`: its Maclaurin series near 0 (so `erf(0) = 0` exactly and small inputs keep their
/// relative accuracy), Abramowitz and Stegun 7.1.26 beyond (1.5e-7 in exact arithmetic; below
/// 1e-6 in f32).
#[inline(always)]
pub fn erf(x: f32) -> f32 {
    let a = x.abs();
    let x2 = x * x;
    let series =
        std::f32::consts::FRAC_2_SQRT_PI * x * (1.0 - x2 * (1.0 / 3.0 - x2 * (1.0 / 10.0 - x2 * (1.0 / 42.0))));
    let far = (1.0 - erfc_nonneg(a)).copysign(x);
    if a < 0.25 { series } else { far }
}

/// `1 + erf(z)` without cancellation for negative `z` (it is `erfc(-z)` there).
#[inline(always)]
pub fn one_plus_erf(z: f32) -> f32 {
    let c = erfc_nonneg(z.abs());
    if z < 0.0 { c } else { 2.0 - c }
}

/// `dst[i] = f(src[i])`, vectorised where the CPU allows; writes every value of `dst` (which
/// may start uninitialised) when the slices have one length.
pub fn map(src: &[f32], dst: &mut [MaybeUninit<f32>], f: impl Fn(f32) -> f32 + Copy) {
    #[cfg(target_arch = "x86_64")]
    if has_avx512() {
        // SAFETY: the CPU supports the features `map_avx512` is compiled for.
        unsafe { map_avx512(src, dst, f) };
        return;
    }
    #[cfg(target_arch = "x86_64")]
    if has_avx2() {
        // SAFETY: the CPU supports the features `map_avx2` is compiled for.
        unsafe { map_avx2(src, dst, f) };
        return;
    }
    map_plain(src, dst, f);
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512dq,avx512vl,avx2,fma")]
unsafe fn map_avx512(src: &[f32], dst: &mut [MaybeUninit<f32>], f: impl Fn(f32) -> f32 + Copy) {
    map_plain(src, dst, f);
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn map_avx2(src: &[f32], dst: &mut [MaybeUninit<f32>], f: impl Fn(f32) -> f32 + Copy) {
    map_plain(src, dst, f);
}

#[inline(always)]
fn map_plain(src: &[f32], dst: &mut [MaybeUninit<f32>], f: impl Fn(f32) -> f32 + Copy) {
    for (d, &s) in dst.iter_mut().zip(src) {
        d.write(f(s));
    }
}

/// Independent partial sums in the reductions below: four AVX-512 registers (eight AVX2
/// ones), enough chains that the adds' latency does not bound a row that sits in L1.
const ACC: usize = 64;

/// Sum of a slice in `ACC` independent lanes (so it vectorises; f32 addition is not
/// associative, so the compiler will not reorder a plain fold). What is left after whole
/// blocks of `ACC` goes into the first `SMALL` lanes, so a short row (an attention row of a
/// few dozen visible keys) is summed in vectors too.
#[inline(always)]
pub fn sum(xs: &[f32]) -> f32 {
    let mut acc = [0.0f32; ACC];
    let chunks = xs.chunks_exact(ACC);
    let rest = chunks.remainder();
    for c in chunks {
        for i in 0..ACC {
            acc[i] += c[i];
        }
    }
    let small = rest.chunks_exact(SMALL);
    let tail = small.remainder();
    for c in small {
        for i in 0..SMALL {
            acc[i] += c[i];
        }
    }
    halve(acc, |a, b| a + b) + tail.iter().sum::<f32>()
}

/// Lanes of one AVX-512 register: the block size for what is left after whole `ACC` blocks.
const SMALL: usize = 16;

/// `dst[i] = e^(src[i] - m)`, returning their sum in `SMALL` lanes: softmax's exponentials
/// and their total in one pass over the row (`dst` may start uninitialised; the slices have
/// one length). `FMA`: as `exp_with`. `m` is the row's maximum (`max_for_shift`), so every
/// shifted value is `<= 0` or NaN and `exp_nonpositive` gives `exp_with`'s bits.
#[inline(always)]
pub fn exp_shifted_into<const FMA: bool>(src: &[f32], m: f32, dst: &mut [MaybeUninit<f32>]) -> f32 {
    let mut acc = [0.0f32; SMALL];
    let (mut d, mut s) = (dst.chunks_exact_mut(SMALL), src.chunks_exact(SMALL));
    for (dc, sc) in (&mut d).zip(&mut s) {
        for i in 0..SMALL {
            let e = exp_nonpositive::<FMA>(sc[i] - m);
            dc[i].write(e);
            acc[i] += e;
        }
    }
    let mut tail = 0.0;
    for (dv, &sv) in d.into_remainder().iter_mut().zip(s.remainder()) {
        tail += *dv.write(exp_nonpositive::<FMA>(sv - m));
    }
    halve(acc, |a, b| a + b) + tail
}

/// `row[i] = e^(row[i] - m)` in place, returning their sum (as `exp_shifted_into`).
#[inline(always)]
pub fn exp_shifted_in_place<const FMA: bool>(row: &mut [f32], m: f32) -> f32 {
    let mut acc = [0.0f32; SMALL];
    let mut chunks = row.chunks_exact_mut(SMALL);
    for c in &mut chunks {
        for i in 0..SMALL {
            c[i] = exp_nonpositive::<FMA>(c[i] - m);
            acc[i] += c[i];
        }
    }
    let mut tail = 0.0;
    for v in chunks.into_remainder() {
        *v = exp_nonpositive::<FMA>(*v - m);
        tail += *v;
    }
    halve(acc, |a, b| a + b) + tail
}

/// The sum of `e^(x - m)` over `xs`, in `SMALL` lanes (a log-sum-exp's sum).
#[inline(always)]
pub fn sum_exp_shifted<const FMA: bool>(xs: &[f32], m: f32) -> f32 {
    let mut acc = [0.0f32; SMALL];
    let chunks = xs.chunks_exact(SMALL);
    let tail: f32 = chunks.remainder().iter().map(|&v| exp_nonpositive::<FMA>(v - m)).sum();
    for c in chunks {
        for i in 0..SMALL {
            acc[i] += exp_nonpositive::<FMA>(c[i] - m);
        }
    }
    halve(acc, |a, b| a + b) + tail
}

/// Sum of `(x - m)^2` in `ACC` lanes.
#[inline(always)]
pub fn sum_sq_dev(xs: &[f32], m: f32) -> f32 {
    let mut acc = [0.0f32; ACC];
    let chunks = xs.chunks_exact(ACC);
    let rest = chunks.remainder();
    for c in chunks {
        for i in 0..ACC {
            let d = c[i] - m;
            acc[i] += d * d;
        }
    }
    halve(acc, |a, b| a + b) + rest.iter().map(|&v| (v - m) * (v - m)).sum::<f32>()
}

/// The largest value, NaN if any is NaN (the IR's `max`), in `ACC` lanes (the rest in
/// `SMALL` lanes, as `sum` does).
#[inline(always)]
pub fn max(xs: &[f32]) -> f32 {
    #[inline(always)]
    fn step(m: f32, v: f32) -> f32 {
        if v.is_nan() || m.is_nan() { f32::NAN } else { m.max(v) }
    }
    let mut acc = [f32::NEG_INFINITY; ACC];
    let chunks = xs.chunks_exact(ACC);
    let rest = chunks.remainder();
    for c in chunks {
        for i in 0..ACC {
            acc[i] = step(acc[i], c[i]);
        }
    }
    let small = rest.chunks_exact(SMALL);
    let tail = small.remainder();
    for c in small {
        for i in 0..SMALL {
            acc[i] = step(acc[i], c[i]);
        }
    }
    // Halve the lanes down to one: a step per halving, not a scalar pass over the last lanes
    // (whose NaN checks cost a short row as much as its values).
    tail.iter().fold(halve(acc, step), |m, &v| step(m, v))
}

/// The largest value with NaN skipped (`-inf` for an empty or all-NaN slice), one `maxps` a
/// vector: for the shift of a softmax or log-sum-exp, where a NaN in the row reaches every
/// output through the sum anyway (`e^(NaN - m)` is NaN), so the result is the same as with
/// the IR's NaN-propagating `max`.
#[inline(always)]
pub fn max_for_shift(xs: &[f32]) -> f32 {
    #[inline(always)]
    fn step(m: f32, v: f32) -> f32 {
        if v > m { v } else { m }
    }
    let mut acc = [f32::NEG_INFINITY; SMALL];
    let chunks = xs.chunks_exact(SMALL);
    let tail = chunks.remainder();
    for c in chunks {
        for i in 0..SMALL {
            acc[i] = step(acc[i], c[i]);
        }
    }
    tail.iter().fold(halve(acc, step), |m, &v| step(m, v))
}

/// The lanes combined by `step` pairwise by halving (the upper half into the lower, until
/// one lane is left): a dependent step per halving, not one per lane. Every reduction here
/// ends with it.
#[inline(always)]
fn halve<const N: usize>(mut acc: [f32; N], step: impl Fn(f32, f32) -> f32) -> f32 {
    let mut half = N / 2;
    while half >= 1 {
        for i in 0..half {
            acc[i] = step(acc[i], acc[i + half]);
        }
        half /= 2;
    }
    acc[0]
}

/// The kernel paths, widest first: which one runs is the widest the CPU has, unless the
/// environment variable `RUSTRAL_CPU_KERNELS` (`avx512`, `avx2` or `baseline`) asks for a
/// narrower one, so that an AVX-512 machine can measure what an AVX2 machine would run.
pub const KERNEL_PATHS: [&str; 3] = ["avx512", "avx2", "baseline"];

/// The widest kernel path this CPU can run (see `KERNEL_PATHS`), whatever the environment asks.
pub fn widest_path() -> &'static str {
    KERNEL_PATHS[widest_index()]
}

/// `widest_path`'s place in `KERNEL_PATHS`.
fn widest_index() -> usize {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma") {
        let avx512 = std::arch::is_x86_feature_detected!("avx512f")
            && std::arch::is_x86_feature_detected!("avx512dq")
            && std::arch::is_x86_feature_detected!("avx512vl");
        return if avx512 { 0 } else { 1 };
    }
    2
}

/// The kernel path this process runs (see `KERNEL_PATHS`), decided once: the widest, or the
/// narrower one `RUSTRAL_CPU_KERNELS` names.
pub fn kernel_path() -> &'static str {
    static PATH: std::sync::OnceLock<&'static str> = std::sync::OnceLock::new();
    PATH.get_or_init(|| {
        let widest = widest_index();
        let asked = std::env::var("RUSTRAL_CPU_KERNELS").ok().and_then(|v| KERNEL_PATHS.iter().position(|p| *p == v));
        KERNEL_PATHS[asked.map_or(widest, |a| a.max(widest))]
    })
}

/// Declares [`PROBED_FEATURES`] and [`cpu_features`] from one list, so that the two agree.
macro_rules! probed_features {
    ($($f:tt),*) => {
        /// The features [`cpu_features`] probes, by `std::arch` name.
        pub const PROBED_FEATURES: &[&str] = &[$($f),*];

        /// The CPU's SIMD features that matter to the kernels here and to the peers they are
        /// compared with (empty off x86-64), for manifests. This is what CPUID tells this
        /// process, which something can narrow (`bench/cpuid/avx2_only.c`):
        /// `provenance::Machine::cpuid_hidden` records the difference from /proc/cpuinfo.
        pub fn cpu_features() -> Vec<String> {
            #[allow(unused_mut)]
            let mut found = Vec::new();
            #[cfg(target_arch = "x86_64")]
            {
                $(
                    if std::arch::is_x86_feature_detected!($f) {
                        found.push($f.to_string());
                    }
                )*
            }
            found
        }
    };
}
probed_features!(
    "sse4.2",
    "avx",
    "avx2",
    "fma",
    "f16c",
    "avx512f",
    "avx512dq",
    "avx512vl",
    "avx512bw",
    "avx512vnni",
    "avx512bf16"
);

/// True when the AVX-512 versions may run.
#[inline]
pub fn has_avx512() -> bool {
    kernel_path() == "avx512"
}

/// True when the AVX2+FMA versions may run.
#[inline]
pub fn has_avx2() -> bool {
    kernel_path() != "baseline"
}

/// Define `fn $name(args) -> ret` three times, as a baseline body and as AVX2+FMA and AVX-512
/// copies of the same body, and dispatch at run time. Closures passed into a target-feature function are not
/// compiled with its features, so kernels that need the wide registers are written as plain
/// functions through this macro. In the body the constant `FMA` is true in the two copies that
/// have fused multiply-add (see `madd`).
macro_rules! multiversion {
    ($(#[$doc:meta])* fn $name:ident($($arg:ident: $ty:ty),* $(,)?) $(-> $ret:ty)? $body:block) => {
        $(#[$doc])*
        fn $name($($arg: $ty),*) $(-> $ret)? {
            $crate::cpu::simd::multiversion! {
                #[inline(always)]
                unsafe fn versions($($arg: $ty),*) $(-> $ret)? $body
            }
            // SAFETY: the body is safe code: inside an `unsafe fn` an unsafe operation still
            // needs an `unsafe` block (edition 2024's `unsafe_op_in_unsafe_fn`, an error under
            // the project's lint run), so `versions` has no contract beyond the CPU check it
            // makes itself.
            unsafe { versions($($arg),*) }
        }
    };
    // An `unsafe fn`: its caller bears the body's safety contract. The safe form above is this
    // one wrapped.
    ($(#[$doc:meta])* unsafe fn $name:ident($($arg:ident: $ty:ty),* $(,)?) $(-> $ret:ty)? $body:block) => {
        $(#[$doc])*
        unsafe fn $name($($arg: $ty),*) $(-> $ret)? {
            #[inline(always)]
            #[allow(unused)]
            unsafe fn body<const FMA: bool>($($arg: $ty),*) $(-> $ret)? $body
            #[cfg(target_arch = "x86_64")]
            #[target_feature(enable = "avx2,fma")]
            unsafe fn avx2($($arg: $ty),*) $(-> $ret)? {
                // SAFETY: the caller's contract.
                unsafe { body::<true>($($arg),*) }
            }
            #[cfg(target_arch = "x86_64")]
            #[target_feature(enable = "avx512f,avx512dq,avx512vl,avx2,fma")]
            unsafe fn avx512($($arg: $ty),*) $(-> $ret)? {
                // SAFETY: the caller's contract.
                unsafe { body::<true>($($arg),*) }
            }
            #[cfg(target_arch = "x86_64")]
            if $crate::cpu::simd::has_avx512() {
                // SAFETY: the CPU supports the features `avx512` is compiled for; the caller's
                // contract.
                return unsafe { avx512($($arg),*) };
            }
            #[cfg(target_arch = "x86_64")]
            if $crate::cpu::simd::has_avx2() {
                // SAFETY: the CPU supports the features `avx2` is compiled for; the caller's
                // contract.
                return unsafe { avx2($($arg),*) };
            }
            // SAFETY: the caller's contract.
            unsafe { body::<false>($($arg),*) }
        }
    };
}
pub(crate) use multiversion;

#[cfg(test)]
mod tests {
    use super::*;

    /// `sum`, `max` and `max_for_shift` at every length across the block sizes (whole `ACC` blocks, `SMALL`
    /// blocks of the rest, a scalar tail) against plain loops in f64; `max` is NaN wherever
    /// a NaN sits. Tolerance for the sum: 1e-6 relative to the sum of magnitudes.
    #[test]
    fn reductions_match_plain_loops_at_every_length() {
        for n in 0..200usize {
            let xs: Vec<f32> = (0..n).map(|i| ((i * 7919) % 113) as f32 * 0.05 - 2.5).collect();
            let want: f64 = xs.iter().map(|&x| f64::from(x)).sum();
            let mag: f64 = xs.iter().map(|&x| f64::from(x).abs()).sum::<f64>().max(1.0);
            assert!((f64::from(sum(&xs)) - want).abs() <= 1e-6 * mag, "sum of {n}");
            let top = xs.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            assert_eq!(max(&xs), top, "max of {n}");
            assert_eq!(max_for_shift(&xs), top, "max_for_shift of {n}");
            for at in [0, n / 2, n.saturating_sub(1)] {
                if at < n {
                    let mut with_nan = xs.clone();
                    with_nan[at] = f32::NAN;
                    assert!(max(&with_nan).is_nan(), "NaN at {at} of {n}");
                    // NaN skipped: the largest of the others.
                    let others = with_nan.iter().copied().filter(|v| !v.is_nan()).fold(f32::NEG_INFINITY, f32::max);
                    assert_eq!(max_for_shift(&with_nan), others, "max_for_shift with NaN at {at} of {n}");
                }
            }
        }
    }

    /// The path that runs is one of the three, never wider than the CPU, and the recorded
    /// features agree with the CPU's own detection.
    #[test]
    fn kernel_path_is_what_the_cpu_has() {
        let path = kernel_path();
        assert!(KERNEL_PATHS.contains(&path), "{path}");
        let features = cpu_features();
        #[cfg(target_arch = "x86_64")]
        {
            assert_eq!(features.contains(&"avx2".to_string()), std::arch::is_x86_feature_detected!("avx2"));
            if path == "avx512" {
                assert!(features.contains(&"avx512f".to_string()) && features.contains(&"fma".to_string()));
            }
            if path != "baseline" {
                assert!(std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma"));
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        assert!(features.is_empty() && path == "baseline");
    }

    /// Against std (correctly rounded to within 1 ulp) over a grid of inputs.
    #[test]
    fn math_matches_std_within_a_few_ulp() {
        let mut worst = [0.0f64; 3];
        let mut fused_worst = 0.0f64;
        for i in -40_000..=40_000 {
            let x = i as f32 * 0.0005;
            let rel = |a: f32, b: f64| ((f64::from(a) - b) / b.abs().max(1e-30)).abs();
            worst[0] = worst[0].max(rel(exp(x * 4.0), f64::from(x * 4.0).exp()));
            // The fused form (here `fmaf` calls, the same roundings as the instructions),
            // up to 88 (past about 88.38 both forms overflow early: a known limit of `exp`).
            fused_worst = fused_worst.max(rel(exp_with::<true>(x * 4.4), f64::from(x * 4.4).exp()));
            worst[1] = worst[1].max((f64::from(tanh(x)) - f64::from(x).tanh()).abs());
            worst[2] = worst[2].max((f64::from(erf(x)) - libm::erf(f64::from(x))).abs());
        }
        assert!(worst[0] < 4e-7, "exp relative error {}", worst[0]);
        assert!(fused_worst < 4e-7, "fused exp relative error {fused_worst}");
        for fused in [exp_with::<true>, exp_with::<false>] {
            assert_eq!(fused(f32::NEG_INFINITY), 0.0);
            assert_eq!(fused(-100.0), 0.0);
            assert_eq!(fused(100.0), f32::INFINITY);
            assert!(fused(f32::NAN).is_nan());
        }
        // The unfused form has the bits of the formula the JIT and the interpreter evaluate,
        // written out here as it stood before `madd`: `r = x - n ln2_hi - n ln2_lo`, Horner.
        let plain = |x0: f32| {
            let x = x0.clamp(-87.33, 88.72);
            let shifted = x * std::f32::consts::LOG2_E + 12_582_912.0;
            let n = shifted - 12_582_912.0;
            let r = x - n * 0.693_359_4 - n * -2.121_944_4e-4;
            let [c0, c1, c2, c3, c4, c5] = EXP_POLY;
            let p = c0 + r * (c1 + r * (c2 + r * (c3 + r * (c4 + r * c5))));
            let scale = f32::from_bits(shifted.to_bits().wrapping_sub(12_582_912f32.to_bits() - 127) << 23);
            if x0 < -87.33 {
                0.0
            } else if x0 > 88.72 {
                f32::INFINITY
            } else {
                p * scale
            }
        };
        for i in -20_000..=20_000 {
            let x = i as f32 * 0.004_37;
            assert_eq!(exp(x).to_bits(), plain(x).to_bits(), "exp({x})");
        }
        assert!(worst[1] < 4e-7, "tanh absolute error {}", worst[1]);
        assert!(worst[2] < 1e-6, "erf absolute error {}", worst[2]);
        // 1 + erf(z) stays non-zero with the right magnitude deep into the negative tail,
        // where `1 + erf` in f32 is exactly 0 (A&S 7.1.26's relative error grows there:
        // 3e-5 at z = -2, 4e-2 at z = -9).
        for (z, bound) in [(-1.0f32, 1e-6), (-2.0, 3e-5), (-4.0, 3e-3), (-9.0, 4e-2)] {
            let want = libm::erfc(-f64::from(z));
            let got = f64::from(one_plus_erf(z));
            assert!(((got - want) / want).abs() < bound, "1 + erf({z}) = {got}, want {want}");
        }
        assert_eq!(exp(f32::NEG_INFINITY), 0.0);
        assert_eq!(exp(100.0), f32::INFINITY);
        assert!(exp(f32::NAN).is_nan());
        assert_eq!(tanh(20.0), 1.0);
        assert_eq!(erf(0.0), 0.0);
        assert!(erf(-0.0).is_sign_negative() && erf(-0.0) == 0.0);
        assert!((f64::from(erf(1e-3)) / libm::erf(1e-3) - 1.0).abs() < 1e-6, "relative accuracy near 0");
        assert!(tanh(f32::NAN).is_nan() && erf(f32::NAN).is_nan() && one_plus_erf(f32::NAN).is_nan());
        assert_eq!(tanh(-20.0), -1.0);
    }

    /// `exp_nonpositive` and `tanh`'s unchecked `exp_core` give `exp_with`'s bits wherever
    /// they are used (`x <= 0` or NaN; `0 <= x <= 20`), both roundings, the edges included:
    /// the kernels that use them are held to the interpreter's bits through them.
    #[test]
    fn exp_shortcuts_give_the_checked_bits_on_their_ranges() {
        let edges = [0.0f32, -0.0, -87.33, -87.329_99, -87.330_01, -100.0, -1e30, f32::NEG_INFINITY, f32::MIN];
        let grid = (0..=200_000).map(|i| -(i as f32) * 0.000_5);
        for x in grid.chain(edges) {
            assert_eq!(exp_nonpositive::<false>(x).to_bits(), exp_with::<false>(x).to_bits(), "exp_nonpositive({x})");
            assert_eq!(
                exp_nonpositive::<true>(x).to_bits(),
                exp_with::<true>(x).to_bits(),
                "fused exp_nonpositive({x})"
            );
        }
        assert!(exp_nonpositive::<false>(f32::NAN).is_nan() && exp_nonpositive::<true>(f32::NAN).is_nan());
        for i in 0..=40_000 {
            let x = i as f32 * 0.000_5;
            assert_eq!(exp_core::<false>(x).to_bits(), exp_with::<false>(x).to_bits(), "exp_core({x})");
        }
    }
}
