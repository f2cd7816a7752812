//! Pointwise kernels: unary and binary maps, the fused activations, fused elementwise bodies
//! (the row interpreter beside the Cranelift JIT), and the random stream.

#[allow(clippy::wildcard_imports)]
use super::*;

/// A unary op over a slice, the op chosen outside the loop so that each loop vectorises (the
/// same expressions as `unary`, so the same bits). An op without a loop of its own here maps
/// its scalar kernel.
pub(super) fn map_unary(u: UnaryOp, x: &[f32]) -> Vec<f32> {
    match u {
        UnaryOp::Neg => map(x, |v| -v),
        UnaryOp::Abs => map(x, f32::abs),
        UnaryOp::Exp => map(x, simd::exp),
        UnaryOp::Sqrt => map(x, f32::sqrt),
        UnaryOp::Rsqrt => map(x, |v| 1.0 / v.sqrt()),
        UnaryOp::Recip => map(x, |v| 1.0 / v),
        UnaryOp::Tanh => map(x, simd::tanh),
        UnaryOp::Sigmoid => map(x, sigmoid),
        UnaryOp::Relu => map(x, relu),
        UnaryOp::Erf => map(x, simd::erf),
        other => map(x, move |v| unary(other, v)),
    }
}

/// The unary ops in f32: polynomial exp, tanh and erf (the ones `simd.rs` vectorises and the
/// JIT inlines, so every path gives the same bits), and for every other op the IR's own
/// definition evaluated in f32 (`UnaryOp::eval`).
#[inline]
pub(crate) fn unary(u: UnaryOp, x: f32) -> f32 {
    match u {
        UnaryOp::Exp => simd::exp(x),
        UnaryOp::Tanh => simd::tanh(x),
        UnaryOp::Sigmoid => sigmoid(x),
        UnaryOp::Erf => simd::erf(x),
        other => other.eval(x),
    }
}

/// The binary ops in f32 (comparisons give 1.0 or 0.0, `max`/`min` propagate NaN), as the
/// IR defines them (`BinaryOp::eval`), with squares and cubes as products.
#[inline]
pub(crate) fn binary(b: BinaryOp, x: f32, y: f32) -> f32 {
    match b {
        // Squares and cubes (GELU's `x^3`) as products, which the JIT inlines the same way.
        BinaryOp::Pow if y == 2.0 => x * x,
        BinaryOp::Pow if y == 3.0 => x * x * x,
        other => other.eval(x, y),
    }
}

/// `0.5 x (1 + erf(x / sqrt 2))`, with `1 + erf` computed as `erfc` for negative inputs so
/// that the tail keeps its relative accuracy instead of cancelling to zero.
#[inline(always)]
pub(super) fn gelu_erf(x: f32) -> f32 {
    0.5 * x * simd::one_plus_erf(x * std::f32::consts::FRAC_1_SQRT_2)
}

/// `0.5 x (1 + tanh(u))` written as `x / (1 + e^(-2u))` (equal exactly; no cancellation for
/// negative `u`).
#[inline(always)]
pub(super) fn gelu_tanh(x: f32) -> f32 {
    let u = 0.797_884_6 * (x + 0.044715 * x * x * x);
    x / (1.0 + simd::exp(-2.0 * u))
}

#[inline(always)]
pub(super) fn silu(x: f32) -> f32 {
    x / (1.0 + simd::exp(-x))
}

#[inline(always)]
pub(super) fn relu(x: f32) -> f32 {
    if x > 0.0 || x.is_nan() { x } else { 0.0 }
}

#[inline(always)]
pub(super) fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + simd::exp(-x))
}

/// A fused elementwise body: compiled (Cranelift or the tile loops, as `mode` says) unless
/// the caller asks for the interpreter or Cranelift cannot compile it here.
pub(super) fn fused(body: &ElementwiseExpr, args: &[&Storage], out: &[usize], mode: Elementwise) -> Option<Vec<f32>> {
    let arg_dtypes: Vec<DType> = args.iter().map(|s| s.dtype()).collect();
    let dtypes = body_dtypes(body, &arg_dtypes)?;
    // Integers are exact in f32 below 2^24: an integer operand or constant may feed
    // comparisons and casts (a one-hot of labels), but integer arithmetic, whose wrapping and
    // truncation f32 does not reproduce, runs on the reference.
    let ok = body.nodes.iter().zip(&dtypes).all(|(n, d)| match n {
        ExprNode::Const { value, dtype } if dtype.is_int() => value.0.fract() == 0.0 && value.0.abs() <= F32_EXACT,
        ExprNode::Const { dtype, .. } | ExprNode::Cast(dtype, _) => matches!(dtype, DType::F32 | DType::Bool),
        ExprNode::Arg(_) => matches!(d, DType::F32 | DType::Bool) || d.is_int(),
        _ => !d.is_int(),
    });
    if !ok {
        return None;
    }
    let converted: Vec<Option<Vec<f32>>> = args
        .iter()
        .map(|s| if s.f32().is_some() { Some(None) } else { exact_f32(s).map(Some) })
        .collect::<Option<_>>()?;
    let operands: Vec<(&[f32], &[usize])> = args
        .iter()
        .zip(&converted)
        .map(|(s, c)| (c.as_deref().or_else(|| s.f32()).expect("f32 or converted"), s.shape()))
        .collect();
    if mode != Elementwise::Interpreted
        && let Ok(values) = crate::cpu::jit::run(body, &operands, out, mode)
    {
        return Some(values);
    }
    Some(interpret(body, &operands, out))
}

/// Integers (and bools) of magnitude at most this are exact in f32.
pub(super) const F32_EXACT: f64 = 16_777_216.0;

/// Each body node's dtype (None for a body that does not type, which verified graphs never
/// have).
pub(super) fn body_dtypes(body: &ElementwiseExpr, args: &[DType]) -> Option<Vec<DType>> {
    let mut out: Vec<DType> = Vec::with_capacity(body.nodes.len());
    for n in &body.nodes {
        let d = match n {
            ExprNode::Arg(i) => *args.get(*i)?,
            ExprNode::Const { dtype, .. } | ExprNode::Cast(dtype, _) => *dtype,
            ExprNode::Unary(_, x) => *out.get(*x)?,
            ExprNode::Binary(b, _, _) if b.is_comparison() => DType::Bool,
            ExprNode::Binary(_, x, _) => *out.get(*x)?,
            ExprNode::Where(_, x, _) => *out.get(*x)?,
        };
        out.push(d);
    }
    Some(out)
}

/// Integer or bool storage as f32 values, when every value is exact in f32.
pub(super) fn exact_f32(s: &Storage) -> Option<Vec<f32>> {
    let Storage::Wide(t) = s else { return None };
    if t.dtype.is_float() {
        return None;
    }
    t.data.iter().map(|&v| (v.abs() <= F32_EXACT).then_some(v as f32)).collect()
}

/// The interpreter for fused bodies, a row at a time: every body node becomes a row of
/// values (bools as 0.0/1.0), so each step is a loop over a slice.
pub(crate) fn interpret(body: &ElementwiseExpr, operands: &[(&[f32], &[usize])], out: &[usize]) -> Vec<f32> {
    let width = out.last().copied().unwrap_or(1);
    par_rows(out, |range, dst| {
        let first = range.start;
        let mut temps: Vec<Vec<f32>> = vec![vec![0.0; width]; body.nodes.len()];
        for_rows_in(out, operands, range, |r, views| {
            for (k, node) in body.nodes.iter().enumerate() {
                let (done, rest) = temps.split_at_mut(k);
                let t = &mut rest[0];
                match node {
                    ExprNode::Arg(i) => t.iter_mut().enumerate().for_each(|(j, v)| *v = views[*i].at(j)),
                    ExprNode::Const { value, .. } => t.fill(value.0 as f32),
                    ExprNode::Unary(u, x) => t.iter_mut().zip(&done[*x]).for_each(|(v, &a)| *v = unary(*u, a)),
                    ExprNode::Binary(b, x, y) => {
                        t.iter_mut().zip(done[*x].iter().zip(&done[*y])).for_each(|(v, (&a, &c))| *v = binary(*b, a, c))
                    }
                    ExprNode::Where(c, x, y) => t
                        .iter_mut()
                        .enumerate()
                        .for_each(|(j, v)| *v = if done[*c][j] != 0.0 { done[*x][j] } else { done[*y][j] }),
                    ExprNode::Cast(DType::Bool, x) => {
                        t.iter_mut().zip(&done[*x]).for_each(|(v, &a)| *v = if a != 0.0 { 1.0 } else { 0.0 })
                    }
                    ExprNode::Cast(_, x) => t.copy_from_slice(&done[*x]),
                }
            }
            dst[(r - first) * width..(r - first + 1) * width].copy_from_slice(&temps[body.nodes.len() - 1]);
        });
    })
}

/// A `random_uniform` stream whose key depends on the run's step (see `Op::RandomUniform`).
pub(super) fn random_uniform(seed: u32, step: Option<&Storage>, out: &[usize]) -> Option<Vec<f32>> {
    let step = match step {
        Some(Storage::Wide(t)) => Some(*t.data.iter().next()?),
        Some(_) => return None,
        None => None,
    };
    let key = crate::reference::stream_key(seed, step);
    let draw = |i: usize| (crate::reference::pcg(i as u32 ^ key) >> 8) as f32 / 16_777_216.0;
    Some(filled(out.iter().product(), BLOCK, |start, o| {
        o.iter_mut().enumerate().for_each(|(k, v)| {
            v.write(draw(start + k));
        })
    }))
}
