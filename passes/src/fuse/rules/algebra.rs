//! Identities that let one pattern per form match the spellings model code uses.

use super::{Rule, approx, rule};

/// Always-on rewrites (each an equality of real numbers).
pub fn rules() -> Vec<Rule> {
    vec![
        rule("mul-commute", "(mul ?a ?b)", "(mul ?b ?a)", vec![]), // a*b = b*a
        rule("add-commute", "(add ?a ?b)", "(add ?b ?a)", vec![]), // a+b = b+a
        rule("div-sqrt", "(div ?a (sqrt ?b))", "(mul ?a (rsqrt ?b))", vec![]), // a/sqrt(b) = a*rsqrt(b)
        rule("recip-sqrt", "(recip (sqrt ?b))", "(rsqrt ?b)", vec![]), // 1/sqrt(b) = rsqrt(b)
        rule("pow-neg-half", "(pow ?b ?p)", "(rsqrt ?b)", vec![approx("?p", -0.5)]), // b^-0.5 = rsqrt(b)
        rule("pow-two", "(pow ?x ?p)", "(mul ?x ?x)", vec![approx("?p", 2.0)]), // x^2 = x*x
        rule("pow-three", "(pow ?x ?p)", "(mul (mul ?x ?x) ?x)", vec![approx("?p", 3.0)]), // x^3 = x*x*x
    ]
}
