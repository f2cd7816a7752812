//! LayerNorm and RMSNorm over the last axis. `M` below is `reduce_mean[-1]k`, a mean over the
//! last axis keeping it; a mean over any other axis is not a LayerNorm and does not match.

use super::{Rule, constant, last_dim_vector, rule};

const CENTERED: &str = "(sub ?x (reduce_mean[-1]k ?x))";

/// LayerNorm, with and without affine, variance written either way.
pub fn layer_norm() -> Vec<Rule> {
    let var = format!("(reduce_mean[-1]k (mul {CENTERED} {CENTERED}))");
    vec![
        // mean(x^2) - mean(x)^2 = mean((x - mean x)^2)
        rule(
            "variance-expanded",
            "(sub (reduce_mean[-1]k (mul ?x ?x)) (mul (reduce_mean[-1]k ?x) (reduce_mean[-1]k ?x)))",
            &var,
            vec![],
        ),
        // (x - mean) * rsqrt(var + eps) = layer_norm(x)
        rule(
            "layer-norm",
            &format!("(mul {CENTERED} (rsqrt (add {var} ?eps)))"),
            "(fused_layer_norm ?x ?eps)",
            vec![constant("?eps")],
        ),
        // layer_norm(x) * gamma + beta = layer_norm(x, gamma, beta)
        rule(
            "layer-norm-affine",
            "(add (mul (fused_layer_norm ?x ?eps) ?g) ?b)",
            "(fused_layer_norm_affine ?x ?g ?b ?eps)",
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
            "(mul ?x (rsqrt (add (reduce_mean[-1]k (mul ?x ?x)) ?eps)))",
            "(fused_rms_norm ?x ?eps)",
            vec![constant("?eps")],
        ),
        // rms_norm(x) * w = rms_norm(x, w)
        rule(
            "rms-norm-affine",
            "(mul (fused_rms_norm ?x ?eps) ?g)",
            "(fused_rms_norm_affine ?x ?g ?eps)",
            vec![last_dim_vector("?g")],
        ),
    ]
}
