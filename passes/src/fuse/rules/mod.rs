//! Rewrite rules as data: one file per family, one rule per line, the identity in a comment,
//! conditions as named predicates. Every family is one fusion pass (`fuse-layer-norm`, ...);
//! the algebra rules (commutativity, `a / sqrt(b) = a * rsqrt(b)`, ...) run with each, so a
//! family's patterns need only one spelling per form.

pub mod activation;
pub mod algebra;
pub mod attention;
pub mod epilogue;
pub mod loss;
pub mod norm;
pub mod softmax;

use super::analysis::{TensorAnalysis, TensorGraph};
use egg::{Id, Rewrite, Subst, SymbolLang, Var};
use rustral_ir::Shape;

/// A rule of our language.
pub type Rule = Rewrite<SymbolLang, TensorAnalysis>;

/// A condition on a match: the e-graph, the matched class and the substitution.
pub type Cond = Box<dyn Fn(&mut TensorGraph, Id, &Subst) -> bool + Send + Sync>;

/// Build a conditional rule; panics only on a malformed pattern in this file (a bug caught by
/// every test that builds the rule set).
pub fn rule(name: &str, lhs: &str, rhs: &str, conds: Vec<Cond>) -> Rule {
    let lhs: egg::Pattern<SymbolLang> = lhs.parse().unwrap_or_else(|e| panic!("rule {name}: bad lhs: {e}"));
    let rhs: egg::Pattern<SymbolLang> = rhs.parse().unwrap_or_else(|e| panic!("rule {name}: bad rhs: {e}"));
    let check = move |eg: &mut TensorGraph, id: Id, s: &Subst| conds.iter().all(|c| c(eg, id, s));
    Rewrite::new(name, lhs, egg::ConditionalApplier { condition: check, applier: rhs })
        .unwrap_or_else(|e| panic!("rule {name}: {e}"))
}

pub(crate) fn v(name: &str) -> Var {
    name.parse().unwrap_or_else(|_| panic!("bad pattern variable {name}"))
}

/// `?var` is a splat constant within 1e-6 (relative) of `want`.
pub fn approx(var: &str, want: f64) -> Cond {
    let var = v(var);
    Box::new(move |eg, _, s| eg[s[var]].data.splat.is_some_and(|c| (c - want).abs() <= 1e-6 * want.abs().max(1e-30)))
}

/// `?var` is a splat constant (an eps or a scale), finite.
pub fn constant(var: &str) -> Cond {
    let var = v(var);
    Box::new(move |eg, _, s| eg[s[var]].data.splat.is_some_and(f64::is_finite))
}

/// `?var` is a splat constant at or below `bound` (a mask fill such as -3.4e38 or -inf).
pub fn at_most(var: &str, bound: f64) -> Cond {
    let var = v(var);
    Box::new(move |eg, _, s| eg[s[var]].data.splat.is_some_and(|c| c <= bound))
}

/// `?var` has shape `[d]` where `d` is the last dim of the matched value, and its dtype.
pub fn last_dim_vector(var: &str) -> Cond {
    let var = v(var);
    Box::new(move |eg, id, s| {
        let (Some(root), Some(t)) = (eg[id].data.ty.clone(), eg[s[var]].data.ty.clone()) else { return false };
        match root.shape.0.last() {
            Some(d) => t.dtype == root.dtype && t.shape == Shape(vec![d.clone()]),
            None => false,
        }
    })
}

/// `?var` is `cols <= rows` for iotas `cols: [1, s]` (axis 1) and `rows: [s, 1]` (axis 0):
/// the causal visibility mask (see the analysis).
pub fn causal_visibility(var: &str) -> Cond {
    let var = v(var);
    Box::new(move |eg, _, s| eg[s[var]].data.causal)
}
