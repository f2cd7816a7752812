//! Choosing the next token from logits as Hugging Face's `generate` does, in its order:
//! repetition penalty, then (when sampling) temperature, top-k and top-p, then a draw from an
//! explicit ChaCha stream. Greedy decoding (temperature 0) takes the first largest logit after
//! the repetition penalty, as `generate(do_sample=False)` does.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// How to pick tokens (the fields of Hugging Face's `GenerationConfig` that `generate` uses).
#[derive(Clone, Debug, PartialEq)]
pub struct SamplingConfig {
    /// 0 decodes greedily; otherwise logits are divided by it before sampling.
    pub temperature: f64,
    /// Keep the `top_k` largest logits (ties with the k-th kept too); 0 keeps all.
    pub top_k: usize,
    /// Keep the smallest set of most likely tokens whose probability reaches `top_p`; 1 keeps all.
    pub top_p: f64,
    /// Divide positive (multiply negative) logits of tokens already in the sequence; 1 is off.
    pub repetition_penalty: f64,
    /// Seeds the ChaCha stream the draws come from.
    pub seed: u64,
}

impl Default for SamplingConfig {
    fn default() -> SamplingConfig {
        SamplingConfig { temperature: 0.0, top_k: 0, top_p: 1.0, repetition_penalty: 1.0, seed: 0 }
    }
}

impl SamplingConfig {
    /// A setting outside its range, named.
    pub fn check(&self) -> Result<(), String> {
        let bad = |what: &str, v: f64| {
            Err(format!(
                "{what} must be {}, found {v}",
                match what {
                    "temperature" => "finite and >= 0",
                    "top_p" => "in (0, 1]",
                    _ => "finite and > 0",
                }
            ))
        };
        if !(self.temperature.is_finite() && self.temperature >= 0.0) {
            return bad("temperature", self.temperature);
        }
        if !(self.top_p > 0.0 && self.top_p <= 1.0) {
            return bad("top_p", self.top_p);
        }
        if !(self.repetition_penalty.is_finite() && self.repetition_penalty > 0.0) {
            return bad("repetition_penalty", self.repetition_penalty);
        }
        Ok(())
    }
}

/// Picks tokens with one seeded stream per generation, so that a seed reproduces a run on
/// every target.
pub struct Sampler {
    config: SamplingConfig,
    rng: ChaCha8Rng,
}

impl Sampler {
    /// A sampler for `config`, its stream at the start.
    pub fn new(config: SamplingConfig) -> Sampler {
        let rng = ChaCha8Rng::seed_from_u64(config.seed);
        Sampler { config, rng }
    }

    /// The next token given the logits of the last position and the ids so far (prompt and
    /// generated).
    pub fn next(&mut self, logits: &[f32], previous: &[i64]) -> i64 {
        let mut scores: Vec<f64> = logits.iter().map(|&x| f64::from(x)).collect();
        penalize(&mut scores, previous, self.config.repetition_penalty);
        if self.config.temperature == 0.0 {
            return argmax(&scores) as i64;
        }
        let probs = probabilities(&scores, &self.config);
        let u: f64 = self.rng.random::<f64>();
        let mut acc = 0.0;
        let mut last = 0;
        for (i, p) in probs.iter().enumerate() {
            if *p > 0.0 {
                acc += p;
                last = i;
                if u < acc {
                    return i as i64;
                }
            }
        }
        last as i64
    }
}

/// HF's `RepetitionPenaltyLogitsProcessor`: each id seen (once, however often it occurs).
pub fn penalize(scores: &mut [f64], previous: &[i64], penalty: f64) {
    if penalty == 1.0 {
        return;
    }
    let mut seen = vec![false; scores.len()];
    for &id in previous {
        if let Some(s) = usize::try_from(id).ok().filter(|&i| i < scores.len() && !seen[i]) {
            seen[s] = true;
            let v = &mut scores[s];
            *v = if *v < 0.0 { *v * penalty } else { *v / penalty };
        }
    }
}

/// The index of the first largest score (NaN never wins).
fn argmax(scores: &[f64]) -> usize {
    let mut best = 0;
    for (i, &s) in scores.iter().enumerate() {
        if s > scores[best] || scores[best].is_nan() {
            best = i;
        }
    }
    best
}

/// Sampling probabilities after temperature, top-k and top-p (HF's warpers, in that order):
/// removed tokens get 0. Temperature 0 (greedy) puts all the mass on the first largest score.
pub fn probabilities(penalized: &[f64], config: &SamplingConfig) -> Vec<f64> {
    if config.temperature == 0.0 {
        let mut one_hot = vec![0.0; penalized.len()];
        if !penalized.is_empty() {
            one_hot[argmax(penalized)] = 1.0;
        }
        return one_hot;
    }
    let mut scores: Vec<f64> = penalized.iter().map(|s| s / config.temperature).collect();
    if config.top_k > 0 && config.top_k < scores.len() {
        let mut sorted = scores.clone();
        sorted.sort_by(|a, b| b.total_cmp(a));
        let kth = sorted[config.top_k - 1];
        scores.iter_mut().filter(|s| **s < kth).for_each(|s| *s = f64::NEG_INFINITY);
    }
    if config.top_p < 1.0 {
        // Ascending by score (ties by index, a stable sort): drop the low tail whose mass is
        // at most 1 - top_p, always keeping the most likely token.
        let mut order: Vec<usize> = (0..scores.len()).collect();
        order.sort_by(|&a, &b| scores[a].total_cmp(&scores[b]));
        let sorted: Vec<f64> = order.iter().map(|&i| scores[i]).collect();
        let probs = softmax(&sorted);
        let mut cumulative = 0.0;
        for (rank, &i) in order.iter().enumerate() {
            cumulative += probs[rank];
            if cumulative <= 1.0 - config.top_p && rank + 1 < order.len() {
                scores[i] = f64::NEG_INFINITY;
            }
        }
    }
    softmax(&scores)
}

fn softmax(scores: &[f64]) -> Vec<f64> {
    let max = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let e: Vec<f64> = scores.iter().map(|s| if *s == f64::NEG_INFINITY { 0.0 } else { (s - max).exp() }).collect();
    let total: f64 = e.iter().sum();
    e.iter().map(|v| v / total).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn greedy_takes_the_first_largest_and_penalizes_repeats() {
        let mut s = Sampler::new(SamplingConfig::default());
        assert_eq!(s.next(&[1.0, 3.0, 3.0, -1.0], &[]), 1);
        let mut s = Sampler::new(SamplingConfig { repetition_penalty: 2.0, ..SamplingConfig::default() });
        assert_eq!(s.next(&[1.0, 3.0, 2.0, -1.0], &[1, 1]), 2, "3 / 2 < 2");
    }

    #[test]
    fn a_seed_reproduces_draws_and_another_seed_differs() {
        let logits: Vec<f32> = (0..50).map(|i| ((i * 7919) % 13) as f32 * 0.3).collect();
        let draw = |seed| {
            let mut s = Sampler::new(SamplingConfig { temperature: 1.0, seed, ..SamplingConfig::default() });
            (0..32).map(|_| s.next(&logits, &[])).collect::<Vec<_>>()
        };
        assert_eq!(draw(7), draw(7));
        assert_ne!(draw(7), draw(8));
    }
}
