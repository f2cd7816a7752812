//! The f32 kernels of the CPU target. Each returns None when its fast path does not apply
//! (another dtype, a softmax over a non-last axis, ...), and the executor then runs the
//! reference implementation of the op instead: correct for every op and dtype, not fast.

use super::Elementwise;
use super::broadcast::{Row, for_rows_in, strides};
use super::simd;
use super::storage::Storage;
use rayon::prelude::*;
use rustral_ir::{Activation, BinaryOp, DType, ElementwiseExpr, ExprNode, GeluApprox, Op, ReduceOp, UnaryOp};
use std::mem::MaybeUninit;

mod attention;
mod layout;
mod matmul;
mod pointwise;
mod quant;
mod rows;
mod sgemm;
mod window;
mod winograd;

use attention::*;
use layout::*;
use matmul::*;
#[cfg(test)]
pub(super) use pointwise::interpret;
use pointwise::*;
pub(super) use pointwise::{binary, unary};
use rows::*;

/// Which of the `gemm` crate's kernel sets the GEMMs run on (`widest`, or the narrower `avx2`
/// or `baseline` that `RUSTRAL_CPU_KERNELS` asks for), for manifests.
pub(super) fn gemm_kernels() -> &'static str {
    match sgemm::kernels() {
        sgemm::Kernels::Widest => "widest",
        sgemm::Kernels::Fma => "avx2",
        sgemm::Kernels::Scalar => "baseline",
    }
}

/// The kernels over quantized blocks (`u8` storage): `quant_matmul`, `dequantize`, and the
/// row gather of a quantized embedding table; None for anything else.
pub(super) fn try_quantized(op: &Op, args: &[&Storage], out: &[usize]) -> Option<Storage> {
    match op {
        Op::QuantMatMul { format } => {
            let (x, w) = (args[0].f32()?, args[1].bytes()?);
            let k = *args[0].shape().last()?;
            let n = args[1].shape()[0];
            quant::quant_matmul(x, k, w, n, *format).map(|v| Storage::f32_values(v, out.to_vec()))
        }
        Op::Dequantize { format } => {
            let w = args[0].bytes()?;
            let mut values = vec![0.0f32; out.iter().product()];
            format.dequantize(w, &mut values).ok()?;
            Some(Storage::f32_values(values, out.to_vec()))
        }
        Op::Gather { axis: 0 } => {
            let rows = gather_rows((args[0].bytes()?, args[0].shape()), args[1])?;
            Some(Storage::Bytes(std::sync::Arc::new(rows), out.to_vec()))
        }
        _ => None,
    }
}

/// Run `op` on f32 storage if a fast kernel exists for it; `out` is the bound output shape.
/// `mode` says how fused elementwise bodies (and broadcast binary ops) run.
pub(super) fn try_f32(
    op: &Op,
    args: &[&Storage],
    out_dtype: DType,
    out: &[usize],
    mode: Elementwise,
) -> Option<Vec<f32>> {
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
            if mode != Elementwise::Interpreted {
                // A one-node body: the JIT's broadcast-aware vector loop, compiled once per op.
                let body =
                    ElementwiseExpr { nodes: vec![ExprNode::Arg(0), ExprNode::Arg(1), ExprNode::Binary(*b, 0, 1)] };
                if let Ok(v) = super::jit::run(&body, &[x, y], out, mode) {
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
        Op::FusedElementwise { body } => fused(body, args, out, mode),
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
        Op::CachedAttention { scale } => cached_attention(args, scale.0 as f32, out),
        Op::Gather { axis: 0 } => gather_rows(f(0)?, args[1]),
        Op::CrossEntropy => cross_entropy(f(0)?, args[1]),
        Op::RandomUniform { seed } => random_uniform(*seed, args.first().copied(), out),
        Op::Reshape { .. } => f(0).map(|(x, _)| x.to_vec()),
        Op::BroadcastTo { .. } => {
            let x = f(0)?;
            Some(rows(out, &[x], |r, i| r[0].at(i)))
        }
        Op::Permute { perm } => Some(permute(f(0)?, perm, out)),
        Op::Conv2d { .. }
        | Op::Conv2dEpilogue { .. }
        | Op::MaxPool2d { .. }
        | Op::AvgPool2d { .. }
        | Op::Unfold { .. }
        | Op::Fold { .. } => {
            let operands: Option<Vec<(&[f32], &[usize])>> = (0..args.len()).map(f).collect();
            window::window(op, &operands?, out)
        }
        // No f32 kernel for these forms (sources are bound, not run; comparisons give bool;
        // other casts, axes and gathers): the executor runs the reference and reports it.
        Op::Input { .. }
        | Op::Param { .. }
        | Op::Constant { .. }
        | Op::Iota { .. }
        | Op::Binary(_)
        | Op::Cast { .. }
        | Op::Softmax { .. }
        | Op::Reduce { .. }
        | Op::Gather { .. } => None,
        // Written in place by the executor (`Backend::update_slice`), not here.
        Op::UpdateSlice { .. } => None,
        // Over u8 blocks: `try_quantized`.
        Op::Dequantize { .. } | Op::QuantMatMul { .. } => None,
    }
}

/// Elements per parallel task: big enough to amortise scheduling, small enough to balance.
const BLOCK: usize = 1 << 15;

/// `f` over a slice, in parallel blocks, vectorised.
fn map(x: &[f32], f: impl Fn(f32) -> f32 + Copy + Sync) -> Vec<f32> {
    filled(x.len(), BLOCK, |start, o| simd::map(&x[start..start + o.len()], o, f))
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
