//! The VJP of every primitive op, in IR ops: given the adjoint `dy` of a node's value, the
//! adjoint contribution to each operand that wants one (None where there is none: integer
//! operands, conditions, indices).

use super::GradError;
use super::build::{Builder, R};
use rustral_ir::{BinaryOp, Dim, NodeId, Op, ReduceOp, Shape, TensorType, UnaryOp};

pub(crate) fn vjp(
    b: &mut Builder,
    op: &Op,
    xs: &[NodeId],
    dy: NodeId,
    wanted: &[bool],
) -> Result<Vec<Option<NodeId>>, GradError> {
    match op {
        Op::Slice { axis, start, end } => return slice(b, *axis, *start, end, xs[0], dy),
        Op::Gather { .. }
            if b.ty(xs[0]).shape.static_numel().is_none()
                || b.ty(xs[1]).shape.0.iter().skip(1).any(|d| d.as_static().is_none()) =>
        {
            return Err(b.unsupported(
                "the gradient of a gather needs a static table shape, and static index dims after the first",
            ));
        }
        _ => {}
    }
    let y = b.node();
    let r: R<Option<Vec<Option<NodeId>>>> = (|| {
        Ok(Some(match op {
            Op::Unary(u) => vec![Some(unary(b, *u, xs[0], y, dy)?)],
            Op::Binary(op) => binary(b, *op, xs[0], xs[1], y, dy, wanted)?,
            Op::Where => {
                let zero = b.zeros(&TensorType::new(b.ty(dy).dtype, Shape::scalar()))?;
                let mut out = vec![None];
                for (k, branch) in [(1, true), (2, false)] {
                    if wanted[k] {
                        let (t, f) = if branch { (dy, zero) } else { (zero, dy) };
                        let d = b.op(Op::Where, &[xs[0], t, f])?;
                        out.push(Some(b.unbroadcast(d, &b.ty(xs[k]).shape)?));
                    } else {
                        out.push(None);
                    }
                }
                out
            }
            Op::Cast { .. } => {
                let to = b.ty(xs[0]).dtype;
                vec![to.is_float().then(|| b.op(Op::Cast { to }, &[dy])).transpose()?]
            }
            Op::Reduce { op: r, axes, keepdim } => vec![Some(reduce(b, *r, axes, *keepdim, xs[0], y, dy)?)],
            Op::MatMul => matmul(b, xs[0], xs[1], dy, wanted)?,
            Op::Reshape { .. } => vec![Some(b.reshape(dy, b.ty(xs[0]).shape)?)],
            Op::Permute { perm } => {
                let mut inverse = vec![0; perm.len()];
                for (i, &p) in perm.iter().enumerate() {
                    inverse[p] = i;
                }
                vec![Some(b.op(Op::Permute { perm: inverse }, &[dy])?)]
            }
            Op::BroadcastTo { .. } => vec![Some(b.unbroadcast(dy, &b.ty(xs[0]).shape)?)],
            Op::Concat { axis } => {
                let mut start = 0;
                let mut out = Vec::new();
                for &x in xs {
                    let n = b.ty(x).shape.0[*axis].as_static().unwrap_or(0);
                    let end = Dim::Static(start + n);
                    out.push(Some(b.op(Op::Slice { axis: *axis, start, end }, &[dy])?));
                    start += n;
                }
                out
            }
            Op::Gather { axis } => vec![Some(gather(b, *axis, xs[0], xs[1], dy)?), None],
            Op::Conv2d { .. } | Op::MaxPool2d { .. } | Op::AvgPool2d { .. } | Op::Unfold { .. } | Op::Fold { .. } => {
                super::window::vjp(b, op, xs, dy, wanted)?
            }
            _ => return Ok(None),
        }))
    })();
    match r {
        Ok(Some(v)) => Ok(v),
        Ok(None) => Err(b.unsupported("no gradient rule")),
        Err(e) => Err(b.ir_error(e)),
    }
}

fn unary(b: &mut Builder, u: UnaryOp, x: NodeId, y: NodeId, dy: NodeId) -> R<NodeId> {
    let dtype = b.ty(x).dtype;
    Ok(match u {
        UnaryOp::Neg => b.un(UnaryOp::Neg, dy)?,
        UnaryOp::Abs => {
            let zero = b.scalar(0.0, dtype)?;
            let pos = b.mask(BinaryOp::Gt, x, zero, dtype)?;
            let neg = b.mask(BinaryOp::Lt, x, zero, dtype)?;
            let sign = b.bin(BinaryOp::Sub, pos, neg)?;
            b.mul(dy, sign)?
        }
        UnaryOp::Exp => b.mul(dy, y)?,
        UnaryOp::Log => b.bin(BinaryOp::Div, dy, x)?,
        UnaryOp::Sqrt => {
            let d = b.bin(BinaryOp::Div, dy, y)?;
            b.scale(d, 0.5)?
        }
        UnaryOp::Rsqrt => {
            // d/dx x^-1/2 = -1/2 * y / x
            let t = b.bin(BinaryOp::Div, y, x)?;
            let t = b.scale(t, -0.5)?;
            b.mul(dy, t)?
        }
        UnaryOp::Recip => {
            let yy = b.mul(y, y)?;
            let t = b.mul(dy, yy)?;
            b.un(UnaryOp::Neg, t)?
        }
        UnaryOp::Tanh => {
            let one = b.scalar(1.0, dtype)?;
            let yy = b.mul(y, y)?;
            let t = b.bin(BinaryOp::Sub, one, yy)?;
            b.mul(dy, t)?
        }
        UnaryOp::Sigmoid => {
            let one = b.scalar(1.0, dtype)?;
            let t = b.bin(BinaryOp::Sub, one, y)?;
            let t = b.mul(y, t)?;
            b.mul(dy, t)?
        }
        UnaryOp::Relu => {
            let zero = b.scalar(0.0, dtype)?;
            let m = b.mask(BinaryOp::Gt, x, zero, dtype)?;
            b.mul(dy, m)?
        }
        UnaryOp::Erf => {
            // 2/sqrt(pi) * exp(-x^2)
            let xx = b.mul(x, x)?;
            let n = b.un(UnaryOp::Neg, xx)?;
            let e = b.un(UnaryOp::Exp, n)?;
            let t = b.scale(e, std::f64::consts::FRAC_2_SQRT_PI)?;
            b.mul(dy, t)?
        }
        UnaryOp::Sin => {
            let c = b.un(UnaryOp::Cos, x)?;
            b.mul(dy, c)?
        }
        UnaryOp::Softplus => {
            let s = b.un(UnaryOp::Sigmoid, x)?;
            b.mul(dy, s)?
        }
        UnaryOp::Cos => {
            let s = b.un(UnaryOp::Sin, x)?;
            let t = b.mul(dy, s)?;
            b.un(UnaryOp::Neg, t)?
        }
    })
}

fn binary(
    b: &mut Builder,
    op: BinaryOp,
    x: NodeId,
    z: NodeId,
    y: NodeId,
    dy: NodeId,
    wanted: &[bool],
) -> R<Vec<Option<NodeId>>> {
    if op.is_comparison() {
        return Ok(vec![None, None]);
    }
    let dtype = b.ty(dy).dtype;
    let (da, db) = match op {
        BinaryOp::Add => (Some(dy), Some(dy)),
        BinaryOp::Sub => (Some(dy), wanted[1].then(|| b.un(UnaryOp::Neg, dy)).transpose()?),
        BinaryOp::Mul => (wanted[0].then(|| b.mul(dy, z)).transpose()?, wanted[1].then(|| b.mul(dy, x)).transpose()?),
        BinaryOp::Div => {
            let da = b.bin(BinaryOp::Div, dy, z)?;
            let db = if wanted[1] {
                // -dy * x / z^2 = -(dy / z) * y
                let t = b.mul(da, y)?;
                Some(b.un(UnaryOp::Neg, t)?)
            } else {
                None
            };
            (Some(da), db)
        }
        BinaryOp::Pow => {
            let da = if wanted[0] {
                // z * x^(z - 1)
                let one = b.scalar(1.0, dtype)?;
                let zm1 = b.bin(BinaryOp::Sub, z, one)?;
                let p = b.bin(BinaryOp::Pow, x, zm1)?;
                let t = b.mul(z, p)?;
                Some(b.mul(dy, t)?)
            } else {
                None
            };
            let db = if wanted[1] {
                let l = b.un(UnaryOp::Log, x)?;
                let t = b.mul(y, l)?;
                Some(b.mul(dy, t)?)
            } else {
                None
            };
            (da, db)
        }
        BinaryOp::Max | BinaryOp::Min => {
            // The adjoint goes to the operand that was taken (to the first on a tie).
            let first = if op == BinaryOp::Max { BinaryOp::Ge } else { BinaryOp::Le };
            let m = b.mask(first, x, z, dtype)?;
            let one = b.scalar(1.0, dtype)?;
            let rest = b.bin(BinaryOp::Sub, one, m)?;
            (Some(b.mul(dy, m)?), Some(b.mul(dy, rest)?))
        }
        _ => (None, None),
    };
    let mut out = Vec::with_capacity(2);
    for (k, d) in [(0, da), (1, db)] {
        out.push(match (d, wanted[k]) {
            (Some(d), true) => Some(b.unbroadcast(d, &b.ty([x, z][k]).shape)?),
            _ => None,
        });
    }
    Ok(out)
}

fn reduce(b: &mut Builder, r: ReduceOp, axes: &[usize], keepdim: bool, x: NodeId, y: NodeId, dy: NodeId) -> R<NodeId> {
    let xt = b.ty(x);
    let mut kept = xt.shape.clone();
    for &a in axes {
        kept.0[a] = Dim::Static(1);
    }
    let dyk = b.reshape(dy, kept.clone())?;
    let dyb = b.broadcast(dyk, &xt.shape)?;
    Ok(match r {
        ReduceOp::Sum => dyb,
        ReduceOp::Mean => {
            let n: Option<usize> = axes.iter().map(|&a| xt.shape.0[a].as_static()).product();
            match n {
                Some(n) => b.scale(dyb, 1.0 / n as f64)?,
                None => {
                    // A symbolic count: divide by the sum of ones over the axes.
                    let one = b.scalar(1.0, xt.dtype)?;
                    let ones = b.broadcast(one, &xt.shape)?;
                    let count = b.sum(ones, axes.to_vec(), true)?;
                    b.bin(BinaryOp::Div, dyb, count)?
                }
            }
        }
        ReduceOp::Max | ReduceOp::Min => {
            // Split evenly among the elements equal to the extreme.
            let yk = if keepdim { y } else { b.reshape(y, kept)? };
            let m = b.mask(BinaryOp::Eq, x, yk, xt.dtype)?;
            let count = b.sum(m, axes.to_vec(), true)?;
            let share = b.bin(BinaryOp::Div, m, count)?;
            b.mul(dyb, share)?
        }
    })
}

fn matmul(b: &mut Builder, x: NodeId, z: NodeId, dy: NodeId, wanted: &[bool]) -> R<Vec<Option<NodeId>>> {
    let da = if wanted[0] {
        let zt = b.transpose(z)?;
        let d = b.op(Op::MatMul, &[dy, zt])?;
        Some(b.unbroadcast(d, &b.ty(x).shape)?)
    } else {
        None
    };
    let db = if wanted[1] {
        let (xt_, zt_) = (b.ty(x), b.ty(z));
        let rows: Option<usize> = xt_.shape.0[..xt_.rank() - 1].iter().map(|d| d.as_static()).product();
        match rows {
            // A weight shared by every row of a batched input: one [k, rows] @ [rows, n]
            // product instead of a batch of them summed afterwards.
            Some(rows) if zt_.rank() == 2 && xt_.rank() > 2 => {
                let k = xt_.shape.0[xt_.rank() - 1].clone();
                let n = zt_.shape.0[1].clone();
                let x2 = b.reshape(x, Shape(vec![Dim::Static(rows), k]))?;
                let d2 = b.reshape(dy, Shape(vec![Dim::Static(rows), n]))?;
                let x2t = b.transpose(x2)?;
                Some(b.op(Op::MatMul, &[x2t, d2])?)
            }
            _ => {
                let xt = b.transpose(x)?;
                let d = b.op(Op::MatMul, &[xt, dy])?;
                Some(b.unbroadcast(d, &b.ty(z).shape)?)
            }
        }
    } else {
        None
    };
    Ok(vec![da, db])
}

/// The table's adjoint: one-hot(indices)^T @ dy, with the gathered axis moved to the front.
fn gather(b: &mut Builder, axis: usize, table: NodeId, idx: NodeId, dy: NodeId) -> R<NodeId> {
    let tt = b.ty(table);
    let it = b.ty(idx);
    let (tr, ir) = (tt.rank(), it.rank());
    // dy: table[..axis] ++ idx ++ table[axis+1..] -> idx ++ table[..axis] ++ table[axis+1..]
    let mut perm: Vec<usize> = (axis..axis + ir).collect();
    perm.extend(0..axis);
    perm.extend(axis + ir..tr - 1 + ir);
    let moved = if perm.iter().enumerate().all(|(i, &p)| i == p) { dy } else { b.op(Op::Permute { perm }, &[dy])? };
    let rest: Vec<Dim> = tt.shape.0[..axis].iter().chain(&tt.shape.0[axis + 1..]).cloned().collect();
    // The table's shape and the index dims after the first are static: checked by the caller.
    let n_rest: usize = rest.iter().map(|d| d.as_static().unwrap_or(0)).product();
    let size = tt.shape.0[axis].clone();
    let d = if let Some(n) = it.shape.static_numel() {
        // One-hot rows of every index, times the adjoint's rows: [size, n] @ [n, rest].
        let n_idx = Dim::Static(n);
        let flat = b.reshape(moved, Shape(vec![n_idx.clone(), Dim::Static(n_rest)]))?;
        let ids = b.reshape(idx, Shape(vec![n_idx.clone(), Dim::Static(1)]))?;
        let cols = b.declare(Op::Iota { axis: 1 }, TensorType::new(it.dtype, Shape(vec![n_idx, size.clone()])))?;
        let onehot = b.mask(BinaryOp::Eq, ids, cols, tt.dtype)?;
        let oht = b.transpose(onehot)?;
        b.op(Op::MatMul, &[oht, flat])?
    } else {
        // A symbolic first index dim (a batch): the same per batch row, [batch, size, m] @
        // [batch, m, rest], summed over the batch.
        let lead = it.shape.0[0].clone();
        let m = Dim::Static(it.shape.0[1..].iter().map(|d| d.as_static().unwrap_or(0)).product());
        let flat = b.reshape(moved, Shape(vec![lead.clone(), m.clone(), Dim::Static(n_rest)]))?;
        let ids = b.reshape(idx, Shape(vec![lead.clone(), m.clone(), Dim::Static(1)]))?;
        let cols = b.declare(Op::Iota { axis: 2 }, TensorType::new(it.dtype, Shape(vec![lead, m, size.clone()])))?;
        let onehot = b.mask(BinaryOp::Eq, ids, cols, tt.dtype)?;
        let oht = b.transpose(onehot)?;
        let per_row = b.op(Op::MatMul, &[oht, flat])?;
        b.op(Op::Reduce { op: ReduceOp::Sum, axes: vec![0], keepdim: false }, &[per_row])?
    };
    // [size, rest] -> table[..axis] ++ [size] ++ table[axis+1..]
    let mut shape = vec![size];
    shape.extend(rest);
    let d = b.reshape(d, Shape(shape))?;
    if axis == 0 {
        return Ok(d);
    }
    let mut perm: Vec<usize> = (1..=axis).collect();
    perm.push(0);
    perm.extend(axis + 1..tr);
    b.op(Op::Permute { perm }, &[d])
}

/// The operand's adjoint: `dy` between zeros along the sliced axis.
fn slice(
    b: &mut Builder,
    axis: usize,
    start: usize,
    end: &Dim,
    x: NodeId,
    dy: NodeId,
) -> Result<Vec<Option<NodeId>>, GradError> {
    let xt = b.ty(x);
    let dt = b.ty(dy);
    let full = xt.shape.0[axis].clone();
    let after = match (&full, end) {
        (Dim::Static(n), Dim::Static(e)) => n - e,
        (a, e) if a == e => 0,
        _ => return Err(b.unsupported("the gradient of a slice with a symbolic end short of its axis")),
    };
    let mut parts = Vec::new();
    let r: R<NodeId> = (|| {
        if start > 0 {
            parts.push(b.zeros(&TensorType::new(dt.dtype, Builder::with_dim(&dt.shape, axis, Dim::Static(start))))?);
        }
        parts.push(dy);
        if after > 0 {
            parts.push(b.zeros(&TensorType::new(dt.dtype, Builder::with_dim(&dt.shape, axis, Dim::Static(after))))?);
        }
        if parts.len() == 1 { Ok(dy) } else { b.op(Op::Concat { axis }, &parts) }
    })();
    r.map(|d| vec![Some(d)]).map_err(|e| b.ir_error(e))
}
