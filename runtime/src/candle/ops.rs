//! Each IR op as candle calls. Candle's own fused kernels are used where it has them
//! (`candle_nn::ops::{layer_norm, rms_norm, softmax_last_dim}` and its GELU/SiLU unary
//! kernels); other fused ops are decomposed into candle primitives; what candle cannot express
//! with the IR's meaning (integer division, which candle does not check for zero; powers of
//! other bases than squares and cubes) returns `None` and runs on the host reference.

use candle_core::{D, DType as CDType, Device, Tensor};
use rustral_ir::{Activation, BinaryOp, DType, ElementwiseExpr, ExprNode, GeluApprox, Op, ReduceOp, UnaryOp};

/// How an op ran: a candle kernel of the same meaning, several candle calls, or the host.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Lowering {
    /// One candle kernel (a primitive, or candle's fused LayerNorm/RMSNorm/softmax/GELU/SiLU).
    Native,
    /// A decomposition into candle primitives (attention, matmul epilogues, fused bodies, ...).
    Decomposed,
    /// The reference implementation on the host, then uploaded.
    Host,
}

/// What `op` lowers to, before running it (for reports; `run` may still fall back to the host).
pub fn lowering(op: &Op, operands: usize) -> Lowering {
    match op {
        Op::LayerNorm { .. } if operands == 3 => Lowering::Native,
        Op::RmsNorm { .. } if operands == 2 => Lowering::Native,
        Op::LayerNorm { .. } | Op::RmsNorm { .. } => Lowering::Decomposed,
        Op::Softmax { .. } | Op::Gelu { .. } | Op::Silu => Lowering::Native,
        Op::Attention { .. }
        | Op::CachedAttention { .. }
        | Op::MatMulEpilogue { .. }
        | Op::FusedElementwise { .. }
        | Op::CrossEntropy => Lowering::Decomposed,
        // candle's conv2d and poolings where the window is the same along both axes (padding
        // for the poolings added by concatenation); the im2col pair runs on the host.
        Op::Conv2d { stride, padding, dilation, .. } if square(&[stride, padding, dilation]) => Lowering::Native,
        Op::Conv2dEpilogue { stride, padding, dilation, .. } if square(&[stride, padding, dilation]) => {
            Lowering::Decomposed
        }
        Op::MaxPool2d { kernel, stride, .. } | Op::AvgPool2d { kernel, stride, .. } if square(&[kernel, stride]) => {
            Lowering::Native
        }
        Op::Conv2d { .. }
        | Op::Conv2dEpilogue { .. }
        | Op::MaxPool2d { .. }
        | Op::AvgPool2d { .. }
        | Op::Unfold { .. }
        | Op::Fold { .. } => Lowering::Host,
        // `Tensor::slice_set`: in place where the executor owns the target.
        Op::UpdateSlice { .. } => Lowering::Native,
        // candle-core's quantized tensors (`QMatMul`, `QTensor::dequantize`).
        Op::Dequantize { .. } | Op::QuantMatMul { .. } => Lowering::Native,
        // Made (or bound) on the host and uploaded.
        Op::Input { .. } | Op::Param { .. } | Op::Constant { .. } | Op::Iota { .. } | Op::RandomUniform { .. } => {
            Lowering::Host
        }
        Op::Unary(_)
        | Op::Binary(_)
        | Op::Where
        | Op::Cast { .. }
        | Op::Reduce { .. }
        | Op::MatMul
        | Op::Reshape { .. }
        | Op::Permute { .. }
        | Op::BroadcastTo { .. }
        | Op::Slice { .. }
        | Op::Concat { .. }
        | Op::Gather { .. } => Lowering::Native,
    }
}

/// The candle dtype holding an IR dtype (bools as u8).
pub fn candle_dtype(d: DType) -> CDType {
    match d {
        DType::F16 => CDType::F16,
        DType::BF16 => CDType::BF16,
        DType::F32 => CDType::F32,
        DType::F64 => CDType::F64,
        DType::I32 => CDType::I32,
        DType::I64 => CDType::I64,
        DType::Bool | DType::U8 => CDType::U8,
    }
}

/// The IR dtype a candle dtype holds (u8 holds bools), if any.
pub fn ir_dtype(d: CDType) -> Option<DType> {
    Some(match d {
        CDType::F16 => DType::F16,
        CDType::BF16 => DType::BF16,
        CDType::F32 => DType::F32,
        CDType::F64 => DType::F64,
        CDType::I32 => DType::I32,
        CDType::I64 => DType::I64,
        CDType::U8 => DType::Bool,
        _ => return None,
    })
}

type R<T> = candle_core::Result<T>;

/// Run `op` on `args` into a tensor of `out` (the bound output shape) and `dtype`, or None
/// when it must run on the host.
pub fn run(op: &Op, args: &[&Tensor], dtype: DType, out: &[usize], dev: &Device) -> R<Option<Tensor>> {
    let float = dtype.is_float();
    let t = match op {
        Op::Unary(u) => unary(*u, args[0])?,
        Op::Binary(BinaryOp::Div) if !float && !args[0].dtype().is_float() => return Ok(None),
        Op::Binary(BinaryOp::Pow) if !float => return Ok(None),
        Op::Binary(BinaryOp::Pow) => match small_power(args[1])? {
            Some(2) => args[0].sqr()?.broadcast_as(out)?,
            Some(3) => args[0].sqr()?.mul(args[0])?.broadcast_as(out)?,
            _ => return Ok(None),
        },
        Op::Binary(b) => binary(*b, args[0], args[1])?,
        Op::Where => select(args[0], args[1], args[2], out)?,
        // Widening casts into f32/f64 only: float-to-int and narrowing float casts round NaN
        // and halfway cases differently from the IR's definition, so they run on the host.
        Op::Cast { to: to @ (DType::F32 | DType::F64) } if widening(args[0].dtype(), *to) => {
            args[0].to_dtype(candle_dtype(*to))?
        }
        Op::Cast { .. } => return Ok(None),
        Op::Reduce { op: r, axes, .. } => reduce(*r, args[0], axes)?.reshape(out)?,
        Op::MatMul => args[0].contiguous()?.broadcast_matmul(&args[1].contiguous()?)?,
        Op::Reshape { .. } => args[0].reshape(out)?,
        Op::Permute { perm } => args[0].permute(perm.as_slice())?,
        Op::BroadcastTo { .. } => args[0].broadcast_as(out)?,
        Op::Slice { axis, start, .. } => args[0].narrow(*axis, *start, out[*axis])?,
        Op::Concat { axis } => Tensor::cat(args, *axis)?,
        Op::Gather { axis } => {
            let ids = args[1].flatten_all()?.to_dtype(CDType::I64)?;
            args[0].contiguous()?.index_select(&ids, *axis)?.reshape(out)?
        }
        Op::LayerNorm { eps } if args.len() == 3 && float => {
            candle_nn::ops::layer_norm(&args[0].contiguous()?, args[1], args[2], eps.0 as f32)?
        }
        Op::LayerNorm { eps } => norm(args, eps.0, true)?,
        Op::RmsNorm { eps } if args.len() == 2 && float => {
            candle_nn::ops::rms_norm(&args[0].contiguous()?, args[1], eps.0 as f32)?
        }
        Op::RmsNorm { eps } => norm(args, eps.0, false)?,
        Op::Softmax { axis } if *axis + 1 == out.len() => candle_nn::ops::softmax_last_dim(&dense(args[0])?)?,
        Op::Softmax { axis } => candle_nn::ops::softmax(&dense(args[0])?, *axis)?,
        Op::Gelu { approx: GeluApprox::Erf } => args[0].gelu_erf()?,
        Op::Gelu { approx: GeluApprox::Tanh } => args[0].gelu()?,
        Op::Silu => args[0].silu()?,
        Op::Attention { scale, causal } => match attention(args, scale.0, *causal, dev)? {
            Some(t) => t,
            None => return Ok(None),
        },
        Op::CachedAttention { scale } => match cached_attention(args, scale.0, dev)? {
            Some(t) => t,
            None => return Ok(None),
        },
        // The executor writes it (`Backend::update_slice`).
        Op::UpdateSlice { .. } => return Ok(None),
        Op::Conv2d { .. }
        | Op::Conv2dEpilogue { .. }
        | Op::MaxPool2d { .. }
        | Op::AvgPool2d { .. }
        | Op::Unfold { .. }
        | Op::Fold { .. } => {
            if !float || lowering(op, args.len()) == Lowering::Host {
                return Ok(None);
            }
            window(op, args, dev)?
        }
        Op::Dequantize { format } => quantized(*format, args[0], dev)?.dequantize(dev)?.reshape(out)?,
        Op::QuantMatMul { format } => {
            candle_core::Module::forward(&qmatmul(*format, args[1], dev)?, &args[0].contiguous()?)?
        }
        Op::MatMulEpilogue { activation } => {
            let y = args[0].contiguous()?.broadcast_matmul(&args[1].contiguous()?)?;
            let y = match args.get(2) {
                Some(bias) => y.broadcast_add(bias)?,
                None => y,
            };
            activate(*activation, &y)?
        }
        Op::CrossEntropy => {
            // logsumexp about the row max, minus the logit `gather` picks at the target.
            let (x, last) = (dense(args[0])?, out.len());
            let max = x.max_keepdim(last)?;
            let lse = x.broadcast_sub(&max)?.exp()?.sum_keepdim(last)?.log()?.add(&max)?;
            let picked = x.gather(&args[1].to_dtype(CDType::I64)?.contiguous()?, last)?;
            lse.sub(&picked)?.reshape(out)?
        }
        Op::FusedElementwise { body } => match fused(body, args, out, dev)? {
            Some(t) => t,
            None => return Ok(None),
        },
        // Made on the host and uploaded (inputs and parameters are bound, never run).
        Op::Input { .. } | Op::Param { .. } | Op::Constant { .. } | Op::Iota { .. } | Op::RandomUniform { .. } => {
            return Ok(None);
        }
    };
    let t = if t.dtype() == candle_dtype(dtype) { t } else { t.to_dtype(candle_dtype(dtype))? };
    Ok(Some(t))
}

/// Whether each pair of window attributes has one value for both axes (candle's conv2d and
/// poolings take one).
fn square(lists: &[&Vec<usize>]) -> bool {
    lists.iter().all(|v| v.len() == 2 && v[0] == v[1])
}

/// `conv2d` and the poolings by candle's kernels (only called when [`square`] holds).
fn window(op: &Op, args: &[&Tensor], dev: &Device) -> R<Tensor> {
    let x = args[0].contiguous()?;
    Ok(match op {
        Op::Conv2d { stride, padding, dilation, groups } => {
            let y = x.conv2d(&args[1].contiguous()?, padding[0], stride[0], dilation[0], *groups)?;
            match args.get(2) {
                Some(bias) => y.broadcast_add(&bias.reshape((1, (), 1, 1))?)?,
                None => y,
            }
        }
        Op::Conv2dEpilogue { activation, .. } => {
            let Some(conv) = op.conv2d_part() else { candle_core::bail!("an epilogue without a convolution") };
            activate(*activation, &window(&conv, args, dev)?)?
        }
        Op::MaxPool2d { kernel, stride, padding } => {
            // Padding is never chosen: minus infinity around the input.
            let mut x = x;
            for (axis, p) in [(2, padding[0]), (3, padding[1])] {
                if p > 0 {
                    let mut dims = x.dims().to_vec();
                    dims[axis] = p;
                    let edge = Tensor::full(f32::NEG_INFINITY, dims, dev)?.to_dtype(x.dtype())?;
                    x = Tensor::cat(&[&edge, &x, &edge], axis)?;
                }
            }
            let (k, st) = ((kernel[0], kernel[1]), (stride[0], stride[1]));
            let y = x.max_pool2d_with_stride(k, st)?;
            // candle's max skips NaN; the IR's (PyTorch's) returns it. Windows holding a NaN
            // are found by pooling the NaN mask, and take NaN.
            let nan_mask = x.ne(&x)?.to_dtype(x.dtype())?;
            let has_nan = nan_mask.max_pool2d_with_stride(k, st)?.gt(0.0)?;
            let nan = Tensor::full(f32::NAN, y.dims(), dev)?.to_dtype(y.dtype())?;
            has_nan.where_cond(&nan, &y)?
        }
        Op::AvgPool2d { kernel, stride, padding } => {
            // Zero padding counted in the mean (`count_include_pad`).
            let x = x.pad_with_zeros(2, padding[0], padding[0])?.pad_with_zeros(3, padding[1], padding[1])?;
            x.avg_pool2d_with_stride((kernel[0], kernel[1]), (stride[0], stride[1]))?
        }
        other => candle_core::bail!("{} does not run on candle", other.name()),
    })
}

/// candle's quantized matrix of a `u8` weight of `format`'s blocks (`[n, row_bytes]`).
pub(crate) fn qmatmul(format: rustral_ir::QuantFormat, w: &Tensor, dev: &Device) -> R<candle_core::quantized::QMatMul> {
    candle_core::quantized::QMatMul::from_qtensor(quantized(format, w, dev)?)
}

/// A `u8` tensor of `format`'s blocks (`[rows..., row_bytes]`) as candle's quantized tensor of
/// `[rows, k]` weights, the bytes copied out and back in (a bound weight's `QMatMul` is made
/// once and kept by the backend, see `CandleBackend`).
fn quantized(format: rustral_ir::QuantFormat, w: &Tensor, dev: &Device) -> R<candle_core::quantized::QTensor> {
    use candle_core::quantized::GgmlDType as G;
    use rustral_ir::QuantFormat as Q;
    let ggml = match format {
        Q::Q8_0 => G::Q8_0,
        Q::Q4_0 => G::Q4_0,
        Q::Q4_1 => G::Q4_1,
        Q::Q4K => G::Q4K,
        Q::Q5K => G::Q5K,
        Q::Q6K => G::Q6K,
    };
    let (rows, row_bytes) =
        w.dims().split_last().map(|(last, rest)| (rest.iter().product::<usize>(), *last)).unwrap_or((0, 0));
    let k = format.row_weights(row_bytes).map_err(|e| candle_core::Error::Msg(e.to_string()))?;
    let bytes = w.flatten_all()?.to_vec1::<u8>()?;
    candle_core::quantized::ggml_file::qtensor_from_ggml(ggml, &bytes, vec![rows, k], dev)
}

/// Float tensors only: candle's unary kernels panic (`todo!`) on integers.
fn unary(u: UnaryOp, x: &Tensor) -> R<Tensor> {
    if !x.dtype().is_float() {
        candle_core::bail!("candle has no integer {u:?}");
    }
    match u {
        UnaryOp::Neg => x.neg(),
        UnaryOp::Abs => x.abs(),
        UnaryOp::Exp => x.exp(),
        UnaryOp::Log => x.log(),
        UnaryOp::Sqrt => x.sqrt(),
        UnaryOp::Rsqrt => x.sqrt()?.recip(),
        UnaryOp::Recip => x.recip(),
        UnaryOp::Tanh => x.tanh(),
        UnaryOp::Sigmoid => candle_nn::ops::sigmoid(x),
        UnaryOp::Relu => keep_nan(x, &x.relu()?),
        UnaryOp::Erf => x.erf(),
        UnaryOp::Sin => x.sin(),
        UnaryOp::Cos => x.cos(),
        UnaryOp::Softplus => softplus(x),
    }
}

/// `max(x, 0) + log1p(e^-|x|)`; candle has no `log1p`, so below `u = 1e-4` it is the series
/// `u - u^2/2 + u^3/3` (its error, under u^3/4 relative, is below f32 rounding), above it
/// `log(1 + u)`.
fn softplus(x: &Tensor) -> R<Tensor> {
    let u = x.abs()?.neg()?.exp()?;
    let series = u.sub(&u.sqr()?.affine(0.5, 0.0)?)?.add(&u.powf(3.0)?.affine(1.0 / 3.0, 0.0)?)?;
    let direct = u.affine(1.0, 1.0)?.log()?;
    let log1p = u.lt(1e-4)?.where_cond(&series, &direct)?;
    keep_nan(x, &x.relu()?.add(&log1p)?)
}

fn binary(b: BinaryOp, x: &Tensor, y: &Tensor) -> R<Tensor> {
    match b {
        BinaryOp::Add => x.broadcast_add(y),
        BinaryOp::Sub => x.broadcast_sub(y),
        BinaryOp::Mul => x.broadcast_mul(y),
        BinaryOp::Div => x.broadcast_div(y),
        BinaryOp::Max => nan_if_either(x, y, &x.broadcast_maximum(y)?),
        BinaryOp::Min => nan_if_either(x, y, &x.broadcast_minimum(y)?),
        BinaryOp::Eq => x.broadcast_eq(y),
        BinaryOp::Ne => x.broadcast_ne(y),
        BinaryOp::Lt => x.broadcast_lt(y),
        BinaryOp::Le => x.broadcast_le(y),
        BinaryOp::Gt => x.broadcast_gt(y),
        BinaryOp::Ge => x.broadcast_ge(y),
        BinaryOp::Pow => candle_core::bail!("pow is lowered by its exponent"),
    }
}

/// A cast candle does exactly as the IR defines it: into f32 or f64 from a type with no more
/// precision (bools and integers included).
fn widening(from: CDType, to: DType) -> bool {
    match to {
        DType::F64 => true,
        _ => from != CDType::F64,
    }
}

/// `x` where it is NaN, else `y` (candle's relu and maximum drop NaN; the IR keeps it).
fn keep_nan(x: &Tensor, y: &Tensor) -> R<Tensor> {
    x.ne(x)?.where_cond(x, y)
}

/// NaN where `x` or `y` is NaN, else `r` (broadcast to `r`'s shape).
fn nan_if_either(x: &Tensor, y: &Tensor, r: &Tensor) -> R<Tensor> {
    if !r.dtype().is_float() {
        return Ok(r.clone());
    }
    let nan = x.ne(x)?.broadcast_maximum(&y.ne(y)?)?.broadcast_as(r.shape())?;
    nan.where_cond(&nan_like(r)?, r)
}

fn nan_like(t: &Tensor) -> R<Tensor> {
    Tensor::new(f32::NAN, t.device())?.to_dtype(t.dtype())?.broadcast_as(t.shape())
}

/// 2 or 3 when `exponent` is one value equal to it.
fn small_power(exponent: &Tensor) -> R<Option<u8>> {
    if exponent.elem_count() != 1 {
        return Ok(None);
    }
    let e = exponent.flatten_all()?.to_dtype(CDType::F64)?.to_vec1::<f64>()?[0];
    Ok(if e == 2.0 {
        Some(2)
    } else if e == 3.0 {
        Some(3)
    } else {
        None
    })
}

fn select(cond: &Tensor, a: &Tensor, b: &Tensor, out: &[usize]) -> R<Tensor> {
    let cond = if cond.dtype() == CDType::U8 { cond.clone() } else { cond.ne(0.0)? };
    cond.broadcast_as(out)?.where_cond(&a.broadcast_as(out)?, &b.broadcast_as(out)?)
}

/// `x` with the strides of a fresh row-major tensor. candle's `contiguous` keeps a view
/// whose only odd strides are on size-1 axes (a broadcast `[1, 3]` permuted to `[3, 1]` has
/// strides `[1, 0]`), and its CPU max/min reduction divides by such an axis's zero stride.
fn dense(x: &Tensor) -> R<Tensor> {
    let (dims, strides) = (x.dims(), x.stride());
    let fresh = (0..dims.len()).all(|i| strides[i] == dims[i + 1..].iter().product::<usize>());
    if fresh { Ok(x.clone()) } else { x.force_contiguous() }
}

fn reduce(r: ReduceOp, x: &Tensor, axes: &[usize]) -> R<Tensor> {
    match r {
        ReduceOp::Sum => x.sum_keepdim(axes),
        ReduceOp::Mean => x.mean_keepdim(axes),
        ReduceOp::Max | ReduceOp::Min => {
            let mut y = dense(x)?;
            for &a in axes {
                y = if r == ReduceOp::Max { y.max_keepdim(a)? } else { y.min_keepdim(a)? };
            }
            if !x.dtype().is_float() {
                return Ok(y);
            }
            // The IR's max and min are NaN when any value is; candle's skip NaN.
            let nans = x.ne(x)?.to_dtype(CDType::F32)?.sum_keepdim(axes)?.gt(0.0)?;
            nans.where_cond(&nan_like(&y)?, &y)
        }
    }
}

/// LayerNorm (`center`) or RMSNorm over the last axis from primitives, with the optional
/// scale and shift.
fn norm(args: &[&Tensor], eps: f64, center: bool) -> R<Tensor> {
    let x = args[0];
    let xc = if center { x.broadcast_sub(&x.mean_keepdim(D::Minus1)?)? } else { x.clone() };
    let var = xc.sqr()?.mean_keepdim(D::Minus1)?;
    let mut y = xc.broadcast_div(&(var + eps)?.sqrt()?)?;
    if let Some(g) = args.get(1) {
        y = y.broadcast_mul(g)?;
    }
    if let Some(b) = args.get(2) {
        y = y.broadcast_add(b)?;
    }
    Ok(y)
}

/// `softmax(q k^T * scale + mask) v` with hidden causal keys set to -inf before the softmax and
/// queries that see no key at all given zeros. The IR keeps hidden keys' values out of the sum
/// even when they are NaN or infinite, which a matmul with zero weights does not: with a
/// causal mask and such a value (`0 v` is NaN exactly there), None (the host computes it).
fn attention(args: &[&Tensor], scale: f64, causal: bool, dev: &Device) -> R<Option<Tensor>> {
    let (q, k, v) = (args[0].contiguous()?, args[1].contiguous()?, args[2].contiguous()?);
    // Nothing to attend to (or no query): candle's softmax panics on an empty row, the
    // reference defines the answer.
    if k.dim(D::Minus2)? == 0 || q.elem_count() == 0 {
        return Ok(None);
    }
    let not_finite = |v: &Tensor| -> R<bool> {
        let d = (v * 0.0)?;
        Ok(d.ne(&d)?.to_dtype(CDType::F32)?.sum_all()?.to_scalar::<f32>()? > 0.0)
    };
    if causal && v.dtype().is_float() && not_finite(&v)? {
        return Ok(None);
    }
    let mut scores = (q.broadcast_matmul(&k.transpose(D::Minus2, D::Minus1)?.contiguous()?)? * scale)?;
    if let Some(mask) = args.get(3) {
        scores = scores.broadcast_add(mask)?;
    }
    let mut seen: Option<Tensor> = None;
    if causal {
        let (lq, lk) = (scores.dim(D::Minus2)?, scores.dim(D::Minus1)?);
        let visible: Vec<u8> = (0..lq).flat_map(|i| (0..lk).map(move |j| u8::from(j + lq <= i + lk))).collect();
        let visible = Tensor::from_vec(visible, (lq, lk), dev)?.broadcast_as(scores.shape())?;
        let hidden = Tensor::new(f32::NEG_INFINITY, dev)?.to_dtype(scores.dtype())?.broadcast_as(scores.shape())?;
        scores = visible.where_cond(&scores, &hidden)?;
        if lq > lk {
            let rows: Vec<u8> = (0..lq).map(|i| u8::from(lq <= i + lk)).collect();
            seen = Some(Tensor::from_vec(rows, (lq, 1), dev)?);
        }
    }
    let probs = candle_nn::ops::softmax_last_dim(&scores.contiguous()?)?;
    let probs = match seen {
        Some(rows) => rows.broadcast_as(probs.shape())?.where_cond(&probs, &probs.zeros_like()?)?,
        None => probs,
    };
    Ok(Some(probs.broadcast_matmul(&v)?))
}

/// Cached attention on the filled rows only: the query heads sharing a key/value head are
/// stacked as rows (`[b, kvh, group * lq, d]`), so one batched matmul serves the group, and a
/// mask of `-inf` hides each query's future. None (the host, which reports it) when the
/// position is out of range.
fn cached_attention(args: &[&Tensor], scale: f64, dev: &Device) -> R<Option<Tensor>> {
    let position = args[3].to_dtype(CDType::I64)?.to_scalar::<i64>()?;
    let (b, h, lq, d) = args[0].dims4()?;
    let (_, kvh, lk, _) = args[1].dims4()?;
    let dv = args[2].dim(3)?;
    let Ok(position) = usize::try_from(position) else { return Ok(None) };
    if position + lq > lk || kvh == 0 {
        return Ok(None);
    }
    let (group, filled) = (h / kvh, position + lq);
    let q = args[0].contiguous()?.reshape((b, kvh, group * lq, d))?;
    let k = args[1].narrow(2, 0, filled)?.contiguous()?;
    let v = args[2].narrow(2, 0, filled)?.contiguous()?;
    let scores = (q.matmul(&k.transpose(2, 3)?.contiguous()?)? * scale)?;
    let mask: Vec<f32> = (0..group * lq)
        .flat_map(|r| (0..filled).map(move |j| if j <= position + r % lq { 0.0 } else { f32::NEG_INFINITY }))
        .collect();
    let mask = Tensor::from_vec(mask, (group * lq, filled), dev)?.to_dtype(scores.dtype())?;
    let probs = candle_nn::ops::softmax_last_dim(&scores.broadcast_add(&mask)?.contiguous()?)?;
    Ok(Some(probs.matmul(&v)?.reshape((b, h, lq, dv))?))
}

/// An epilogue's activation; those that are also unary ops are computed by `unary`, so the
/// two keep one meaning (relu keeping NaN, which candle's own relu drops).
fn activate(a: Activation, y: &Tensor) -> R<Tensor> {
    match a {
        Activation::None => Ok(y.clone()),
        Activation::Relu => unary(UnaryOp::Relu, y),
        Activation::GeluErf => y.gelu_erf(),
        Activation::GeluTanh => y.gelu(),
        Activation::Silu => y.silu(),
        Activation::Tanh => unary(UnaryOp::Tanh, y),
        Activation::Sigmoid => unary(UnaryOp::Sigmoid, y),
    }
}

/// A fused body node by node with candle's broadcasting ops (None: a node it cannot express).
fn fused(body: &ElementwiseExpr, args: &[&Tensor], out: &[usize], dev: &Device) -> R<Option<Tensor>> {
    let mut values: Vec<Tensor> = Vec::with_capacity(body.nodes.len());
    for node in &body.nodes {
        let v = match node {
            ExprNode::Arg(i) => args[*i].clone(),
            ExprNode::Const { value, dtype } => Tensor::new(value.0, dev)?.to_dtype(candle_dtype(*dtype))?,
            ExprNode::Unary(u, x) => unary(*u, &values[*x])?,
            ExprNode::Binary(BinaryOp::Pow, x, _) if !values[*x].dtype().is_float() => return Ok(None),
            ExprNode::Binary(BinaryOp::Pow, x, y) => match small_power(&values[*y])? {
                Some(2) => values[*x].sqr()?,
                Some(3) => values[*x].sqr()?.mul(&values[*x])?,
                _ => return Ok(None),
            },
            ExprNode::Binary(BinaryOp::Div, x, _) if !values[*x].dtype().is_float() => return Ok(None),
            ExprNode::Binary(b, x, y) => binary(*b, &values[*x], &values[*y])?,
            ExprNode::Where(c, x, y) => select(&values[*c], &values[*x], &values[*y], out)?,
            ExprNode::Cast(to @ (DType::F32 | DType::F64), x) if widening(values[*x].dtype(), *to) => {
                values[*x].to_dtype(candle_dtype(*to))?
            }
            ExprNode::Cast(..) => return Ok(None),
        };
        values.push(v);
    }
    Ok(Some(values.pop().expect("bodies are not empty").broadcast_as(out)?))
}
