//! Summary statistics of repeated timings: mean, median, sample standard deviation and a 95%
//! confidence interval of the mean (Student's t, since repeat counts are small).

use serde::{Deserialize, Serialize};

/// What a manifest records about a sample of timings (milliseconds).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    /// Sample size.
    pub n: usize,
    /// Arithmetic mean.
    pub mean_ms: f64,
    /// Median (the mean of the middle two for an even count).
    pub median_ms: f64,
    /// Sample standard deviation (n - 1 in the denominator); 0 for one value.
    pub std_ms: f64,
    /// 95% confidence interval of the mean: mean -/+ t(0.975, n - 1) * std / sqrt(n).
    pub ci95_ms: [f64; 2],
    /// Smallest and largest values.
    pub min_ms: f64,
    /// Largest value.
    pub max_ms: f64,
}

/// `xs` in ascending order.
fn sorted(xs: &[f64]) -> Vec<f64> {
    let mut sorted = xs.to_vec();
    sorted.sort_by(f64::total_cmp);
    sorted
}

/// The median of ascending, non-empty `sorted` (the mean of the middle two for an even count).
fn median_of_sorted(sorted: &[f64]) -> f64 {
    let n = sorted.len();
    if n % 2 == 1 { sorted[n / 2] } else { (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0 }
}

/// Summarise `xs` (at least one value).
pub fn summarize(xs: &[f64]) -> Summary {
    assert!(!xs.is_empty(), "no timings to summarise");
    let n = xs.len();
    let mean = xs.iter().sum::<f64>() / n as f64;
    let sorted = sorted(xs);
    let median = median_of_sorted(&sorted);
    let std = if n > 1 { (xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1) as f64).sqrt() } else { 0.0 };
    let half = if n > 1 { t_975(n - 1) * std / (n as f64).sqrt() } else { 0.0 };
    Summary {
        n,
        mean_ms: mean,
        median_ms: median,
        std_ms: std,
        ci95_ms: [mean - half, mean + half],
        min_ms: sorted[0],
        max_ms: sorted[n - 1],
    }
}

/// The 0.975 quantile of Student's t with `df` degrees of freedom: exact table values to 30,
/// then the Cornish-Fisher expansion around the normal quantile (error below 1e-4 there).
pub fn t_975(df: usize) -> f64 {
    const TABLE: [f64; 30] = [
        12.706205, 4.302653, 3.182446, 2.776445, 2.570582, 2.446912, 2.364624, 2.306004, 2.262157, 2.228139, 2.200985,
        2.178813, 2.160369, 2.144787, 2.131450, 2.119905, 2.109816, 2.100922, 2.093024, 2.085963, 2.079614, 2.073873,
        2.068658, 2.063899, 2.059539, 2.055529, 2.051831, 2.048407, 2.045230, 2.042272,
    ];
    if (1..=30).contains(&df) {
        return TABLE[df - 1];
    }
    let z = 1.959_963_984_540_054;
    let v = df.max(1) as f64;
    let z3 = z * z * z;
    let z5 = z3 * z * z;
    let z7 = z5 * z * z;
    z + (z3 + z) / (4.0 * v)
        + (5.0 * z5 + 16.0 * z3 + 3.0 * z) / (96.0 * v * v)
        + (3.0 * z7 + 19.0 * z5 + 17.0 * z3 - 15.0 * z) / (384.0 * v * v * v)
}

/// The median of `xs` with a distribution-free 95% confidence interval: the order statistics
/// x(k) and x(n+1-k), k the largest rank with P(Binomial(n, 1/2) < k) <= 0.025, so that the
/// interval covers the true median with at least 95% probability whatever the distribution
/// (timings are skewed: a slow outlier must not move it as it moves a mean's). With fewer than
/// 6 values no such k exists and the interval is the whole range. `None` for no values.
pub fn median_ci95(xs: &[f64]) -> Option<(f64, [f64; 2])> {
    if xs.is_empty() {
        return None;
    }
    let n = xs.len();
    let sorted = sorted(xs);
    let median = median_of_sorted(&sorted);
    // P(X <= j) for X ~ Binomial(n, 1/2), summed in log space (0.5^n underflows past n ~ 1000).
    let ln_half_n = n as f64 * 0.5f64.ln();
    let mut ln_choose = 0.0f64; // ln C(n, j)
    let mut cdf = 0.0f64;
    let mut k = 0; // P(X < k) <= 0.025 holds for k = 0 trivially
    for j in 0..n {
        if j > 0 {
            ln_choose += ((n - j + 1) as f64).ln() - (j as f64).ln();
        }
        cdf += (ln_choose + ln_half_n).exp();
        if cdf > 0.025 {
            break;
        }
        k = j + 1;
    }
    let (lo, hi) = if k == 0 { (sorted[0], sorted[n - 1]) } else { (sorted[k - 1], sorted[n - k]) };
    Some((median, [lo, hi]))
}

/// Ratios `num[i] / den[i]` of two runs timed in the same rounds (the ablation interleaves its
/// pipelines, so the i-th timings of two manifests ran side by side); `None` unless both have
/// the same number of timings.
pub fn paired_ratios(num: &[f64], den: &[f64]) -> Option<Vec<f64>> {
    (num.len() == den.len() && !num.is_empty()).then(|| num.iter().zip(den).map(|(a, b)| a / b).collect())
}
