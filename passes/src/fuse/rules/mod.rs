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
use egg::{Id, Pattern, Rewrite, Subst, SymbolLang, Var};
use rustral_ir::Shape;
use std::sync::Arc;

/// A rule of our language: the rewrite egg runs, and its left side and conditions again, so
/// that `--explain-fusion` can say which condition a near miss failed.
pub struct Rule {
    /// The rewrite.
    pub rewrite: Rewrite<SymbolLang, TensorAnalysis>,
    /// Its pattern.
    pub lhs: Pattern<SymbolLang>,
    /// Its conditions, all of which a match must meet.
    pub conds: Vec<Cond>,
}

impl Rule {
    /// The rule's name.
    pub fn name(&self) -> &str {
        self.rewrite.name.as_str()
    }
}

/// The check of a condition: the e-graph, the matched class and the substitution.
type Check = dyn Fn(&mut TensorGraph, Id, &Subst) -> bool + Send + Sync;

/// What a condition is about, which decides whether failing it makes a near miss worth
/// reporting (see `explain`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CondKind {
    /// A constant's value (`?h = 0.5`, `?s is a finite constant`): always a near miss.
    Constant,
    /// An operand's shape or dtype (`?c is a vector over the last axis`): a near miss only
    /// when the operand is not shaped like the result (a residual add is no near-miss bias).
    Shape,
    /// What an operand is (the causal mask, a one-hot): always a near miss.
    Structure,
}

/// A condition on a match, with what it asks for in words and the variable it is about.
#[derive(Clone)]
pub struct Cond {
    /// What the condition asks (`?h = 0.5`, `?g is a vector over the last axis`).
    pub what: String,
    /// The pattern variable it is about (a near miss shows its value).
    pub var: Var,
    /// What kind of condition it is.
    pub kind: CondKind,
    check: Arc<Check>,
}

impl Cond {
    /// A condition about `var`.
    pub fn new(
        what: impl Into<String>,
        var: Var,
        kind: CondKind,
        check: impl Fn(&mut TensorGraph, Id, &Subst) -> bool + Send + Sync + 'static,
    ) -> Cond {
        Cond { what: what.into(), var, kind, check: Arc::new(check) }
    }

    /// Whether the match of class `id` with substitution `s` meets the condition.
    pub fn holds(&self, eg: &mut TensorGraph, id: Id, s: &Subst) -> bool {
        (self.check)(eg, id, s)
    }
}

/// Build a conditional rule; panics only on a malformed pattern in this file (a bug caught by
/// every test that builds the rule set).
pub fn rule(name: &str, lhs: &str, rhs: &str, conds: Vec<Cond>) -> Rule {
    let lhs: Pattern<SymbolLang> = lhs.parse().unwrap_or_else(|e| panic!("rule {name}: bad lhs: {e}"));
    let rhs: Pattern<SymbolLang> = rhs.parse().unwrap_or_else(|e| panic!("rule {name}: bad rhs: {e}"));
    let checks = conds.clone();
    let check = move |eg: &mut TensorGraph, id: Id, s: &Subst| checks.iter().all(|c| c.holds(eg, id, s));
    let rewrite = Rewrite::new(name, lhs.clone(), egg::ConditionalApplier { condition: check, applier: rhs })
        .unwrap_or_else(|e| panic!("rule {name}: {e}"));
    Rule { rewrite, lhs, conds }
}

pub(crate) fn v(name: &str) -> Var {
    name.parse().unwrap_or_else(|_| panic!("bad pattern variable {name}"))
}

/// `?var` is a splat constant within 1e-6 (relative) of `want`.
pub fn approx(var: &str, want: f64) -> Cond {
    let x = v(var);
    Cond::new(format!("{var} = {want}"), x, CondKind::Constant, move |eg, _, s| {
        eg[s[x]].data.splat.is_some_and(|c| (c - want).abs() <= 1e-6 * want.abs().max(1e-30))
    })
}

/// `?var` is a splat constant (an eps or a scale), finite.
pub fn constant(var: &str) -> Cond {
    let x = v(var);
    Cond::new(format!("{var} is a finite constant"), x, CondKind::Constant, move |eg, _, s| {
        eg[s[x]].data.splat.is_some_and(f64::is_finite)
    })
}

/// `?var` is a splat constant at or below `bound` (a mask fill such as -3.4e38 or -inf).
pub fn at_most(var: &str, bound: f64) -> Cond {
    let x = v(var);
    Cond::new(format!("{var} <= {bound}"), x, CondKind::Constant, move |eg, _, s| {
        eg[s[x]].data.splat.is_some_and(|c| c <= bound)
    })
}

/// `?var` has shape `[d]` where `d` is the last dim of the matched value, and its dtype.
pub fn last_dim_vector(var: &str) -> Cond {
    let x = v(var);
    Cond::new(format!("{var} is a vector over the last axis"), x, CondKind::Shape, move |eg, id, s| {
        let (Some(root), Some(t)) = (eg[id].data.ty.clone(), eg[s[x]].data.ty.clone()) else { return false };
        match root.shape.0.last() {
            Some(d) => t.dtype == root.dtype && t.shape == Shape(vec![d.clone()]),
            None => false,
        }
    })
}

/// `?var` is `cols <= rows` for iotas `cols: [1, s]` (axis 1) and `rows: [s, 1]` (axis 0):
/// the causal visibility mask (see the analysis).
pub fn causal_visibility(var: &str) -> Cond {
    let x = v(var);
    Cond::new(format!("{var} is the causal mask (cols <= rows of iotas)"), x, CondKind::Structure, move |eg, _, s| {
        eg[s[x]].data.causal
    })
}
