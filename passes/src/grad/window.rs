//! The VJPs of the sliding-window ops, in IR ops. `unfold` (im2col) and `fold` (col2im) are
//! each other's adjoints, and every other window op's gradient is written with them: a
//! convolution's weight gradient is `dy @ unfold(x)^T` and its input gradient
//! `fold(w^T @ dy)`; a pooling's input gradient folds `dy` spread over each window (evenly
//! for the mean, onto the first largest tap for the max, as PyTorch does).

use super::build::{Builder, R};
use rustral_ir::{BinaryOp, DType, Dim, NodeId, Op, ReduceOp, Shape, TensorType};

fn st(n: usize) -> Dim {
    Dim::Static(n)
}

/// The `unfold` and `fold` of `op`'s window over an input of spatial `size`.
fn pair(op: &Op, kernel: Vec<usize>, size: [usize; 2]) -> (Op, Op) {
    let (stride, padding, dilation) = match op {
        Op::Conv2d { stride, padding, dilation, .. } => (stride.clone(), padding.clone(), dilation.clone()),
        Op::MaxPool2d { stride, padding, .. } | Op::AvgPool2d { stride, padding, .. } => {
            (stride.clone(), padding.clone(), vec![1, 1])
        }
        Op::Unfold { stride, padding, dilation, .. } | Op::Fold { stride, padding, dilation, .. } => {
            (stride.clone(), padding.clone(), dilation.clone())
        }
        _ => (vec![1, 1], vec![0, 0], vec![1, 1]),
    };
    let unfold = Op::Unfold {
        kernel: kernel.clone(),
        stride: stride.clone(),
        padding: padding.clone(),
        dilation: dilation.clone(),
    };
    let fold = Op::Fold { size: size.to_vec(), kernel, stride, padding, dilation };
    (unfold, fold)
}

/// Static `[c, h, w]` of an NCHW type (the type rules require them), with its batch dim.
fn nchw(t: &TensorType) -> (Dim, [usize; 3]) {
    let s = |k: usize| t.shape.0[k].as_static().unwrap_or(0);
    (t.shape.0[0].clone(), [s(1), s(2), s(3)])
}

/// The adjoints of a window op's operands (None where not `wanted`).
pub(crate) fn vjp(b: &mut Builder, op: &Op, xs: &[NodeId], dy: NodeId, wanted: &[bool]) -> R<Vec<Option<NodeId>>> {
    let xt = b.ty(xs[0]);
    let dt = b.ty(dy);
    if let Op::Fold { kernel, .. } = op {
        let (unfold, _) = pair(op, kernel.clone(), [0, 0]);
        return Ok(vec![Some(b.op(unfold, &[dy])?)]);
    }
    let (n, [c, h, w]) = nchw(&xt);
    Ok(match op {
        Op::Conv2d { groups, .. } => {
            let wt = b.ty(xs[1]);
            let ws: Vec<usize> = wt.shape.0.iter().map(|d| d.as_static().unwrap_or(0)).collect();
            let (o, cg, kh, kw) = (ws[0], ws[1], ws[2], ws[3]);
            let g = *groups;
            let (og, depth) = (o / g, cg * kh * kw);
            let l = dt.shape.0[2].as_static().unwrap_or(0) * dt.shape.0[3].as_static().unwrap_or(0);
            let (unfold, fold) = pair(op, vec![kh, kw], [h, w]);
            let dyr = b.reshape(dy, Shape(vec![n.clone(), st(g), st(og), st(l)]))?;
            let dx = if wanted[0] {
                let wr = b.reshape(xs[1], Shape(vec![st(g), st(og), st(depth)]))?;
                let wtr = b.transpose(wr)?;
                let dcols = b.op(Op::MatMul, &[wtr, dyr])?;
                let dcols = b.reshape(dcols, Shape(vec![n.clone(), st(c * kh * kw), st(l)]))?;
                Some(b.op(fold, &[dcols])?)
            } else {
                None
            };
            let dw = if wanted[1] {
                let cols = b.op(unfold, &[xs[0]])?;
                let cols = b.reshape(cols, Shape(vec![n.clone(), st(g), st(depth), st(l)]))?;
                let colst = b.transpose(cols)?;
                let p = b.op(Op::MatMul, &[dyr, colst])?;
                let p = b.sum(p, vec![0], false)?;
                Some(b.reshape(p, wt.shape.clone())?)
            } else {
                None
            };
            let mut out = vec![dx, dw];
            if xs.len() > 2 {
                out.push(if wanted[2] { Some(b.sum(dy, vec![0, 2, 3], false)?) } else { None });
            }
            out
        }
        Op::MaxPool2d { kernel, .. } | Op::AvgPool2d { kernel, .. } => {
            let taps = kernel.iter().product::<usize>();
            let l = dt.shape.0[2].as_static().unwrap_or(0) * dt.shape.0[3].as_static().unwrap_or(0);
            let (unfold, fold) = pair(op, kernel.clone(), [h, w]);
            let windows = Shape(vec![n.clone(), st(c), st(taps), st(l)]);
            let per_window = Shape(vec![n.clone(), st(c), st(1), st(l)]);
            let dyr = b.reshape(dy, per_window.clone())?;
            let spread = if matches!(op, Op::AvgPool2d { .. }) {
                let all = b.broadcast(dyr, &windows)?;
                b.scale(all, 1.0 / taps as f64)?
            } else {
                // The first tap (in row-major window order) inside the input that holds the
                // max, or a NaN (which the max is then), takes the whole adjoint. Tap numbers
                // are i32, exact whatever the dtype of the values.
                let cols = b.op(unfold.clone(), &[xs[0]])?;
                let cols = b.reshape(cols, windows.clone())?;
                let one = b.scalar(1.0, xt.dtype)?;
                let ones = b.broadcast(one, &xt.shape)?;
                let inside = b.op(unfold, &[ones])?;
                let inside = b.reshape(inside, windows.clone())?;
                let y = b.reshape(b.node(), per_window)?;
                let equal = b.mask(BinaryOp::Eq, cols, y, DType::F32)?;
                let nan = b.mask(BinaryOp::Ne, cols, cols, DType::F32)?;
                let held = b.bin(BinaryOp::Add, equal, nan)?;
                let inside = b.op(Op::Cast { to: DType::F32 }, &[inside])?;
                let held = b.mul(held, inside)?;
                let zero = b.scalar(0.0, DType::F32)?;
                let hit = b.bin(BinaryOp::Gt, held, zero)?;
                let tap = b.declare(Op::Iota { axis: 2 }, TensorType::new(DType::I32, windows.clone()))?;
                let past = b.scalar(taps as f64, DType::I32)?;
                let candidates = b.op(Op::Where, &[hit, tap, past])?;
                let first = b.op(Op::Reduce { op: ReduceOp::Min, axes: vec![2], keepdim: true }, &[candidates])?;
                let chosen = b.mask(BinaryOp::Eq, tap, first, xt.dtype)?;
                b.mul(chosen, dyr)?
            };
            let spread = b.reshape(spread, Shape(vec![n, st(c * taps), st(l)]))?;
            vec![Some(b.op(fold, &[spread])?)]
        }
        Op::Unfold { kernel, .. } => {
            let (_, fold) = pair(op, kernel.clone(), [h, w]);
            vec![Some(b.op(fold, &[dy])?)]
        }
        _ => vec![None; xs.len()],
    })
}
