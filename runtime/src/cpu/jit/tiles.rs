//! Fused elementwise bodies evaluated a tile at a time by loops compiled ahead of time for
//! AVX2+FMA and AVX-512 (chosen at run time), beside the Cranelift kernels.
//!
//! Cranelift's x64 backend emits 128-bit vectors only, so a body heavy in transcendental
//! functions (each `tanh` or `exp` is some forty vector instructions) runs at half the width
//! the CPU has. Here every body node is one loop over a tile of `TILE` values that stays in
//! L1, the op chosen outside the loop, so each loop is vectorised 8 or 16 lanes wide by the
//! Rust compiler. The ops are the same scalar functions the row interpreter and the JIT
//! evaluate, step for step, so all three give the same bits; `prefers_tiles` says which
//! bodies this path runs.

use super::super::kernels::{binary, unary};
use crate::cpu::simd;
use rustral_ir::{BinaryOp, DType, ElementwiseExpr, ExprNode, UnaryOp};
use std::mem::MaybeUninit;

/// Values per tile: `TILE` f32s per body node stay in L1 for the bodies `MAX_NODES` allows.
pub(super) const TILE: usize = 256;

/// The longest body run a tile at a time (its scratch is `MAX_NODES` tiles, 64 KiB).
const MAX_NODES: usize = 64;

/// Whether `body` runs faster here than as a Cranelift kernel on this CPU: when the CPU has
/// vectors wider than Cranelift's (AVX2 or AVX-512) and the body evaluates a transcendental
/// function, whose instruction count the doubled width halves. A body of plain arithmetic is
/// bound by memory either way, and the JIT's loop keeps every value in registers.
pub(super) fn prefers_tiles(body: &ElementwiseExpr) -> bool {
    (simd::has_avx2() || simd::has_avx512())
        && fits(body)
        && body
            .nodes
            .iter()
            .any(|n| matches!(n, ExprNode::Unary(UnaryOp::Exp | UnaryOp::Tanh | UnaryOp::Sigmoid | UnaryOp::Erf, _)))
}

/// Whether `body` is short enough to run a tile at a time (and not empty).
pub(super) fn fits(body: &ElementwiseExpr) -> bool {
    !body.nodes.is_empty() && body.nodes.len() <= MAX_NODES
}

/// One operand of a run: `data` holds the run's values from its first, or one value for the
/// whole run when `scalar`.
#[derive(Clone, Copy)]
pub(super) struct Operand<'a> {
    pub data: &'a [f32],
    pub scalar: bool,
}

/// Per-thread scratch: one tile per body node.
pub(super) fn scratch(body: &ElementwiseExpr) -> Vec<[f32; TILE]> {
    vec![[0.0; TILE]; body.nodes.len()]
}

/// Evaluate `body` over `dst.len()` values, writing every one (`dst` may start
/// uninitialised); false (with `dst` partly written) when an operand is shorter than the run
/// or `temps` has fewer tiles than the body has nodes.
pub(super) fn run(
    body: &ElementwiseExpr,
    operands: &[Operand<'_>],
    dst: &mut [MaybeUninit<f32>],
    temps: &mut [[f32; TILE]],
) -> bool {
    let n = dst.len();
    let fits = operands.iter().all(|o| if o.scalar { !o.data.is_empty() } else { o.data.len() >= n });
    let args_fit = body.nodes.iter().all(|node| !matches!(*node, ExprNode::Arg(i) if i >= operands.len()));
    if !fits || !args_fit || temps.len() < body.nodes.len() || body.nodes.is_empty() {
        return false;
    }
    eval(body, operands, dst, temps);
    true
}

simd::multiversion! {
    /// The tile loop of `run`, whose checks it relies on. The last node writes straight into
    /// `dst`, the others into their tiles.
    fn eval(expr: &ElementwiseExpr, operands: &[Operand<'_>], dst: &mut [MaybeUninit<f32>], temps: &mut [[f32; TILE]]) {
        // Constants and scalar operands are the same in every tile: filled once.
        for (t, node) in temps.iter_mut().zip(&expr.nodes) {
            match *node {
                ExprNode::Const { value, .. } => t.fill(value.0 as f32),
                ExprNode::Arg(i) if operands[i].scalar => t.fill(operands[i].data[0]),
                _ => {}
            }
        }
        let last = expr.nodes.len() - 1;
        let mut start = 0;
        while start < dst.len() {
            let n = TILE.min(dst.len() - start);
            for (k, node) in expr.nodes.iter().enumerate() {
                let (done, rest) = temps.split_at_mut(k);
                // A node's input: a non-scalar operand straight from its slice, else its tile.
                let src = |j: usize| -> &[f32] {
                    match expr.nodes[j] {
                        ExprNode::Arg(i) if !operands[i].scalar => &operands[i].data[start..start + n],
                        _ => &done[j][..n],
                    }
                };
                let t: &mut [MaybeUninit<f32>] = if k == last {
                    &mut dst[start..start + n]
                } else {
                    // SAFETY: the same memory seen as possibly uninitialised; only initialised
                    // values are written through it.
                    unsafe { &mut *(&mut rest[0][..n] as *mut [f32] as *mut [MaybeUninit<f32>]) }
                };
                match *node {
                    // A body that is one operand or constant: its values (filled above, or
                    // the operand's) copied out.
                    ExprNode::Arg(i) if k == last && !operands[i].scalar => {
                        t.write_copy_of_slice(&operands[i].data[start..start + n]);
                    }
                    ExprNode::Arg(_) | ExprNode::Const { .. } if k == last => {
                        t.write_copy_of_slice(&rest[0][..n]);
                    }
                    ExprNode::Arg(_) | ExprNode::Const { .. } => {}
                    ExprNode::Unary(u, x) => unary_tile(u, src(x), t),
                    ExprNode::Binary(op, x, y) => binary_tile(op, src(x), src(y), t),
                    ExprNode::Where(c, x, y) => {
                        let (c, x, y) = (src(c), src(x), src(y));
                        for (j, v) in t.iter_mut().enumerate() {
                            v.write(if c[j] != 0.0 { x[j] } else { y[j] });
                        }
                    }
                    ExprNode::Cast(DType::Bool, x) => {
                        for (v, &a) in t.iter_mut().zip(src(x)) {
                            v.write(if a != 0.0 { 1.0 } else { 0.0 });
                        }
                    }
                    ExprNode::Cast(_, x) => {
                        t.write_copy_of_slice(src(x));
                    }
                }
            }
            start += n;
        }
    }
}

/// `dst[j] = u(x[j])`, one loop per op so that each vectorises (the scalar kernels inline).
#[inline(always)]
fn unary_tile(u: UnaryOp, x: &[f32], dst: &mut [MaybeUninit<f32>]) {
    macro_rules! each {
        ($op:expr) => {
            for (v, &a) in dst.iter_mut().zip(x) {
                v.write(unary($op, a));
            }
        };
    }
    match u {
        UnaryOp::Neg => each!(UnaryOp::Neg),
        UnaryOp::Abs => each!(UnaryOp::Abs),
        UnaryOp::Exp => each!(UnaryOp::Exp),
        UnaryOp::Sqrt => each!(UnaryOp::Sqrt),
        UnaryOp::Tanh => each!(UnaryOp::Tanh),
        UnaryOp::Sigmoid => each!(UnaryOp::Sigmoid),
        UnaryOp::Relu => each!(UnaryOp::Relu),
        UnaryOp::Erf => each!(UnaryOp::Erf),
        other => each!(other),
    }
}

/// `dst[j] = op(x[j], y[j])`, one loop per op.
#[inline(always)]
fn binary_tile(op: BinaryOp, x: &[f32], y: &[f32], dst: &mut [MaybeUninit<f32>]) {
    macro_rules! each {
        ($op:expr) => {
            for (v, (&a, &b)) in dst.iter_mut().zip(x.iter().zip(y)) {
                v.write(binary($op, a, b));
            }
        };
    }
    match op {
        BinaryOp::Add => each!(BinaryOp::Add),
        BinaryOp::Sub => each!(BinaryOp::Sub),
        BinaryOp::Mul => each!(BinaryOp::Mul),
        BinaryOp::Div => each!(BinaryOp::Div),
        BinaryOp::Max => each!(BinaryOp::Max),
        BinaryOp::Min => each!(BinaryOp::Min),
        other => each!(other),
    }
}
