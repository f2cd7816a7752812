//! Scaled dot-product attention: `softmax(q @ k^T * s [+ mask] [causal]) @ v`, with the
//! scale as a multiply or a divide, an optional additive mask, an optional causal mask built
//! from iotas, for rank-3 and rank-4 (heads) layouts. Softmax rules are included so attention
//! fuses whether or not the softmax pass ran.

use super::{Rule, at_most, causal_visibility, constant, rule};

/// Attention rules.
pub fn rules() -> Vec<Rule> {
    let mut rules = super::softmax::rules();
    for (rank, perm) in [(4, "permute{perm=[0,1,3,2]}"), (3, "permute{perm=[0,2,1]}")] {
        for scale_op in ["mul", "div"] {
            for masked in [false, true] {
                for causal in [false, true] {
                    let mut scores = format!("({scale_op} (matmul ?q ({perm} ?k)) ?s)");
                    if masked {
                        scores = format!("(add {scores} ?m)");
                    }
                    let mut conds = vec![constant("?s")];
                    if causal {
                        scores = format!("(where ?vis {scores} ?fill)");
                        conds.push(causal_visibility("?vis"));
                        conds.push(at_most("?fill", -1e30));
                    }
                    let lhs = format!("(matmul (softmax{{axis=-1}} {scores}) ?v)");
                    let name = format!(
                        "attention-{scale_op}{}{}-rank{rank}",
                        if masked { "-mask" } else { "" },
                        if causal { "-causal" } else { "" }
                    );
                    // The scale multiplies the scores, or divides them (then it is the reciprocal).
                    let scale = if scale_op == "mul" { "$" } else { "1/$" };
                    let fused = format!("attention{{scale={scale},causal={causal}}}");
                    let rhs =
                        if masked { format!("({fused} ?q ?k ?v ?m ?s)") } else { format!("({fused} ?q ?k ?v ?s)") };
                    rules.push(rule(&name, &lhs, &rhs, conds));
                }
            }
        }
    }
    rules
}
