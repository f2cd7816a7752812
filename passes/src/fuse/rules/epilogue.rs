//! Matmul epilogues: a bias over the last axis and an activation applied to the product.

use super::{Rule, last_dim_vector, rule};

/// Epilogue rules.
pub fn rules() -> Vec<Rule> {
    let mut rules = vec![
        // a @ b + bias = matmul_epilogue(a, b, bias)
        rule(
            "epilogue-bias",
            "(add (matmul ?a ?b) ?c)",
            "(matmul_epilogue{activation=none} ?a ?b ?c)",
            vec![last_dim_vector("?c")],
        ),
    ];
    for (act_symbol, act) in [
        ("relu", "relu"),
        ("gelu{approx=erf}", "gelu_erf"),
        ("gelu{approx=tanh}", "gelu_tanh"),
        ("silu", "silu"),
        ("tanh", "tanh"),
        ("sigmoid", "sigmoid"),
    ] {
        // act(a @ b + bias) = matmul_epilogue[act](a, b, bias)
        rules.push(rule(
            &format!("epilogue-bias-{act}"),
            &format!("({act_symbol} (matmul_epilogue{{activation=none}} ?a ?b ?c))"),
            &format!("(matmul_epilogue{{activation={act}}} ?a ?b ?c)"),
            vec![],
        ));
        // act(a @ b) = matmul_epilogue[act](a, b)
        rules.push(rule(
            &format!("epilogue-{act}"),
            &format!("({act_symbol} (matmul ?a ?b))"),
            &format!("(matmul_epilogue{{activation={act}}} ?a ?b)"),
            vec![],
        ));
    }
    rules
}
