//! GELU (erf and tanh forms) and SiLU.

use super::{Rule, approx, rule};
use std::f64::consts::{FRAC_1_SQRT_2, PI, SQRT_2};

/// GELU rules.
pub fn gelu() -> Vec<Rule> {
    let half_one = || vec![approx("?h", 0.5), approx("?one", 1.0)];
    vec![
        // x * 0.5 * (1 + erf(x / sqrt 2)) = gelu_erf(x)
        rule("gelu-erf-div", "(mul (mul ?x ?h) (add (erf (div ?x ?r)) ?one))", "(gelu{approx=erf} ?x)", {
            let mut c = half_one();
            c.push(approx("?r", SQRT_2));
            c
        }),
        // x * 0.5 * (1 + erf(x * (1 / sqrt 2))) = gelu_erf(x)
        rule("gelu-erf-mul", "(mul (mul ?x ?h) (add (erf (mul ?x ?r)) ?one))", "(gelu{approx=erf} ?x)", {
            let mut c = half_one();
            c.push(approx("?r", FRAC_1_SQRT_2));
            c
        }),
        // x * 0.5 * (1 + tanh(sqrt(2/pi) * (x + 0.044715 x^3))) = gelu_tanh(x)
        rule(
            "gelu-tanh",
            "(mul (mul ?x ?h) (add (tanh (mul (add ?x (mul (mul (mul ?x ?x) ?x) ?c)) ?k)) ?one))",
            "(gelu{approx=tanh} ?x)",
            {
                let mut c = half_one();
                c.push(approx("?c", 0.044715));
                c.push(approx("?k", (2.0 / PI).sqrt()));
                c
            },
        ),
    ]
}

/// SiLU rules.
pub fn silu() -> Vec<Rule> {
    vec![
        // x * sigmoid(x) = silu(x)
        rule("silu", "(mul ?x (sigmoid ?x))", "(silu ?x)", vec![]),
        // x / (1 + exp(-x)) = silu(x)
        rule("silu-exp", "(div ?x (add (exp (neg ?x)) ?one))", "(silu ?x)", vec![approx("?one", 1.0)]),
    ]
}
