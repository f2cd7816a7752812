//! Cross-entropy: `-log_softmax(x)` picked at each row's target by a one-hot mask, with or
//! without the max subtraction, the mask built as `iota == targets` in either order and
//! cast to any float type. The fused op computes the same loss about the row max, so no
//! exponential overflows, and its gradient needs no log-softmax kept for the backward pass.

use super::{Cond, CondKind, Rule, rule, v};
use rustral_ir::{DType, Dim};

/// Cross-entropy rules.
pub fn cross_entropy() -> Vec<Rule> {
    let shifted = "(sub ?x (reduce_max{axes=[-1],keepdim=true} ?x))";
    let sum = "reduce_sum{axes=[-1],keepdim=true}";
    let log_softmax = [
        ("shifted", format!("(sub {shifted} (log ({sum} (exp {shifted}))))")),
        ("unshifted", format!("(sub ?x (log ({sum} (exp ?x))))")),
    ];
    let masks = [("", "(eq ?classes ?t)"), ("-swapped", "(eq ?t ?classes)")];
    let mut rules = Vec::new();
    for dtype in DType::ALL.into_iter().filter(|d| d.is_float()) {
        for (form, logp) in &log_softmax {
            for (order, eq) in masks {
                let picked = format!("(reduce_sum{{axes=[-1],keepdim=false}} (mul {logp} (cast{{to={dtype}}} {eq})))");
                let name = format!("cross-entropy-{form}{order}-{dtype}");
                // -sum(log_softmax(x) * onehot(t)) = cross_entropy(x, t)
                rules.push(rule(&name, &format!("(neg {picked})"), "(cross_entropy ?x ?t)", vec![one_hot()]));
                // sum(log_softmax(x) * onehot(t)) = -cross_entropy(x, t)
                rules.push(rule(&format!("{name}-picked"), &picked, "(neg (cross_entropy ?x ?t))", vec![one_hot()]));
            }
        }
    }
    rules
}

/// `?classes` is an iota along the last axis of `?x`'s shape and `?t` holds one integer class
/// per row of `?x` (its shape with the last dim 1): the mask is a one-hot of `?t`.
fn one_hot() -> Cond {
    let (x, classes, t) = (v("?x"), v("?classes"), v("?t"));
    Cond::new(
        "?classes == ?t is a one-hot of integer targets over the last axis",
        classes,
        CondKind::Structure,
        move |eg, _, s| {
            let (cd, xd, td) = (&eg[s[classes]].data, &eg[s[x]].data, &eg[s[t]].data);
            let (Some(ct), Some(xt), Some(tt)) = (&cd.ty, &xd.ty, &td.ty) else { return false };
            let Some((_, rows)) = xt.shape.0.split_last() else { return false };
            let mut column = rows.to_vec();
            column.push(Dim::Static(1));
            cd.iota_axis == Some(xt.rank() - 1) && ct.shape == xt.shape && tt.dtype.is_int() && tt.shape.0 == column
        },
    )
}
