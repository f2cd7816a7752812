//! LayerNorm and RMSNorm over the last axis. `MEAN` below is a mean over the last axis keeping
//! it; a mean over any other axis is not a LayerNorm and does not match.

use super::{Rule, constant, last_dim_vector, rule};

const MEAN: &str = "reduce_mean{axes=[-1],keepdim=true}";
const CENTERED: &str = "(sub ?x (reduce_mean{axes=[-1],keepdim=true} ?x))";

/// LayerNorm, with and without affine, variance written either way.
pub fn layer_norm() -> Vec<Rule> {
    let var = format!("({MEAN} (mul {CENTERED} {CENTERED}))");
    let expanded = format!("(sub ({MEAN} (mul ?x ?x)) (mul ({MEAN} ?x) ({MEAN} ?x)))");
    vec![
        // mean(x^2) - mean(x)^2 = mean((x - mean x)^2)
        rule("variance-expanded", &expanded, &var, vec![]),
        // max(0, mean(x^2) - mean(x)^2) = mean((x - mean x)^2), never negative in exact arithmetic
        // (Flax clamps it against round-off; `max(0, v)` is `relu(v)` by the algebra rules)
        rule("variance-expanded-clamped", &format!("(relu {expanded})"), &var, vec![]),
        // (x - mean) * rsqrt(var + eps) = layer_norm(x)
        rule(
            "layer-norm",
            &format!("(mul {CENTERED} (rsqrt (add {var} ?eps)))"),
            "(layer_norm{eps=$} ?x ?eps)",
            vec![constant("?eps")],
        ),
        // layer_norm(x) * gamma + beta = layer_norm(x, gamma, beta)
        rule(
            "layer-norm-affine",
            "(add (mul (layer_norm{eps=$} ?x ?eps) ?g) ?b)",
            "(layer_norm{eps=$} ?x ?g ?b ?eps)",
            vec![last_dim_vector("?g"), last_dim_vector("?b")],
        ),
    ]
}

/// RMSNorm, with and without a weight.
pub fn rms_norm() -> Vec<Rule> {
    vec![
        // x * rsqrt(mean(x^2) + eps) = rms_norm(x)
        rule(
            "rms-norm",
            &format!("(mul ?x (rsqrt (add ({MEAN} (mul ?x ?x)) ?eps)))"),
            "(rms_norm{eps=$} ?x ?eps)",
            vec![constant("?eps")],
        ),
        // rms_norm(x) * w = rms_norm(x, w)
        rule(
            "rms-norm-affine",
            "(mul (rms_norm{eps=$} ?x ?eps) ?g)",
            "(rms_norm{eps=$} ?x ?g ?eps)",
            vec![last_dim_vector("?g")],
        ),
    ]
}
