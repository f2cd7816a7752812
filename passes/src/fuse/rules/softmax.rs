//! Softmax along any of the last four axes, with or without the max subtraction (equal in
//! exact arithmetic; the fused op always subtracts the max). A softmax missing its
//! normaliser (`exp(x - max)` alone) is not a softmax and does not match.

use super::{Rule, rule};

/// Softmax rules for axes -1 to -4.
pub fn rules() -> Vec<Rule> {
    let mut rules = Vec::new();
    for k in 1..=4 {
        let (max, sum) =
            (format!("reduce_max{{axes=[-{k}],keepdim=true}}"), format!("reduce_sum{{axes=[-{k}],keepdim=true}}"));
        let shifted = format!("(exp (sub ?x ({max} ?x)))");
        // exp(x - max) / sum(exp(x - max)) = softmax(x)
        rules.push(rule(
            &format!("softmax-{k}"),
            &format!("(div {shifted} ({sum} {shifted}))"),
            &format!("(softmax{{axis=-{k}}} ?x)"),
            vec![],
        ));
        // exp(x) / sum(exp(x)) = softmax(x)
        rules.push(rule(
            &format!("softmax-unshifted-{k}"),
            &format!("(div (exp ?x) ({sum} (exp ?x)))"),
            &format!("(softmax{{axis=-{k}}} ?x)"),
            vec![],
        ));
    }
    rules
}
