//! One function per op family, in plain ndarray code over f64. `out_shape` is the node's
//! declared shape with symbols bound; results are rounded to the node's dtype by the caller's
//! `HostTensor::from_array`.

use crate::tensor::{HostTensor, round_to};
use ndarray::{Array2, ArrayD, ArrayViewD, Axis, Dimension, IxDyn, Slice, Zip};
use rustral_ir::{Activation, BinaryOp, DType, ElementwiseExpr, ExprNode, GeluApprox, Literal, Op, ReduceOp, UnaryOp};

type R<T> = Result<T, String>;

/// Evaluate one non-source op (inputs and params are fed by the caller).
pub(crate) fn eval_op(op: &Op, args: &[&HostTensor], dtype: DType, out_shape: &[usize]) -> R<HostTensor> {
    let a = |i: usize| &args[i].data;
    let data = match op {
        Op::Input { .. } | Op::Param { .. } => return Err(format!("`{}` is fed, not evaluated", op.name())),
        Op::Constant { value: Literal::Splat(v) } => ArrayD::from_elem(IxDyn(out_shape), v.0),
        Op::Constant { value: Literal::Dense(vs) } => {
            ArrayD::from_shape_vec(IxDyn(out_shape), vs.iter().map(|v| v.0).collect()).map_err(|e| e.to_string())?
        }
        Op::Iota { axis } => ArrayD::from_shape_fn(IxDyn(out_shape), |ix| ix[*axis] as f64),
        Op::RandomUniform { seed } => {
            let key = stream_key(*seed, args.first().map(|t| t.data.iter().next().copied().unwrap_or(0.0)));
            let n: usize = out_shape.iter().product();
            let data = (0..n).map(|i| f64::from(pcg((i as u32) ^ key) >> 8) / f64::from(1u32 << 24)).collect();
            ArrayD::from_shape_vec(IxDyn(out_shape), data).map_err(|e| e.to_string())?
        }
        Op::Unary(u) => a(0).mapv(|x| u.eval(x)),
        Op::Binary(b) => {
            let (x, y) = (bcast(a(0), out_shape)?, bcast(a(1), out_shape)?);
            let operand_dtype = args[0].dtype;
            let mut out = ArrayD::zeros(IxDyn(out_shape));
            let mut err = None;
            Zip::from(&mut out).and(&x).and(&y).for_each(|o, &x, &y| match binary(*b, operand_dtype, x, y) {
                Ok(v) => *o = v,
                Err(e) => err = Some(e),
            });
            if let Some(e) = err {
                return Err(e);
            }
            out
        }
        Op::Where => {
            let (c, x, y) = (bcast(a(0), out_shape)?, bcast(a(1), out_shape)?, bcast(a(2), out_shape)?);
            let mut out = ArrayD::zeros(IxDyn(out_shape));
            Zip::from(&mut out).and(&c).and(&x).and(&y).for_each(|o, &c, &x, &y| *o = if c != 0.0 { x } else { y });
            out
        }
        Op::Cast { to } => a(0).mapv(|x| to.cast(x)),
        Op::Reduce { op: r, axes, keepdim } => reduce(a(0), *r, axes, *keepdim),
        Op::MatMul => matmul(a(0), a(1))?,
        Op::Conv2d { .. } | Op::MaxPool2d { .. } | Op::AvgPool2d { .. } | Op::Unfold { .. } | Op::Fold { .. } => {
            let data: Vec<&ArrayD<f64>> = args.iter().map(|t| &t.data).collect();
            super::window::eval(op, &data, out_shape)?
        }
        Op::Conv2dEpilogue { activation, .. } => {
            let conv = op.conv2d_part().ok_or("an epilogue has a convolution")?;
            let data: Vec<&ArrayD<f64>> = args.iter().map(|t| &t.data).collect();
            let mut out = super::window::eval(&conv, &data, out_shape)?;
            out.mapv_inplace(|x| round_to(dtype, x));
            out.mapv(|x| activate(*activation, x))
        }
        Op::Dequantize { format } => dequantize(a(0), *format, out_shape)?,
        Op::QuantMatMul { format } => {
            let (n, row) = (a(1).shape()[0], a(1).shape()[1]);
            let k = format.row_weights(row).map_err(|e| e.to_string())?;
            let w = dequantize(a(1), *format, &[n, k])?.reversed_axes();
            matmul(&a(0).view().insert_axis(Axis(0)).to_owned(), &w.into_dyn())?
                .index_axis_move(Axis(0), 0)
                .into_shape_with_order(IxDyn(out_shape))
                .map_err(|e| e.to_string())?
        }
        Op::Reshape { .. } => {
            a(0).as_standard_layout().into_owned().into_shape_with_order(IxDyn(out_shape)).map_err(|e| e.to_string())?
        }
        Op::Permute { perm } => a(0).view().permuted_axes(IxDyn(perm)).as_standard_layout().into_owned(),
        Op::BroadcastTo { .. } => bcast(a(0), out_shape)?.to_owned(),
        Op::Slice { axis, start, .. } => {
            let end = start + out_shape[*axis];
            if end > a(0).shape()[*axis] {
                return Err(format!(
                    "slice {start}..{end} is past the end of axis {axis} (size {})",
                    a(0).shape()[*axis]
                ));
            }
            a(0).slice_axis(Axis(*axis), Slice::from(*start..end)).to_owned()
        }
        Op::UpdateSlice { axis } => update_slice(a(0), a(1), scalar_index(args[2])?, *axis)?,
        Op::Concat { axis } => {
            let views: Vec<ArrayViewD<f64>> = args.iter().map(|t| t.data.view()).collect();
            ndarray::concatenate(Axis(*axis), &views).map_err(|e| e.to_string())?
        }
        Op::Gather { axis } => gather(a(0), a(1), *axis, out_shape)?,
        Op::LayerNorm { eps } => {
            layer_norm(a(0), args.get(1).map(|t| &t.data), args.get(2).map(|t| &t.data), eps.0, true)
        }
        Op::RmsNorm { eps } => layer_norm(a(0), args.get(1).map(|t| &t.data), None, eps.0, false),
        Op::Softmax { axis } => softmax(a(0), *axis),
        Op::Gelu { approx } => a(0).mapv(|x| gelu(*approx, x)),
        Op::Silu => a(0).mapv(silu),
        Op::Attention { scale, causal } => attention(args, scale.0, *causal, dtype)?,
        Op::CachedAttention { scale } => cached_attention(args, scale.0, scalar_index(args[3])?, dtype)?,
        Op::MatMulEpilogue { activation } => {
            let mut out = matmul(a(0), a(1))?;
            if let Some(bias) = args.get(2) {
                out = &out + &bcast(&bias.data, out.shape())?;
            }
            out.mapv_inplace(|x| round_to(dtype, x));
            out.mapv(|x| activate(*activation, x))
        }
        Op::CrossEntropy => cross_entropy(a(0), a(1), out_shape)?,
        Op::FusedElementwise { body } => fused(body, args, out_shape)?,
    };
    Ok(HostTensor::from_array(dtype, data))
}

/// The key of a `random_uniform` stream: `pcg(seed + 2654435769 * step)`, the step an integer
/// value taken modulo 2^32.
pub(crate) fn stream_key(seed: u32, step: Option<f64>) -> u32 {
    let step = step.map_or(0, |s| s as i64 as u32);
    pcg(seed.wrapping_add(step.wrapping_mul(2_654_435_769)))
}

/// The 32-bit PCG-RXS-M-XS hash that defines `random_uniform`.
pub(crate) fn pcg(v: u32) -> u32 {
    let s = v.wrapping_mul(747_796_405).wrapping_add(2_891_336_453);
    let w = ((s >> ((s >> 28) + 4)) ^ s).wrapping_mul(277_803_737);
    (w >> 22) ^ w
}

fn bcast<'a>(x: &'a ArrayD<f64>, shape: &[usize]) -> R<ArrayViewD<'a, f64>> {
    x.broadcast(IxDyn(shape)).ok_or_else(|| format!("cannot broadcast {:?} to {shape:?}", x.shape()))
}

/// The binary ops, in f64; `dtype` is the operands' (integer division truncates, and by
/// zero is an error), as the IR defines them (`BinaryOp::eval_typed`).
pub(crate) fn binary(b: BinaryOp, dtype: DType, x: f64, y: f64) -> R<f64> {
    b.eval_typed(dtype, x, y).map_err(String::from)
}

fn reduce(x: &ArrayD<f64>, r: ReduceOp, axes: &[usize], keepdim: bool) -> ArrayD<f64> {
    let mut out = x.clone();
    for &ax in axes.iter().rev() {
        let n = out.shape()[ax] as f64;
        out = match r {
            ReduceOp::Sum => out.sum_axis(Axis(ax)),
            ReduceOp::Mean => out.sum_axis(Axis(ax)) / n,
            ReduceOp::Max => out.fold_axis(Axis(ax), f64::NEG_INFINITY, |&acc, &v| binary_nan(acc, v, f64::max)),
            ReduceOp::Min => out.fold_axis(Axis(ax), f64::INFINITY, |&acc, &v| binary_nan(acc, v, f64::min)),
        };
        if keepdim {
            out = out.insert_axis(Axis(ax));
        }
    }
    out
}

fn binary_nan(a: f64, b: f64, f: fn(f64, f64) -> f64) -> f64 {
    if a.is_nan() || b.is_nan() { f64::NAN } else { f(a, b) }
}

/// Batched matmul with numpy broadcasting of the batch dims; each product is an f64 `dot`.
pub(crate) fn matmul(a: &ArrayD<f64>, b: &ArrayD<f64>) -> R<ArrayD<f64>> {
    let (ra, rb) = (a.ndim(), b.ndim());
    let (m, k, n) = (a.shape()[ra - 2], a.shape()[ra - 1], b.shape()[rb - 1]);
    let batch = broadcast_dims(&a.shape()[..ra - 2], &b.shape()[..rb - 2])?;
    let count: usize = batch.iter().product();
    let expand = |x: &ArrayD<f64>, rows: usize, cols: usize| -> R<ArrayD<f64>> {
        let mut shape = batch.clone();
        shape.extend([rows, cols]);
        let full = bcast(x, &shape)?.as_standard_layout().into_owned();
        full.into_shape_with_order(IxDyn(&[count, rows, cols])).map_err(|e| e.to_string())
    };
    let (a3, b3) = (expand(a, m, k)?, expand(b, k, n)?);
    let mut out = Vec::with_capacity(count * m * n);
    for i in 0..count {
        let am: Array2<f64> = a3.index_axis(Axis(0), i).into_dimensionality().map_err(|e| e.to_string())?.to_owned();
        let bm: Array2<f64> = b3.index_axis(Axis(0), i).into_dimensionality().map_err(|e| e.to_string())?.to_owned();
        out.extend(am.dot(&bm).iter().copied());
    }
    let mut shape = batch;
    shape.extend([m, n]);
    ArrayD::from_shape_vec(IxDyn(&shape), out).map_err(|e| e.to_string())
}

fn broadcast_dims(a: &[usize], b: &[usize]) -> R<Vec<usize>> {
    let rank = a.len().max(b.len());
    (0..rank)
        .map(|i| {
            let get = |s: &[usize]| if i + s.len() >= rank { s[i + s.len() - rank] } else { 1 };
            match (get(a), get(b)) {
                (x, y) if x == y || y == 1 => Ok(x),
                (1, y) => Ok(y),
                (x, y) => Err(format!("batch dims {a:?} and {b:?} do not broadcast ({x} vs {y})")),
            }
        })
        .collect()
}

/// `format`'s blocks (one byte a value) to their f64 weights, shaped `out_shape`.
fn dequantize(w: &ArrayD<f64>, format: rustral_ir::QuantFormat, out_shape: &[usize]) -> R<ArrayD<f64>> {
    let bytes: Vec<u8> = w.iter().map(|&v| v as u8).collect();
    let mut values = vec![0.0f32; out_shape.iter().product()];
    format.dequantize(&bytes, &mut values).map_err(|e| e.to_string())?;
    ArrayD::from_shape_vec(IxDyn(out_shape), values.into_iter().map(f64::from).collect()).map_err(|e| e.to_string())
}

fn gather(table: &ArrayD<f64>, idx: &ArrayD<f64>, axis: usize, out_shape: &[usize]) -> R<ArrayD<f64>> {
    let size = table.shape()[axis];
    let mut flat = Vec::with_capacity(idx.len());
    for &i in idx.iter() {
        if i < 0.0 || i >= size as f64 {
            return Err(format!("index {i} out of range for axis {axis} of size {size}"));
        }
        flat.push(i as usize);
    }
    let picked = table.select(Axis(axis), &flat);
    picked.as_standard_layout().into_owned().into_shape_with_order(IxDyn(out_shape)).map_err(|e| e.to_string())
}

/// LayerNorm (`center`) or RMSNorm over the last axis, in f64.
fn layer_norm(
    x: &ArrayD<f64>,
    gamma: Option<&ArrayD<f64>>,
    beta: Option<&ArrayD<f64>>,
    eps: f64,
    center: bool,
) -> ArrayD<f64> {
    let last = Axis(x.ndim() - 1);
    let mut out = x.clone();
    for mut lane in out.lanes_mut(last) {
        let n = lane.len() as f64;
        let mean = if center { lane.sum() / n } else { 0.0 };
        let var = lane.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / n;
        let inv = 1.0 / (var + eps).sqrt();
        for (j, v) in lane.iter_mut().enumerate() {
            let g = gamma.map_or(1.0, |g| g[[j]]);
            let b = beta.map_or(0.0, |b| b[[j]]);
            *v = (*v - mean) * inv * g + b;
        }
    }
    out
}

pub(crate) fn softmax(x: &ArrayD<f64>, axis: usize) -> ArrayD<f64> {
    let mut out = x.clone();
    for mut lane in out.lanes_mut(Axis(axis)) {
        let max = lane.iter().fold(f64::NEG_INFINITY, |m, &v| binary_nan(m, v, f64::max));
        lane.mapv_inplace(|v| (v - max).exp());
        let sum = lane.sum();
        lane.mapv_inplace(|v| v / sum);
    }
    out
}

/// Each row's `max + log(sum(exp(x - max))) - x[target]`, in f64 (see `Op::CrossEntropy`).
fn cross_entropy(x: &ArrayD<f64>, targets: &ArrayD<f64>, out_shape: &[usize]) -> R<ArrayD<f64>> {
    let last = x.ndim() - 1;
    let classes = x.shape()[last];
    let mut out = Vec::with_capacity(targets.len());
    for (row, &t) in x.lanes(Axis(last)).into_iter().zip(targets.iter()) {
        if !(t >= 0.0 && t < classes as f64) {
            return Err(format!("target {t} out of range for {classes} classes"));
        }
        let max = row.iter().fold(f64::NEG_INFINITY, |m, &v| binary_nan(m, v, f64::max));
        let sum: f64 = row.iter().map(|v| (v - max).exp()).sum();
        out.push(max + sum.ln() - row[t as usize]);
    }
    ArrayD::from_shape_vec(IxDyn(out_shape), out).map_err(|e| e.to_string())
}

fn gelu(approx: GeluApprox, x: f64) -> f64 {
    match approx {
        GeluApprox::Erf => 0.5 * x * (1.0 + libm::erf(x / std::f64::consts::SQRT_2)),
        GeluApprox::Tanh => {
            let c = (2.0 / std::f64::consts::PI).sqrt();
            0.5 * x * (1.0 + (c * (x + 0.044715 * x * x * x)).tanh())
        }
    }
}

fn silu(x: f64) -> f64 {
    x / (1.0 + (-x).exp())
}

fn activate(act: Activation, x: f64) -> f64 {
    match act {
        Activation::None => x,
        Activation::Relu => UnaryOp::Relu.eval(x),
        Activation::GeluErf => gelu(GeluApprox::Erf, x),
        Activation::GeluTanh => gelu(GeluApprox::Tanh, x),
        Activation::Silu => silu(x),
        Activation::Tanh => x.tanh(),
        Activation::Sigmoid => UnaryOp::Sigmoid.eval(x),
    }
}

/// `softmax(q k^T * scale + mask) v`, with intermediate scores rounded to the op's dtype.
fn attention(args: &[&HostTensor], scale: f64, causal: bool, dtype: DType) -> R<ArrayD<f64>> {
    let (q, k, v) = (&args[0].data, &args[1].data, &args[2].data);
    let rk = k.ndim();
    let kt = k.view().permuted_axes(swap_last_two(rk)).to_owned();
    let mut scores = matmul(q, &kt)?.mapv(|s| round_to(dtype, s * scale));
    if let Some(mask) = args.get(3) {
        let shape = scores.shape().to_vec();
        scores = &scores + &bcast(&mask.data, &shape)?;
    }
    if causal {
        let r = scores.ndim();
        let (lq, lk) = (scores.shape()[r - 2], scores.shape()[r - 1]);
        for (ix, s) in scores.indexed_iter_mut() {
            let (i, j) = (ix[r - 2], ix[r - 1]);
            if j + lq > i + lk {
                *s = f64::NEG_INFINITY;
            }
        }
    }
    let r = scores.ndim();
    let probs = softmax(&scores, r - 1).mapv(|p| round_to(dtype, p));
    if !causal {
        return matmul(&probs, v);
    }
    // Causally hidden keys are left out of the sum altogether, so their values (even NaN or
    // infinite ones, as in an unfilled KV cache) never reach the output.
    let (lq, lk) = (probs.shape()[r - 2], probs.shape()[r - 1]);
    let dv = v.shape()[v.ndim() - 1];
    let mut vshape = probs.shape()[..r - 2].to_vec();
    vshape.extend([lk, dv]);
    let vb = bcast(v, &vshape)?;
    let mut out_shape = probs.shape()[..r - 2].to_vec();
    out_shape.extend([lq, dv]);
    Ok(ArrayD::from_shape_fn(IxDyn(&out_shape), |ix| {
        let i = ix[r - 2];
        let visible = (i + lk + 1).saturating_sub(lq).min(lk);
        let mut pix = ix.slice().to_vec();
        let mut vix = ix.slice().to_vec();
        (0..visible)
            .map(|j| {
                pix[r - 1] = j;
                vix[r - 2] = j;
                probs[IxDyn(&pix)] * vb[IxDyn(&vix)]
            })
            .sum()
    }))
}

/// The value of an integer scalar operand (a position), checked to be a valid index.
pub(crate) fn scalar_index(t: &HostTensor) -> R<usize> {
    let v = t.data.iter().next().copied().unwrap_or(0.0);
    if v < 0.0 || v.fract() != 0.0 || v > u32::MAX as f64 {
        return Err(format!("position {v} is not an index"));
    }
    Ok(v as usize)
}

/// `target` with `update` written at `start..start + update.shape[axis]` along `axis`.
fn update_slice(target: &ArrayD<f64>, update: &ArrayD<f64>, start: usize, axis: usize) -> R<ArrayD<f64>> {
    let (n, size) = (update.shape()[axis], target.shape()[axis]);
    if start + n > size {
        return Err(format!("a write of {n} at position {start} is past the end of axis {axis} (size {size})"));
    }
    let mut out = target.clone();
    out.slice_axis_mut(Axis(axis), Slice::from(start..start + n)).assign(update);
    Ok(out)
}

/// Attention of queries at `position..position + lq` over a cache: query head `n` reads
/// key/value head `n / (h / kvh)`, query `i` the keys `0..=position + i` (see
/// `Op::CachedAttention`); scores and probabilities are rounded to `dtype`.
fn cached_attention(args: &[&HostTensor], scale: f64, position: usize, dtype: DType) -> R<ArrayD<f64>> {
    let (q, k, v) = (&args[0].data, &args[1].data, &args[2].data);
    let (b, h, lq, d) = (q.shape()[0], q.shape()[1], q.shape()[2], q.shape()[3]);
    let (kvh, lk, dv) = (k.shape()[1], k.shape()[2], v.shape()[3]);
    if position + lq > lk {
        return Err(format!("{lq} queries at position {position} are past the cache's {lk} rows"));
    }
    let group = h / kvh.max(1);
    let mut out = ArrayD::zeros(IxDyn(&[b, h, lq, dv]));
    for bi in 0..b {
        for n in 0..h {
            let g = n / group.max(1);
            for i in 0..lq {
                let visible = position + i + 1;
                let scores: Vec<f64> = (0..visible)
                    .map(|j| round_to(dtype, (0..d).map(|c| q[[bi, n, i, c]] * k[[bi, g, j, c]]).sum::<f64>() * scale))
                    .collect();
                let m = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                let e: Vec<f64> = scores.iter().map(|s| (s - m).exp()).collect();
                let total: f64 = e.iter().sum();
                for c in 0..dv {
                    out[[bi, n, i, c]] = (0..visible).map(|j| round_to(dtype, e[j] / total) * v[[bi, g, j, c]]).sum();
                }
            }
        }
    }
    Ok(out)
}

fn swap_last_two(rank: usize) -> IxDyn {
    let mut perm: Vec<usize> = (0..rank).collect();
    perm.swap(rank - 1, rank - 2);
    IxDyn(&perm)
}

/// Evaluate a fused body on whole arrays, rounding each body value to its dtype.
fn fused(body: &ElementwiseExpr, args: &[&HostTensor], out_shape: &[usize]) -> R<ArrayD<f64>> {
    let mut vals: Vec<(DType, ArrayD<f64>)> = Vec::with_capacity(body.nodes.len());
    for n in &body.nodes {
        let (dtype, data) = match n {
            ExprNode::Arg(i) => (args[*i].dtype, bcast(&args[*i].data, out_shape)?.to_owned()),
            ExprNode::Const { value, dtype } => (*dtype, ArrayD::from_elem(IxDyn(out_shape), value.0)),
            ExprNode::Unary(u, x) => (vals[*x].0, vals[*x].1.mapv(|v| u.eval(v))),
            ExprNode::Binary(b, x, y) => {
                let d = vals[*x].0;
                let mut out = ArrayD::zeros(IxDyn(out_shape));
                let mut err = None;
                Zip::from(&mut out).and(&vals[*x].1).and(&vals[*y].1).for_each(|o, &p, &q| match binary(*b, d, p, q) {
                    Ok(v) => *o = v,
                    Err(e) => err = Some(e),
                });
                if let Some(e) = err {
                    return Err(e);
                }
                (if b.is_comparison() { DType::Bool } else { d }, out)
            }
            ExprNode::Where(c, x, y) => {
                let mut out = ArrayD::zeros(IxDyn(out_shape));
                Zip::from(&mut out)
                    .and(&vals[*c].1)
                    .and(&vals[*x].1)
                    .and(&vals[*y].1)
                    .for_each(|o, &c, &x, &y| *o = if c != 0.0 { x } else { y });
                (vals[*x].0, out)
            }
            ExprNode::Cast(to, x) => (*to, vals[*x].1.mapv(|v| to.cast(v))),
        };
        vals.push((dtype, data.mapv(|v| round_to(dtype, v))));
    }
    Ok(vals.pop().map(|(_, d)| d).unwrap_or_else(|| ArrayD::zeros(IxDyn(out_shape))))
}
