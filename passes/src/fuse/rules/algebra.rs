//! Identities that let one pattern per form match the spellings model code uses: PyTorch's
//! `x / math.sqrt(2)`, JAX's `x * (erf(..) + 1) / 2`, tinygrad's `a * b.reciprocal()` and
//! `a + (-b)`, C's `1.0f / sqrtf(v)`, Flax's `maximum(0, mean(x^2) - mean(x)^2)`.
//!
//! Every rule is an equality of real numbers, and every rule is bounded: constants move
//! through products and fold together, but two non-constant factors are never regrouped by a
//! rule of their own (no general associativity, whose e-graph grows exponentially with the
//! length of a product). Constant subexpressions (`sqrt(2 / pi)`, `d ** -0.5`, `1 / 2`) get
//! their value in the analysis, so a rule asking for `0.5` matches `recip(2)` too.

use super::{Cond, CondKind, Rule, approx, constant, last_dim_vector, rule, v};
use rustral_ir::{Dim, TensorType};

/// Always-on rewrites, run with every family.
pub fn rules() -> Vec<Rule> {
    let float = || float_valued("?a");
    vec![
        rule("mul-commute", "(mul ?a ?b)", "(mul ?b ?a)", vec![]), // a*b = b*a
        rule("add-commute", "(add ?a ?b)", "(add ?b ?a)", vec![]), // a+b = b+a
        rule("div-sqrt", "(div ?a (sqrt ?b))", "(mul ?a (rsqrt ?b))", vec![]), // a/sqrt(b) = a*rsqrt(b)
        rule("recip-sqrt", "(recip (sqrt ?b))", "(rsqrt ?b)", vec![]), // 1/sqrt(b) = rsqrt(b)
        rule("pow-neg-half", "(pow ?b ?p)", "(rsqrt ?b)", vec![approx("?p", -0.5)]), // b^-0.5 = rsqrt(b)
        rule("pow-half", "(pow ?b ?p)", "(sqrt ?b)", vec![approx("?p", 0.5)]), // b^0.5 = sqrt(b)
        rule("pow-neg-one", "(pow ?b ?p)", "(recip ?b)", vec![approx("?p", -1.0)]), // b^-1 = 1/b
        rule("pow-two", "(pow ?x ?p)", "(mul ?x ?x)", vec![approx("?p", 2.0)]), // x^2 = x*x
        rule("pow-three", "(pow ?x ?p)", "(mul (mul ?x ?x) ?x)", vec![approx("?p", 3.0)]), // x^3 = x*x*x
        // a/b = a * (1/b), both ways, for floats (integer division truncates)
        rule("div-as-recip", "(div ?a ?b)", "(mul ?a (recip ?b))", vec![float()]),
        rule("recip-as-div", "(mul ?a (recip ?b))", "(div ?a ?b)", vec![float()]),
        // (a*c)*b = (a*b)*c and back, c a constant: a constant factor moves anywhere in a product
        rule("const-out", "(mul (mul ?a ?c) ?b)", "(mul (mul ?a ?b) ?c)", vec![constant("?c"), not_constant("?b")]),
        rule("const-in", "(mul (mul ?a ?b) ?c)", "(mul (mul ?a ?c) ?b)", vec![constant("?c"), not_constant("?b")]),
        // (a*c)*d = a*(c*d), c and d constants: two constant factors fold into one
        rule("const-fold", "(mul (mul ?a ?c) ?d)", "(mul ?a (mul ?c ?d))", vec![constant("?c"), constant("?d")]),
        // a*1 = a, a+0 = a, a*(-1) = -a, 0-a = -a, a+(-b) = a-b, when no broadcast is lost
        rule("mul-one", "(mul ?a ?one)", "?a", vec![approx("?one", 1.0), same_type("?a")]),
        rule("add-zero", "(add ?a ?zero)", "?a", vec![approx_zero("?zero"), same_type("?a")]),
        rule("mul-minus-one", "(mul ?a ?m)", "(neg ?a)", vec![approx("?m", -1.0), same_type("?a")]),
        rule("zero-sub", "(sub ?zero ?a)", "(neg ?a)", vec![approx_zero("?zero"), same_type("?a")]),
        rule("add-neg", "(add ?a (neg ?b))", "(sub ?a ?b)", vec![]),
        // a - (b + c) = (a - b) - c (PyTorch's logsumexp is max + log(sum(exp(x - max))))
        rule("sub-sum", "(sub ?a (add ?b ?c))", "(sub (sub ?a ?b) ?c)", vec![]),
        // max(x, 0) = relu(x) (JAX's relu is jnp.maximum(x, 0))
        rule("max-zero", "(max ?a ?zero)", "(relu ?a)", vec![approx_zero("?zero"), same_type("?a")]),
        rule("zero-max", "(max ?zero ?a)", "(relu ?a)", vec![approx_zero("?zero"), same_type("?a")]),
        // e^(a - log b) = e^a / b (softmax written as exp(log_softmax(x)))
        rule("exp-sub-log", "(exp (sub ?a (log ?b)))", "(div (exp ?a) ?b)", vec![]),
        // a * (b * g) = (a * b) * g, g a vector over the last axis (Flax joins the LayerNorm
        // scale to the reciprocal first): only a parameter-shaped factor moves, so it stays bounded
        rule(
            "vector-out",
            "(mul ?a (mul ?b ?g))",
            "(mul (mul ?a ?b) ?g)",
            vec![last_dim_vector("?g"), not_constant("?a"), not_constant("?b")],
        ),
        // 1 / (1 + e^-x) = sigmoid(x)
        rule("sigmoid-exp", "(recip (add (exp (neg ?x)) ?one))", "(sigmoid ?x)", vec![approx("?one", 1.0)]),
        // x * (c x^2 + 1) = x + c x^3 (FastGELU's and ggml's spelling of GELU's cubic)
        rule(
            "cubic-factored",
            "(mul ?x (add (mul (mul ?x ?x) ?c) ?one))",
            "(add ?x (mul (mul (mul ?x ?x) ?x) ?c))",
            vec![constant("?c"), approx("?one", 1.0)],
        ),
        // mean written sum(x) / n over the last axis, n its static length
        rule(
            "mean-as-sum",
            "(mul (reduce_sum{axes=[-1],keepdim=true} ?x) ?r)",
            "(reduce_mean{axes=[-1],keepdim=true} ?x)",
            vec![reciprocal_of_last_dim("?x", "?r")],
        ),
        // (q*s) @ k = (q @ k) * s, and q @ (k*s), and (k*s)^T = k^T * s, s a one-element constant
        rule("matmul-scaled-lhs", "(matmul (mul ?a ?s) ?b)", "(mul (matmul ?a ?b) ?s)", vec![one_element("?s")]),
        rule("matmul-scaled-rhs", "(matmul ?a (mul ?b ?s))", "(mul (matmul ?a ?b) ?s)", vec![one_element("?s")]),
        rule(
            "transpose-scaled-rank4",
            "(permute{perm=[0,1,3,2]} (mul ?a ?s))",
            "(mul (permute{perm=[0,1,3,2]} ?a) ?s)",
            vec![one_element("?s")],
        ),
        rule(
            "transpose-scaled-rank3",
            "(permute{perm=[0,2,1]} (mul ?a ?s))",
            "(mul (permute{perm=[0,2,1]} ?a) ?s)",
            vec![one_element("?s")],
        ),
    ]
}

/// `?var` is not a constant.
fn not_constant(var: &str) -> Cond {
    let x = v(var);
    Cond::new(format!("{var} is not a constant"), x, CondKind::Structure, move |eg, _, s| eg[s[x]].data.splat.is_none())
}

/// `?var` is a splat constant equal to zero.
fn approx_zero(var: &str) -> Cond {
    let x = v(var);
    Cond::new(format!("{var} = 0"), x, CondKind::Constant, move |eg, _, s| eg[s[x]].data.splat == Some(0.0))
}

/// `?var` has the matched value's type: dropping the other operand loses no broadcast.
fn same_type(var: &str) -> Cond {
    let x = v(var);
    Cond::new(format!("{var} has the result's type"), x, CondKind::Shape, move |eg, id, s| {
        eg[id].data.ty.is_some() && eg[s[x]].data.ty == eg[id].data.ty
    })
}

/// `?var` holds floats (so a division is not an integer division).
fn float_valued(var: &str) -> Cond {
    let x = v(var);
    Cond::new(format!("{var} holds floats"), x, CondKind::Shape, move |eg, _, s| {
        eg[s[x]].data.ty.as_ref().is_some_and(|t| t.dtype.is_float())
    })
}

/// `?var` is a splat constant of one element (every dim 1, or a scalar): multiplying by it
/// before or after a matmul or a transpose gives the same shape.
fn one_element(var: &str) -> Cond {
    let x = v(var);
    Cond::new(format!("{var} is a one-element constant"), x, CondKind::Constant, move |eg, id, s| {
        let d = &eg[s[x]].data;
        let small = |t: &TensorType, root: &TensorType| {
            t.rank() <= root.rank() && t.shape.0.iter().all(|d| *d == Dim::Static(1))
        };
        d.splat.is_some_and(f64::is_finite)
            && matches!((&d.ty, &eg[id].data.ty), (Some(t), Some(root)) if small(t, root))
    })
}

/// `?r` is `1 / n` (within 1e-6 relative) where `n` is the static last dim of `?x`.
fn reciprocal_of_last_dim(x: &str, r: &str) -> Cond {
    let what = format!("{r} = 1 / (the last dim of {x})");
    let (x, r) = (v(x), v(r));
    Cond::new(what, r, CondKind::Constant, move |eg, _, s| {
        let Some(Dim::Static(n)) = eg[s[x]].data.ty.as_ref().and_then(|t| t.shape.0.last().cloned()) else {
            return false;
        };
        let want = 1.0 / n as f64;
        eg[s[r]].data.splat.is_some_and(|c| (c - want).abs() <= 1e-6 * want)
    })
}
