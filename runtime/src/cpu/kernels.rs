//! The f32 kernels of the CPU target. Each returns None when its fast path does not apply
//! (another dtype, a softmax over a non-last axis, ...), and the executor then runs the
//! reference implementation of the op instead: correct for every op and dtype, not fast.

use super::broadcast::{Row, for_rows_in, strides};
use super::simd;
use super::storage::Storage;
use rayon::prelude::*;
use rustral_ir::{Activation, BinaryOp, DType, ElementwiseExpr, ExprNode, GeluApprox, Op, ReduceOp, UnaryOp};
use std::mem::MaybeUninit;

/// Run `op` on f32 storage if a fast kernel exists for it; `out` is the bound output shape.
/// `jit` chooses Cranelift-compiled fused elementwise kernels over the row interpreter.
pub(super) fn try_f32(op: &Op, args: &[&Storage], out_dtype: DType, out: &[usize], jit: bool) -> Option<Vec<f32>> {
    if out_dtype != DType::F32 {
        return None;
    }
    let f = |i: usize| args.get(i).and_then(|s| s.f32().map(|v| (v, s.shape())));
    match op {
        Op::Unary(u) => Some(map_unary(*u, f(0)?.0)),
        Op::Gelu { approx: GeluApprox::Erf } => Some(map(f(0)?.0, gelu_erf)),
        Op::Gelu { approx: GeluApprox::Tanh } => Some(map(f(0)?.0, gelu_tanh)),
        Op::Silu => Some(map(f(0)?.0, |v| v / (1.0 + simd::exp(-v)))),
        Op::Slice { axis, start, .. } => Some(slice(f(0)?, *axis, *start, out)),
        Op::Concat { axis } => {
            let parts: Option<Vec<(&[f32], &[usize])>> = (0..args.len()).map(f).collect();
            Some(concat(&parts?, *axis, out))
        }
        Op::Binary(b) if !b.is_comparison() => {
            let (x, y) = (f(0)?, f(1)?);
            if jit {
                // A one-node body: the JIT's broadcast-aware vector loop, compiled once per op.
                let body =
                    ElementwiseExpr { nodes: vec![ExprNode::Arg(0), ExprNode::Arg(1), ExprNode::Binary(*b, 0, 1)] };
                if let Ok(v) = super::jit::run(&body, &[x, y], out) {
                    return Some(v);
                }
            }
            Some(rows(out, &[x, y], |r, i| binary(*b, r[0].at(i), r[1].at(i))))
        }
        Op::Where => {
            let c = cond_as_f32(args[0])?;
            let (x, y) = (f(1)?, f(2)?);
            let cs = args[0].shape().to_vec();
            Some(rows(out, &[(&c, &cs), x, y], |r, i| if r[0].at(i) != 0.0 { r[1].at(i) } else { r[2].at(i) }))
        }
        Op::Cast { to: DType::F32 } => f(0).map(|(x, _)| x.to_vec()),
        Op::FusedElementwise { body } => fused(body, args, out, jit),
        Op::MatMul => matmul(f(0)?, f(1)?, None, Activation::None, out),
        Op::MatMulEpilogue { activation } => {
            let bias = match args.get(2) {
                Some(_) => Some(f(2)?),
                None => None,
            };
            matmul(f(0)?, f(1)?, bias, *activation, out)
        }
        Op::LayerNorm { eps } | Op::RmsNorm { eps } => {
            let (x, _) = f(0)?;
            let g = if args.len() > 1 { Some(f(1)?.0) } else { None };
            let b = if args.len() > 2 { Some(f(2)?.0) } else { None };
            Some(norm(x, *out.last()?, g, b, eps.0 as f32, matches!(op, Op::LayerNorm { .. })))
        }
        Op::Softmax { axis } if *axis + 1 == out.len() => Some(softmax(f(0)?.0, *out.last()?)),
        Op::Reduce { op: r, axes, .. } if axes.len() == 1 && axes[0] + 1 == args[0].shape().len() => {
            let (x, s) = f(0)?;
            Some(reduce_last(x, *s.last()?, *r, out.iter().product()))
        }
        Op::Reduce { op: r, axes, .. } if axes.windows(2).all(|w| w[1] == w[0] + 1) => {
            // Consecutive axes: one middle axis of their combined length.
            let (x, s) = f(0)?;
            let (first, last) = (axes[0], *axes.last()?);
            let outer: usize = s[..first].iter().product();
            let len: usize = s[first..=last].iter().product();
            let inner: usize = s[last + 1..].iter().product();
            Some(if inner == 1 { reduce_last(x, len, *r, outer) } else { reduce_middle(x, outer, len, inner, *r) })
        }
        Op::Attention { scale, causal } => attention(args, scale.0 as f32, *causal, out),
        Op::Gather { axis: 0 } => gather_rows(f(0)?, args[1]),
        Op::CrossEntropy => cross_entropy(f(0)?, args[1]),
        Op::RandomUniform { seed } => random_uniform(*seed, args.first().copied(), out),
        Op::Reshape { .. } => f(0).map(|(x, _)| x.to_vec()),
        Op::BroadcastTo { .. } => {
            let x = f(0)?;
            Some(rows(out, &[x], |r, i| r[0].at(i)))
        }
        Op::Permute { perm } => Some(permute(f(0)?, perm, out)),
        _ => None,
    }
}

/// Elements per parallel task: big enough to amortise scheduling, small enough to balance.
const BLOCK: usize = 1 << 15;

/// `f` over a slice, in parallel blocks, vectorised.
fn map(x: &[f32], f: impl Fn(f32) -> f32 + Copy + Sync) -> Vec<f32> {
    filled(x.len(), BLOCK, |start, o| simd::map(&x[start..start + o.len()], o, f))
}

/// A unary op over a slice, the op chosen outside the loop so that each loop vectorises (the
/// same expressions as `unary`, so the same bits).
fn map_unary(u: UnaryOp, x: &[f32]) -> Vec<f32> {
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
        UnaryOp::Log | UnaryOp::Sin | UnaryOp::Cos => map(x, move |v| unary(u, v)),
    }
}

/// `n` values written by `fill(first_index, chunk)` over disjoint chunks of `chunk` values in
/// parallel, with no zero-fill first: for memory-bound kernels a memset pass costs as much as
/// the kernel. `fill` must write every value of its chunk.
fn filled(n: usize, chunk: usize, fill: impl Fn(usize, &mut [MaybeUninit<f32>]) + Sync) -> Vec<f32> {
    let chunk = chunk.max(1);
    let mut out = Vec::with_capacity(n);
    out.spare_capacity_mut()[..n].par_chunks_mut(chunk).enumerate().for_each(|(i, c)| fill(i * chunk, c));
    // SAFETY: the chunks cover 0..n and each `fill` wrote all of its chunk.
    unsafe { out.set_len(n) };
    out
}

/// Run `work(first_row, rows_slice)` over blocks of output rows in parallel.
fn par_rows(out: &[usize], work: impl Fn(std::ops::Range<usize>, &mut [f32]) + Sync) -> Vec<f32> {
    let width = out.last().copied().unwrap_or(1).max(1);
    let total: usize = out.iter().product();
    let mut result = vec![0.0f32; total];
    let rows_per_block = (BLOCK / width).max(1);
    result.par_chunks_mut(rows_per_block * width).enumerate().for_each(|(b, dst)| {
        let first = b * rows_per_block;
        work(first..first + dst.len() / width, dst);
    });
    result
}

/// Evaluate `g(row_views, i)` for every output element, a row at a time, rows in parallel.
fn rows(out: &[usize], operands: &[(&[f32], &[usize])], g: impl Fn(&[Row<'_>], usize) -> f32 + Sync) -> Vec<f32> {
    let width = out.last().copied().unwrap_or(1);
    par_rows(out, |range, dst| {
        let first = range.start;
        for_rows_in(out, operands, range, |r, views| {
            let row = &mut dst[(r - first) * width..(r - first + 1) * width];
            for (i, d) in row.iter_mut().enumerate() {
                *d = g(views, i);
            }
        });
    })
}

fn cond_as_f32(s: &Storage) -> Option<Vec<f32>> {
    match s {
        Storage::Wide(t) if t.dtype == DType::Bool => Some(t.data.iter().map(|&v| v as f32).collect()),
        _ => None,
    }
}

/// The unary ops in f32 (erf from libm; tanh and exp from std).
#[inline]
pub(super) fn unary(u: UnaryOp, x: f32) -> f32 {
    match u {
        UnaryOp::Neg => -x,
        UnaryOp::Abs => x.abs(),
        UnaryOp::Exp => simd::exp(x),
        UnaryOp::Log => x.ln(),
        UnaryOp::Sqrt => x.sqrt(),
        UnaryOp::Rsqrt => 1.0 / x.sqrt(),
        UnaryOp::Recip => 1.0 / x,
        UnaryOp::Tanh => simd::tanh(x),
        UnaryOp::Sigmoid => 1.0 / (1.0 + simd::exp(-x)),
        UnaryOp::Relu => {
            if x > 0.0 || x.is_nan() {
                x
            } else {
                0.0
            }
        }
        UnaryOp::Erf => simd::erf(x),
        UnaryOp::Sin => x.sin(),
        UnaryOp::Cos => x.cos(),
    }
}

/// The binary ops in f32 (comparisons give 1.0 or 0.0).
#[inline]
pub(super) fn binary(b: BinaryOp, x: f32, y: f32) -> f32 {
    let truth = |c: bool| if c { 1.0 } else { 0.0 };
    match b {
        BinaryOp::Add => x + y,
        BinaryOp::Sub => x - y,
        BinaryOp::Mul => x * y,
        BinaryOp::Div => x / y,
        // Squares and cubes (GELU's `x^3`) as products, which the JIT inlines the same way.
        BinaryOp::Pow if y == 2.0 => x * x,
        BinaryOp::Pow if y == 3.0 => x * x * x,
        BinaryOp::Pow => x.powf(y),
        BinaryOp::Max => {
            if x.is_nan() || y.is_nan() {
                f32::NAN
            } else {
                x.max(y)
            }
        }
        BinaryOp::Min => {
            if x.is_nan() || y.is_nan() {
                f32::NAN
            } else {
                x.min(y)
            }
        }
        BinaryOp::Eq => truth(x == y),
        BinaryOp::Ne => truth(x != y),
        BinaryOp::Lt => truth(x < y),
        BinaryOp::Le => truth(x <= y),
        BinaryOp::Gt => truth(x > y),
        BinaryOp::Ge => truth(x >= y),
    }
}

/// `0.5 x (1 + erf(x / sqrt 2))`, with `1 + erf` computed as `erfc` for negative inputs so
/// that the tail keeps its relative accuracy instead of cancelling to zero.
#[inline(always)]
fn gelu_erf(x: f32) -> f32 {
    0.5 * x * simd::one_plus_erf(x * std::f32::consts::FRAC_1_SQRT_2)
}

/// `0.5 x (1 + tanh(u))` written as `x / (1 + e^(-2u))` (equal exactly; no cancellation for
/// negative `u`).
#[inline(always)]
fn gelu_tanh(x: f32) -> f32 {
    let u = 0.797_884_6 * (x + 0.044715 * x * x * x);
    x / (1.0 + simd::exp(-2.0 * u))
}

#[inline(always)]
fn silu(x: f32) -> f32 {
    x / (1.0 + simd::exp(-x))
}

#[inline(always)]
fn relu(x: f32) -> f32 {
    if x > 0.0 || x.is_nan() { x } else { 0.0 }
}

#[inline(always)]
fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + simd::exp(-x))
}

#[inline(always)]
fn identity(x: f32) -> f32 {
    x
}

#[inline(always)]
fn each(rows: &mut [f32], n: usize, bias: Option<&[f32]>, f: impl Fn(f32) -> f32 + Copy) {
    for row in rows.chunks_mut(n) {
        match bias {
            Some(b) => row.iter_mut().zip(b).for_each(|(v, &bb)| *v = f(*v + bb)),
            None => row.iter_mut().for_each(|v| *v = f(*v)),
        }
    }
}

simd::multiversion! {
    /// Add the bias row and apply the activation to GEMM output rows of width `n`, with the
    /// activation chosen outside the loop so each loop vectorises.
    fn epilogue(rows: &mut [f32], n: usize, bias: Option<&[f32]>, act: Activation) {
        match act {
            Activation::None if bias.is_none() => {}
            Activation::None => each(rows, n, bias, identity),
            Activation::Relu => each(rows, n, bias, relu),
            Activation::GeluErf => each(rows, n, bias, gelu_erf),
            Activation::GeluTanh => each(rows, n, bias, gelu_tanh),
            Activation::Silu => each(rows, n, bias, silu),
            Activation::Tanh => each(rows, n, bias, simd::tanh),
            Activation::Sigmoid => each(rows, n, bias, sigmoid),
        }
    }
}

/// A fused elementwise body: compiled by Cranelift (`jit`) unless the caller asks for the
/// interpreter or Cranelift cannot compile it here.
fn fused(body: &ElementwiseExpr, args: &[&Storage], out: &[usize], jit: bool) -> Option<Vec<f32>> {
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
    if jit && let Ok(values) = super::jit::run(body, &operands, out) {
        return Some(values);
    }
    Some(interpret(body, &operands, out))
}

/// Integers (and bools) of magnitude at most this are exact in f32.
const F32_EXACT: f64 = 16_777_216.0;

/// Each body node's dtype (None for a body that does not type, which verified graphs never
/// have).
fn body_dtypes(body: &ElementwiseExpr, args: &[DType]) -> Option<Vec<DType>> {
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
fn exact_f32(s: &Storage) -> Option<Vec<f32>> {
    let Storage::Wide(t) = s else { return None };
    if t.dtype.is_float() {
        return None;
    }
    t.data.iter().map(|&v| (v.abs() <= F32_EXACT).then_some(v as f32)).collect()
}

/// The interpreter for fused bodies, a row at a time: every body node becomes a row of
/// values (bools as 0.0/1.0), so each step is a loop over a slice.
pub(super) fn interpret(body: &ElementwiseExpr, operands: &[(&[f32], &[usize])], out: &[usize]) -> Vec<f32> {
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

/// Batched matmul (batch dims broadcast) with an optional bias over the last axis and an
/// activation applied to each output block right after its GEMM, while it is in cache. The
/// GEMM is the `gemm` crate's; batches run in parallel, a single product uses its own
/// parallel kernel on the pool's threads.
fn matmul(
    a: (&[f32], &[usize]),
    b: (&[f32], &[usize]),
    bias: Option<(&[f32], &[usize])>,
    act: Activation,
    out: &[usize],
) -> Option<Vec<f32>> {
    let (ra, rb, ro) = (a.1.len(), b.1.len(), out.len());
    let (m, k, n) = (a.1[ra - 2], a.1[ra - 1], b.1[rb - 1]);
    let batch_out = &out[..ro - 2];
    let batches: usize = batch_out.iter().product();
    let bias_row: Option<&[f32]> = match bias {
        Some((v, s)) if s.len() == 1 && s[0] == n => Some(v),
        Some(_) => return None,
        None => None,
    };
    let sa = strides(&a.1[..ra - 2], batch_out);
    let sb = strides(&b.1[..rb - 2], batch_out);
    let offset = |index: usize, st: &[usize], block: usize| {
        let mut rem = index;
        let mut off = 0;
        for d in (0..batch_out.len()).rev() {
            off += (rem % batch_out[d]) * st[d] * block;
            rem /= batch_out[d];
        }
        off
    };
    let mut c = vec![0.0f32; batches * m * n];
    if c.is_empty() {
        // No product to write (a zero batch dim, m or n): the GEMM must not run on an empty
        // destination.
        return Some(c);
    }
    if k == 0 {
        // An empty contraction is zero; the epilogue still applies.
        epilogue(&mut c, n, bias_row, act);
        return Some(c);
    }
    let product = |a_off: usize, b_off: usize, rows: usize, dst: &mut [f32], par: gemm::Parallelism| {
        // SAFETY: the slices hold rows*k, k*n and rows*n elements at these offsets (shapes
        // were checked by the verifier and bound from the buffers' own lengths).
        unsafe {
            gemm::gemm(
                rows,
                n,
                k,
                dst.as_mut_ptr(),
                1,
                n as isize,
                false,
                a.0.as_ptr().add(a_off),
                1,
                k as isize,
                b.0.as_ptr().add(b_off),
                1,
                n as isize,
                0.0,
                1.0,
                false,
                false,
                false,
                par,
            );
        }
        epilogue(dst, n, bias_row, act);
    };
    if batches > 1 {
        c.par_chunks_mut(m * n).enumerate().for_each(|(i, dst)| {
            product(offset(i, &sa, m * k), offset(i, &sb, k * n), m, dst, gemm::Parallelism::None)
        });
    } else {
        let threads = rayon::current_num_threads();
        let par = if threads > 1 { gemm::Parallelism::Rayon(threads) } else { gemm::Parallelism::None };
        product(0, 0, m, &mut c, par);
    }
    Some(c)
}

/// LayerNorm (`center`) or RMSNorm over rows of `width`, in parallel over rows; each row is
/// read twice (statistics, then normalise) and written once.
fn norm(x: &[f32], width: usize, g: Option<&[f32]>, b: Option<&[f32]>, eps: f32, center: bool) -> Vec<f32> {
    if width == 0 {
        return vec![0.0f32; x.len()];
    }
    let rows_per_task = (BLOCK / width).max(1) * width;
    filled(x.len(), rows_per_task, |start, o| norm_rows(o, &x[start..start + o.len()], width, g, b, eps, center))
}

simd::multiversion! {
    /// Normalise consecutive rows of `width`.
    fn norm_rows(
        o: &mut [MaybeUninit<f32>],
        x: &[f32],
        width: usize,
        g: Option<&[f32]>,
        b: Option<&[f32]>,
        eps: f32,
        center: bool,
    ) {
        for (o, row) in o.chunks_mut(width).zip(x.chunks(width)) {
            let n = width as f32;
            let mean = if center { simd::sum(row) / n } else { 0.0 };
            let var = simd::sum_sq_dev(row, mean) / n;
            let inv = 1.0 / (var + eps).sqrt();
            match (g, b) {
                (Some(g), Some(b)) => o
                    .iter_mut()
                    .zip(row)
                    .zip(g.iter().zip(b))
                    .for_each(|((d, &v), (&gg, &bb))| _ = d.write((v - mean) * inv * gg + bb)),
                // `+ 0.0` as the IR defines it (an absent beta is 0): -0 becomes +0.
                (Some(g), None) => {
                    o.iter_mut().zip(row).zip(g).for_each(|((d, &v), &gg)| _ = d.write((v - mean) * inv * gg + 0.0))
                }
                _ => o.iter_mut().zip(row).for_each(|(d, &v)| _ = d.write((v - mean) * inv + 0.0)),
            }
        }
    }
}

/// Softmax over rows of `width`, in parallel over rows.
fn softmax(x: &[f32], width: usize) -> Vec<f32> {
    if width == 0 {
        return vec![0.0f32; x.len()];
    }
    let rows_per_task = (BLOCK / width).max(1) * width;
    filled(x.len(), rows_per_task, |start, o| softmax_rows(o, &x[start..start + o.len()], width))
}

simd::multiversion! {
    /// Softmax of consecutive rows of `width`.
    fn softmax_rows(o: &mut [MaybeUninit<f32>], x: &[f32], width: usize) {
        // A `for` loop, not `for_each`: the latter's `fold` is a separate function that is
        // not compiled with this copy's target features.
        for (o, row) in o.chunks_mut(width).zip(x.chunks(width)) {
            softmax_row(row, o);
        }
    }
}

#[inline(always)]
fn softmax_in_place(row: &mut [f32]) {
    let max = simd::max(row);
    row.iter_mut().for_each(|v| *v = simd::exp(*v - max));
    let inv = 1.0 / simd::sum(row);
    row.iter_mut().for_each(|v| *v *= inv);
}

#[inline(always)]
fn softmax_row(row: &[f32], o: &mut [MaybeUninit<f32>]) {
    let max = simd::max(row);
    for (d, &v) in o.iter_mut().zip(row) {
        d.write(simd::exp(v - max));
    }
    // SAFETY: every value of `o` was written just above (`o` and `row` have one length).
    let o = unsafe { &mut *(o as *mut [MaybeUninit<f32>] as *mut [f32]) };
    let sum = simd::sum(o);
    let inv = 1.0 / sum;
    o.iter_mut().for_each(|d| *d *= inv);
}

/// Reduce rows of `width` into `rows` values (an empty row gives the reduction's identity).
fn reduce_last(x: &[f32], width: usize, r: ReduceOp, rows: usize) -> Vec<f32> {
    if width == 0 {
        let fill = match r {
            ReduceOp::Sum => 0.0,
            ReduceOp::Mean => f32::NAN,
            ReduceOp::Max => f32::NEG_INFINITY,
            ReduceOp::Min => f32::INFINITY,
        };
        return vec![fill; rows];
    }
    x.par_chunks(width)
        .map(|row| match r {
            ReduceOp::Sum => simd::sum(row),
            ReduceOp::Mean => simd::sum(row) / width as f32,
            ReduceOp::Max => simd::max(row),
            ReduceOp::Min => {
                row.iter().fold(f32::INFINITY, |m, &v| if v.is_nan() || m.is_nan() { f32::NAN } else { m.min(v) })
            }
        })
        .collect()
}

/// Reduce `x[outer, len, inner]` over its middle axis, a whole inner row at a time (so the
/// combining loop runs over contiguous memory and vectorises).
fn reduce_middle(x: &[f32], outer: usize, len: usize, inner: usize, r: ReduceOp) -> Vec<f32> {
    let identity = match r {
        ReduceOp::Sum => 0.0,
        ReduceOp::Mean => f32::NAN,
        ReduceOp::Max => f32::NEG_INFINITY,
        ReduceOp::Min => f32::INFINITY,
    };
    let mut out = vec![identity; outer * inner];
    if len == 0 || out.is_empty() {
        return out;
    }
    let nan_aware =
        |a: f32, b: f32, pick: fn(f32, f32) -> f32| if a.is_nan() || b.is_nan() { f32::NAN } else { pick(a, b) };
    out.par_chunks_mut(inner).enumerate().for_each(|(o, dst)| {
        let block = &x[o * len * inner..(o + 1) * len * inner];
        dst.copy_from_slice(&block[..inner]);
        for row in block.chunks_exact(inner).skip(1) {
            match r {
                ReduceOp::Sum | ReduceOp::Mean => {
                    for (d, &v) in dst.iter_mut().zip(row) {
                        *d += v;
                    }
                }
                ReduceOp::Max => {
                    for (d, &v) in dst.iter_mut().zip(row) {
                        *d = nan_aware(*d, v, f32::max);
                    }
                }
                ReduceOp::Min => {
                    for (d, &v) in dst.iter_mut().zip(row) {
                        *d = nan_aware(*d, v, f32::min);
                    }
                }
            }
        }
        if r == ReduceOp::Mean {
            let inv = 1.0 / len as f32;
            for d in dst.iter_mut() {
                *d *= inv;
            }
        }
    });
    out
}

/// Attention per (batch, head), one query row at a time, so only a row of `lk` scores ever
/// exists (never the `[.., lq, lk]` matrix). Keys are transposed once per head so that a
/// score row is a sum of `d` contiguous axpys, and the output row a sum of `lk` axpys over
/// values: both vectorise.
fn attention(args: &[&Storage], scale: f32, causal: bool, out: &[usize]) -> Option<Vec<f32>> {
    let (q, qs) = (args[0].f32()?, args[0].shape());
    let (k, ks) = (args[1].f32()?, args[1].shape());
    let (v, vs) = (args[2].f32()?, args[2].shape());
    let mask = match args.get(3) {
        Some(m) => Some((m.f32()?, m.shape())),
        None => None,
    };
    let r = out.len();
    let (lq, dv) = (out[r - 2], out[r - 1]);
    let (lk, d) = (ks[ks.len() - 2], qs[qs.len() - 1]);
    let batch = &out[..r - 2];
    let (sq, sk, sv) =
        (strides(&qs[..qs.len() - 2], batch), strides(&ks[..ks.len() - 2], batch), strides(&vs[..vs.len() - 2], batch));
    let mut score_shape = batch.to_vec();
    score_shape.extend([lq, lk]);
    let sm = mask.map(|(_, s)| strides(s, &score_shape));
    let mut result = vec![0.0f32; out.iter().product()];
    if dv == 0 || lq == 0 {
        return Some(result);
    }
    let head = Head {
        q,
        k,
        v,
        mask: mask.map(|(m, _)| m),
        mask_strides: sm.as_deref(),
        batch,
        sq: &sq,
        sk: &sk,
        sv: &sv,
        lq,
        lk,
        d,
        dv,
        scale,
        causal,
    };
    result.par_chunks_mut(lq * dv).enumerate().for_each(|(bi, head_out)| attention_head(head_out, bi, &head));
    Some(result)
}

/// What one attention head reads.
struct Head<'a> {
    q: &'a [f32],
    k: &'a [f32],
    v: &'a [f32],
    mask: Option<&'a [f32]>,
    mask_strides: Option<&'a [usize]>,
    batch: &'a [usize],
    sq: &'a [usize],
    sk: &'a [usize],
    sv: &'a [usize],
    lq: usize,
    lk: usize,
    d: usize,
    dv: usize,
    scale: f32,
    causal: bool,
}

impl Head<'_> {
    /// Offset of batch index `index` under strides `st` (in units of whole matrices).
    #[inline(always)]
    fn offset(&self, index: usize, st: &[usize]) -> usize {
        let mut rem = index;
        let mut off = 0;
        for dd in (0..self.batch.len()).rev() {
            off += (rem % self.batch[dd]) * st[dd];
            rem /= self.batch[dd];
        }
        off
    }
}

simd::multiversion! {
    /// One (batch, head): rows of queries against all keys, a row of scores at a time.
    fn attention_head(head_out: &mut [f32], bi: usize, head: &Head<'_>) {
        let Head { q, k, v, mask, mask_strides, batch, sq, sk, sv, lq, lk, d, dv, scale, causal } = *head;
        let (qb, kb, vb) = (head.offset(bi, sq) * lq * d, head.offset(bi, sk) * lk * d, head.offset(bi, sv) * lk * dv);
        let mut kt = vec![0.0f32; d * lk];
        for j in 0..lk {
            for t in 0..d {
                kt[t * lk + j] = k[kb + j * d + t];
            }
        }
        let mut row = vec![0.0f32; lk];
        for i in 0..lq {
            scores_row(&mut row, &q[qb + i * d..qb + (i + 1) * d], &kt, scale);
            if let (Some(m), Some(st)) = (mask, mask_strides) {
                let base = head.offset(bi, &st[..batch.len()]) + i * st[batch.len()];
                let sj = st[batch.len() + 1];
                row.iter_mut().enumerate().for_each(|(j, x)| *x += m[base + j * sj]);
            }
            // Key j is visible to query i when j <= i + lk - lq.
            let visible = if causal { (i + lk + 1).saturating_sub(lq).min(lk) } else { lk };
            row[visible..].fill(f32::NEG_INFINITY);
            softmax_in_place(&mut row);
            weighted_rows(&mut head_out[i * dv..(i + 1) * dv], &row[..visible], &v[vb..vb + visible * dv]);
        }
    }
}

/// Rows of an f32 table picked by integer ids (embedding lookup).
fn gather_rows(table: (&[f32], &[usize]), ids: &Storage) -> Option<Vec<f32>> {
    let Storage::Wide(ids) = ids else { return None };
    let rows = *table.1.first()?;
    let width: usize = table.1[1..].iter().product();
    let mut out = Vec::with_capacity(ids.data.len() * width);
    for &i in ids.data.iter() {
        if i < 0.0 || i >= rows as f64 {
            return None; // the reference path reports the bad index
        }
        let i = i as usize;
        out.extend_from_slice(&table.0[i * width..(i + 1) * width]);
    }
    Some(out)
}

/// A `random_uniform` stream whose key depends on the run's step (see `Op::RandomUniform`).
fn random_uniform(seed: u32, step: Option<&Storage>, out: &[usize]) -> Option<Vec<f32>> {
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

/// Each row's `max + log(sum(exp(x - max))) - x[target]`, rows in parallel; None (the
/// reference reports it) when a target is out of range.
fn cross_entropy(x: (&[f32], &[usize]), targets: &Storage) -> Option<Vec<f32>> {
    let Storage::Wide(targets) = targets else { return None };
    let width = *x.1.last()?;
    if width == 0 || targets.data.iter().any(|&t| !(t >= 0.0 && t < width as f64)) {
        return None; // no classes: the reference gives the empty result or the error
    }
    let row = |(row, &t): (&[f32], &f64)| {
        let max = simd::max(row);
        let sum: f32 = row.iter().map(|&v| simd::exp(v - max)).sum();
        max + sum.ln() - row[t as usize]
    };
    Some(x.0.par_chunks(width).zip(targets.data.as_slice()?.par_iter()).map(row).collect())
}

/// `out[idx] = x[idx permuted back]`, an output row at a time (rows in parallel).
fn permute(x: (&[f32], &[usize]), perm: &[usize], out: &[usize]) -> Vec<f32> {
    let mut contiguous = vec![1usize; x.1.len()];
    for i in (0..x.1.len().saturating_sub(1)).rev() {
        contiguous[i] = contiguous[i + 1] * x.1[i + 1];
    }
    let st: Vec<usize> = perm.iter().map(|&p| contiguous[p]).collect();
    let total: usize = out.iter().product();
    let rank = out.len();
    if rank == 0 || out[rank - 1] == 0 || total == 0 {
        return x.0.iter().take(total).copied().collect();
    }
    let swaps_last_two = rank >= 2
        && perm[rank - 1] == rank - 2
        && perm[rank - 2] == rank - 1
        && perm[..rank - 2].iter().enumerate().all(|(i, &p)| i == p);
    if swaps_last_two {
        return transpose_last_two(x.0, x.1[rank - 2], x.1[rank - 1]);
    }
    // One output row (the last axis) at a time, in parallel: a contiguous copy when the last
    // axis stays last, else a gather with the input stride of the axis that lands there.
    let width = out[rank - 1];
    let step = st[rank - 1];
    let mut result = vec![0.0f32; total];
    let outer = &out[..rank - 1];
    result.par_chunks_mut(width).enumerate().for_each(|(row, dst)| {
        let (mut rem, mut base) = (row, 0);
        for dd in (0..outer.len()).rev() {
            base += (rem % outer[dd]) * st[dd];
            rem /= outer[dd];
        }
        if step == 1 {
            dst.copy_from_slice(&x.0[base..base + width]);
        } else {
            for (j, d) in dst.iter_mut().enumerate() {
                *d = x.0[base + j * step];
            }
        }
    });
    result
}

/// `out[b][c][r] = x[b][r][c]` for matrices of `rows x cols`, in square tiles so that both
/// the reads and the writes stay in cache (a weight gradient's transpose: a row-at-a-time
/// gather reads one element per cache line). Tasks are a batch's bands of output rows.
fn transpose_last_two(x: &[f32], rows: usize, cols: usize) -> Vec<f32> {
    const TILE: usize = 16;
    let matrix = rows * cols;
    let mut out = vec![0.0f32; x.len()];
    if matrix == 0 {
        return out;
    }
    out.par_chunks_mut(matrix).zip(x.par_chunks(matrix)).for_each(|(dst, src)| {
        dst.par_chunks_mut(TILE * rows).enumerate().for_each(|(band, dst)| {
            let c0 = band * TILE;
            let width = dst.len() / rows;
            // A tile is read a source row at a time into `tile`, then written an output row at a
            // time: both sides contiguous (strided stores 4 KiB apart alias in L1).
            let mut tile = [[0.0f32; TILE]; TILE];
            for r0 in (0..rows).step_by(TILE) {
                let height = TILE.min(rows - r0);
                for (r, t) in tile.iter_mut().enumerate().take(height) {
                    let at = (r0 + r) * cols + c0;
                    t[..width].copy_from_slice(&src[at..at + width]);
                }
                for c in 0..width {
                    let row = &mut dst[c * rows + r0..c * rows + r0 + height];
                    for (r, d) in row.iter_mut().enumerate() {
                        *d = tile[r][c];
                    }
                }
            }
        });
    });
    out
}

/// Elements `start..start + out[axis]` along `axis`, copied a contiguous run at a time.
fn slice(x: (&[f32], &[usize]), axis: usize, start: usize, out: &[usize]) -> Vec<f32> {
    let inner: usize = x.1[axis + 1..].iter().product();
    let outer: usize = x.1[..axis].iter().product();
    let (len_in, len_out) = (x.1[axis] * inner, out[axis] * inner);
    let mut result = Vec::with_capacity(outer * len_out);
    for o in 0..outer {
        let base = o * len_in + start * inner;
        result.extend_from_slice(&x.0[base..base + len_out]);
    }
    result
}

/// Parts joined along `axis`, a contiguous run of each part at a time.
fn concat(parts: &[(&[f32], &[usize])], axis: usize, out: &[usize]) -> Vec<f32> {
    let inner: usize = out[axis + 1..].iter().product();
    let outer: usize = out[..axis].iter().product();
    let mut result = Vec::with_capacity(out.iter().product());
    for o in 0..outer {
        for (data, shape) in parts {
            let run = shape[axis] * inner;
            result.extend_from_slice(&data[o * run..(o + 1) * run]);
        }
    }
    result
}

/// Register blocking for the attention loops. A score block of `WIDE` lanes keeps four
/// 16-lane accumulators in flight (independent FMA chains hide the FMA latency); the value
/// sum keeps four partial sums per 16-lane block for the same reason.
const LANES: usize = 16;
const WIDE: usize = 4 * LANES;

/// `row[j] = scale * sum_t q[t] * kt[t][j]` with `kt` the keys transposed (`d x lk`).
#[inline(always)]
fn scores_row(row: &mut [f32], q: &[f32], kt: &[f32], scale: f32) {
    let lk = row.len();
    let mut j = 0;
    while j + WIDE <= lk {
        score_block::<WIDE>(row, q, kt, scale, j);
        j += WIDE;
    }
    while j + LANES <= lk {
        score_block::<LANES>(row, q, kt, scale, j);
        j += LANES;
    }
    for (jj, r) in row.iter_mut().enumerate().skip(j) {
        *r = q.iter().enumerate().map(|(t, &qt)| qt * kt[t * lk + jj]).sum::<f32>() * scale;
    }
}

#[inline(always)]
fn score_block<const N: usize>(row: &mut [f32], q: &[f32], kt: &[f32], scale: f32, j: usize) {
    let lk = row.len();
    let mut acc = [0.0f32; N];
    for (t, &qt) in q.iter().enumerate() {
        let k = &kt[t * lk + j..t * lk + j + N];
        for u in 0..N {
            acc[u] = qt.mul_add(k[u], acc[u]);
        }
    }
    for u in 0..N {
        row[j + u] = acc[u] * scale;
    }
}

/// `out = sum_j p[j] * v[j]` over value rows of `out.len()`.
#[inline(always)]
fn weighted_rows(out: &mut [f32], p: &[f32], v: &[f32]) {
    let dv = out.len();
    let mut c = 0;
    while c + LANES <= dv {
        let mut acc = [[0.0f32; LANES]; 4];
        let quads = p.len() / 4;
        for q4 in 0..quads {
            for (lane, a) in acc.iter_mut().enumerate() {
                let j = q4 * 4 + lane;
                let (pj, x) = (p[j], &v[j * dv + c..j * dv + c + LANES]);
                for u in 0..LANES {
                    a[u] = pj.mul_add(x[u], a[u]);
                }
            }
        }
        for j in quads * 4..p.len() {
            let x = &v[j * dv + c..j * dv + c + LANES];
            for u in 0..LANES {
                acc[0][u] = p[j].mul_add(x[u], acc[0][u]);
            }
        }
        for u in 0..LANES {
            out[c + u] = (acc[0][u] + acc[1][u]) + (acc[2][u] + acc[3][u]);
        }
        c += LANES;
    }
    for (cc, o) in out.iter_mut().enumerate().skip(c) {
        *o = p.iter().enumerate().map(|(j, &pj)| pj * v[j * dv + cc]).sum();
    }
}
