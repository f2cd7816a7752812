//! Type inference: the typing rules, one function per rule. Which rule types which op is
//! part of the op's declaration (`Op::type_rule` in `op.rs`); the graph builder uses
//! [`infer`] to type new nodes and the verifier to check declared types against it.

use crate::dtype::DType;
use crate::float::F64;
use crate::op::{Activation, BinaryOp, ElementwiseExpr, ExprNode, Literal, Op, ReduceOp, UnaryOp};
use crate::quant::QuantFormat;
use crate::shape::{Dim, Shape, TensorType, broadcast_shapes, broadcasts_to, is_identifier};

/// Why an op cannot be typed; the caller adds the node and its provenance.
pub type Reason = String;

/// The result type of `op` applied to operands of types `args`. `declared` is the node's
/// declared type, which source ops (`input`, `param`, `const`, `iota`) take as theirs.
pub fn infer(op: &Op, args: &[&TensorType], declared: &TensorType) -> Result<TensorType, Reason> {
    let (lo, hi) = op.arity();
    if args.len() < lo || args.len() > hi {
        return Err(arity_reason(op, lo, hi, args.len()));
    }
    storage_only(op, args, declared)?;
    let t = op.type_rule(args, declared)?;
    countable(&t)?;
    Ok(t)
}

/// The most bytes one tensor may hold: what an allocation (and an index) can reach.
pub const MAX_TENSOR_BYTES: usize = isize::MAX as usize;

/// A type whose static dims' element count, in bytes, fits in [`MAX_TENSOR_BYTES`]: an
/// overflowing count would otherwise wrap to a small one and index past the data. Symbolic
/// dims are counted when they are bound, by whoever binds them.
fn countable(t: &TensorType) -> Result<(), Reason> {
    let bytes = t.shape.dims().iter().try_fold(t.dtype.size_bytes(), |n, d| match d {
        Dim::Static(s) => n.checked_mul(*s),
        Dim::Sym(_) => Some(n),
    });
    match bytes {
        Some(b) if b <= MAX_TENSOR_BYTES => Ok(()),
        _ => Err(format!("{t} holds more than 2^63 bytes: its element count overflows")),
    }
}

/// `u8` holds packed blocks: only `dequantize` and `quant_matmul` read it, the row-moving
/// layout ops carry it, and only `input` and `param` declare it.
fn storage_only(op: &Op, args: &[&TensorType], declared: &TensorType) -> Result<(), Reason> {
    // Which operands may be u8: the blocks (quant_matmul's own rule checks both of its).
    let may_be_u8 = |i: usize| match op {
        Op::QuantMatMul { .. } => true,
        Op::Dequantize { .. } | Op::Gather { .. } | Op::Slice { .. } | Op::Reshape { .. } => i == 0,
        _ => false,
    };
    let reads_u8 = args.iter().enumerate().any(|(i, a)| a.dtype == DType::U8 && !may_be_u8(i));
    let makes_u8 = declared.dtype == DType::U8
        && op.decl().family == crate::op::KernelFamily::Source
        && !matches!(op, Op::Input { .. } | Op::Param { .. });
    if reads_u8 || makes_u8 {
        return Err(format!(
            "`{}` cannot take u8: u8 holds quantized blocks, read only by dequantize and quant_matmul",
            op.name()
        ));
    }
    Ok(())
}

/// `dequantize`: `u8[..., row_bytes]` of whole blocks to `f32[..., k]`.
pub(crate) fn dequantize(w: &TensorType, format: QuantFormat) -> Result<TensorType, Reason> {
    if w.dtype != DType::U8 {
        return Err(format!("dequantize reads u8 blocks, found {}", w.dtype));
    }
    let Some((last, rest)) = w.shape.0.split_last() else {
        return Err("dequantize needs rows of blocks, found a scalar".into());
    };
    let k = quant_row(last, format)?;
    let mut dims = rest.to_vec();
    dims.push(Dim::Static(k));
    Ok(TensorType { dtype: DType::F32, shape: Shape(dims) })
}

/// `quant_matmul`: f32 `x[..., k]` against `u8 w[n, row_bytes]` holding `k` weights a row.
pub(crate) fn quant_matmul(x: &TensorType, w: &TensorType, format: QuantFormat) -> Result<TensorType, Reason> {
    if x.dtype != DType::F32 || w.dtype != DType::U8 {
        return Err(format!("quant_matmul takes f32 activations and u8 blocks, found {} and {}", x.dtype, w.dtype));
    }
    let ([n, row], Some((xk, rest))) = (&w.shape.0[..], x.shape.0.split_last()) else {
        return Err(format!(
            "quant_matmul needs x of rank >= 1 and w [n, row_bytes], found {} and {}",
            x.shape, w.shape
        ));
    };
    let k = quant_row(row, format)?;
    if *xk != Dim::Static(k) {
        return Err(format!("x's last dim {xk} is not the {k} weights of a {format} row of {row} bytes"));
    }
    let mut dims = rest.to_vec();
    dims.push(n.clone());
    Ok(TensorType { dtype: DType::F32, shape: Shape(dims) })
}

fn quant_row(row: &Dim, format: QuantFormat) -> Result<usize, Reason> {
    let Dim::Static(bytes) = row else {
        return Err(format!("a row of {format} blocks needs a static width, found {row}"));
    };
    format.row_weights(*bytes).map_err(|e| e.to_string())
}

/// `input` and `param`: a non-empty name, the declared type.
pub(crate) fn named_source(name: &str, declared: &TensorType) -> Result<TensorType, Reason> {
    if name.is_empty() {
        return Err("name must not be empty".into());
    }
    check_shape_symbols(&declared.shape)?;
    Ok(declared.clone())
}

/// `iota`: the declared (numeric) type, the axis inside it.
pub(crate) fn iota(axis: usize, declared: &TensorType) -> Result<TensorType, Reason> {
    check_axis(axis, declared.rank())?;
    check_shape_symbols(&declared.shape)?;
    if declared.dtype == DType::Bool {
        return Err("iota cannot produce bool".into());
    }
    Ok(declared.clone())
}

/// `random_uniform`: a float declared type, an optional integer scalar step.
pub(crate) fn random_uniform(step: Option<&TensorType>, declared: &TensorType) -> Result<TensorType, Reason> {
    if let Some(step) = step
        && !(step.dtype.is_int() && step.rank() == 0)
    {
        return Err(format!("the step must be an integer scalar, found {step}"));
    }
    check_shape_symbols(&declared.shape)?;
    float(declared.dtype, "random_uniform")?;
    Ok(declared.clone())
}

/// Unary ops keep their operand's type; most need floats.
pub(crate) fn unary(u: UnaryOp, x: &TensorType) -> Result<TensorType, Reason> {
    check_unary_dtype(u, x.dtype)?;
    Ok(x.clone())
}

/// Binary ops broadcast operands of one dtype; comparisons give bool.
pub(crate) fn binary(b: BinaryOp, x: &TensorType, y: &TensorType) -> Result<TensorType, Reason> {
    same_dtype(x, y)?;
    if b.is_comparison() {
        if x.dtype == DType::Bool && !matches!(b, BinaryOp::Eq | BinaryOp::Ne) {
            return Err(format!("`{}` needs numbers, found bool", b.name()));
        }
    } else {
        numeric(x.dtype, b.name())?;
        if b == BinaryOp::Pow && !x.dtype.is_float() {
            return Err(format!("`pow` needs floats, found {}", x.dtype));
        }
    }
    let shape = broadcast(&x.shape, &y.shape)?;
    let dtype = if b.is_comparison() { DType::Bool } else { x.dtype };
    Ok(TensorType { dtype, shape })
}

/// `where(c, a, b)`: a bool condition, `a` and `b` of one dtype, all three broadcast.
pub(crate) fn select(c: &TensorType, a: &TensorType, b: &TensorType) -> Result<TensorType, Reason> {
    if c.dtype != DType::Bool {
        return Err(format!("condition must be bool, found {}", c.dtype));
    }
    same_dtype(a, b)?;
    let shape = broadcast(&broadcast(&c.shape, &a.shape)?, &b.shape)?;
    Ok(TensorType { dtype: a.dtype, shape })
}

/// `reshape`: the same element count.
pub(crate) fn reshape(x: &TensorType, shape: &Shape) -> Result<TensorType, Reason> {
    check_shape_symbols(shape)?;
    let (from, to) = (x.shape.numel(), shape.numel());
    if from.is_none() || to.is_none() || from != to {
        return Err(format!("cannot reshape {} to {}: element counts differ", x.shape, shape));
    }
    Ok(TensorType { dtype: x.dtype, shape: shape.clone() })
}

/// `permute`: a permutation of the operand's axes.
pub(crate) fn permute(x: &TensorType, perm: &[usize]) -> Result<TensorType, Reason> {
    let mut seen = vec![false; x.rank()];
    if perm.len() != x.rank() || perm.iter().any(|&p| p >= x.rank() || std::mem::replace(&mut seen[p], true)) {
        return Err(format!("{perm:?} is not a permutation of the {} axes of {}", x.rank(), x.shape));
    }
    let shape = Shape(perm.iter().map(|&p| x.shape.0[p].clone()).collect());
    Ok(TensorType { dtype: x.dtype, shape })
}

/// `broadcast_to`: numpy's rules.
pub(crate) fn broadcast_to(x: &TensorType, shape: &Shape) -> Result<TensorType, Reason> {
    check_shape_symbols(shape)?;
    if !broadcasts_to(&x.shape, shape) {
        return Err(format!("cannot broadcast {} to {}", x.shape, shape));
    }
    Ok(TensorType { dtype: x.dtype, shape: shape.clone() })
}

/// `gather`: integer indices replace the indexed axis of the table.
pub(crate) fn gather(table: &TensorType, idx: &TensorType, axis: usize) -> Result<TensorType, Reason> {
    check_axis(axis, table.rank())?;
    if !idx.dtype.is_int() {
        return Err(format!("indices must be i32 or i64, found {}", idx.dtype));
    }
    let mut dims = table.shape.0[..axis].to_vec();
    dims.extend(idx.shape.0.iter().cloned());
    dims.extend(table.shape.0[axis + 1..].iter().cloned());
    Ok(TensorType { dtype: table.dtype, shape: Shape(dims) })
}

/// Norms over the last axis (`name` for messages): a float `x` and per-channel vectors of
/// shape `[last]`, with one of the operand counts in `counts`.
pub(crate) fn norm(name: &str, eps: F64, counts: &[usize], args: &[&TensorType]) -> Result<TensorType, Reason> {
    if !(eps.0.is_finite() && eps.0 >= 0.0) {
        return Err(format!("eps must be finite and >= 0, found {eps}"));
    }
    if !counts.contains(&args.len()) {
        let operands = if counts == [1, 3] { "x, or x, gamma and beta" } else { "x, or x and gamma" };
        return Err(format!("{name} takes {operands}"));
    }
    let x = args[0];
    float(x.dtype, name)?;
    let Some(last) = x.shape.0.last() else {
        return Err("cannot normalise a scalar".into());
    };
    for p in &args[1..] {
        same_dtype(x, p)?;
        if p.shape.0 != [last.clone()] {
            return Err(format!("scale/shift must have shape [{last}], found {}", p.shape));
        }
    }
    Ok(x.clone())
}

/// `softmax`: a float operand, an axis of it.
pub(crate) fn softmax(axis: usize, x: &TensorType) -> Result<TensorType, Reason> {
    check_axis(axis, x.rank())?;
    float(x.dtype, "softmax")?;
    Ok(x.clone())
}

/// Fused activations (`gelu`, `silu`): a float operand, its type.
pub(crate) fn float_map(name: &str, x: &TensorType) -> Result<TensorType, Reason> {
    float(x.dtype, name)?;
    Ok(x.clone())
}

/// `matmul_epilogue`: a matmul, a bias that broadcasts to its output, a float activation.
pub(crate) fn matmul_epilogue(activation: Activation, args: &[&TensorType]) -> Result<TensorType, Reason> {
    let out = matmul(args[0], args[1])?;
    if activation != Activation::None {
        float(out.dtype, activation.name())?;
    }
    if let Some(bias) = args.get(2) {
        same_dtype(&out, bias)?;
        if !broadcasts_to(&bias.shape, &out.shape) {
            return Err(format!("bias {} does not broadcast to {}", bias.shape, out.shape));
        }
    }
    Ok(out)
}

/// `cross_entropy`: float logits `[..., c]`, integer targets `[..., 1]`, result `[...]`.
pub(crate) fn cross_entropy(logits: &TensorType, targets: &TensorType) -> Result<TensorType, Reason> {
    float(logits.dtype, "cross_entropy")?;
    if !targets.dtype.is_int() {
        return Err(format!("targets must be i32 or i64, found {}", targets.dtype));
    }
    let Some((_, rows)) = logits.shape.0.split_last() else {
        return Err("cannot take the cross-entropy of a scalar".into());
    };
    let mut column = rows.to_vec();
    column.push(Dim::Static(1));
    if targets.shape.0 != column {
        return Err(format!(
            "targets must have shape {} (one class per row of logits {}), found {}",
            Shape(column),
            logits.shape,
            targets.shape
        ));
    }
    Ok(TensorType { dtype: logits.dtype, shape: Shape(rows.to_vec()) })
}

/// `fused_elementwise`: the body's dtype over the operands' broadcast shape.
pub(crate) fn fused(body: &ElementwiseExpr, args: &[&TensorType]) -> Result<TensorType, Reason> {
    let dtype = infer_body(body, args)?;
    let mut shape = Shape::scalar();
    for a in args {
        shape = broadcast(&shape, &a.shape)?;
    }
    Ok(TensorType { dtype, shape })
}

fn arity_reason(op: &Op, lo: usize, hi: usize, n: usize) -> Reason {
    let want = match (lo, hi) {
        (l, h) if l == h => format!("{l}"),
        (l, usize::MAX) => format!("at least {l}"),
        (l, h) => format!("{l} to {h}"),
    };
    format!("`{}` takes {want} operand(s), found {n}", op.name())
}

pub(crate) fn constant(value: &Literal, declared: &TensorType) -> Result<TensorType, Reason> {
    check_shape_symbols(&declared.shape)?;
    if let Literal::Dense(data) = value {
        let Some(n) = declared.shape.static_numel() else {
            return Err(format!("a dense constant needs a static shape, found {} (use a splat)", declared.shape));
        };
        if n != data.len() {
            return Err(format!("{} values for shape {} of {n} elements", data.len(), declared.shape));
        }
    }
    let values: &[F64] = match value {
        Literal::Splat(v) => std::slice::from_ref(v),
        Literal::Dense(data) => data,
    };
    if let Some((i, v)) = values.iter().enumerate().find(|(_, v)| !holds(declared.dtype, v.0)) {
        let which = if values.len() > 1 { format!("value {i} ({})", v.0) } else { format!("{}", v.0) };
        return Err(format!("{which} is not a {} value{}", declared.dtype, int_range(declared.dtype)));
    }
    Ok(declared.clone())
}

/// Whether `dtype` holds `v` exactly (integers: whole and in range; i64 within 2^53, the
/// largest an f64 literal holds exactly) or, for floats, by IEEE rounding.
fn holds(dtype: DType, v: f64) -> bool {
    let whole = |lo: f64, hi: f64| v.fract() == 0.0 && (lo..=hi).contains(&v);
    match dtype {
        DType::I32 => whole(i32::MIN as f64, i32::MAX as f64),
        DType::I64 => whole(-(2f64.powi(53)), 2f64.powi(53)),
        DType::U8 => whole(0.0, 255.0),
        DType::Bool => v == 0.0 || v == 1.0,
        DType::F16 | DType::BF16 | DType::F32 | DType::F64 => true,
    }
}

/// ` (whole numbers in LO..=HI)` for an integer dtype, for messages.
fn int_range(dtype: DType) -> String {
    match dtype {
        DType::I32 => format!(" (whole numbers in {}..={})", i32::MIN, i32::MAX),
        DType::I64 => " (whole numbers within 2^53)".into(),
        DType::U8 => " (whole numbers in 0..=255)".into(),
        DType::Bool => " (0 or 1)".into(),
        _ => String::new(),
    }
}

/// Symbols must be identifiers so that the text form can print and parse them.
fn check_shape_symbols(shape: &Shape) -> Result<(), Reason> {
    match shape.symbols().find(|s| !is_identifier(s)) {
        Some(bad) => Err(format!("symbolic dim {bad:?} is not an identifier")),
        None => Ok(()),
    }
}

fn check_axis(axis: usize, rank: usize) -> Result<(), Reason> {
    if axis >= rank {
        return Err(format!("axis {axis} out of range for rank {rank}"));
    }
    Ok(())
}

fn broadcast(a: &Shape, b: &Shape) -> Result<Shape, Reason> {
    broadcast_shapes(a, b).map_err(|(x, y)| format!("cannot broadcast {a} with {b}: dims {x} and {y} differ"))
}

fn same_dtype(a: &TensorType, b: &TensorType) -> Result<(), Reason> {
    if a.dtype != b.dtype {
        return Err(format!("dtypes differ: {a} and {b} (insert a cast)"));
    }
    Ok(())
}

fn numeric(d: DType, op: &str) -> Result<(), Reason> {
    if d == DType::Bool {
        return Err(format!("`{op}` needs numbers, found bool"));
    }
    Ok(())
}

fn float(d: DType, op: &str) -> Result<(), Reason> {
    if !d.is_float() {
        return Err(format!("`{op}` needs a float dtype, found {d}"));
    }
    Ok(())
}

fn check_unary_dtype(u: UnaryOp, d: DType) -> Result<(), Reason> {
    if u.allows_int() { numeric(d, u.name()) } else { float(d, u.name()) }
}

pub(crate) fn reduce(r: ReduceOp, axes: &[usize], keepdim: bool, x: &TensorType) -> Result<TensorType, Reason> {
    if axes.is_empty() || axes.windows(2).any(|w| w[0] >= w[1]) {
        return Err(format!("axes must be non-empty and strictly increasing, found {axes:?}"));
    }
    if let Some(&a) = axes.iter().find(|&&a| a >= x.rank()) {
        return Err(format!("axis {a} out of range for rank {}", x.rank()));
    }
    numeric(x.dtype, r.name())?;
    if r == ReduceOp::Mean {
        float(x.dtype, r.name())?;
    }
    let dims = x.shape.0.iter().enumerate().filter_map(|(i, d)| match (axes.contains(&i), keepdim) {
        (false, _) => Some(d.clone()),
        (true, true) => Some(Dim::Static(1)),
        (true, false) => None,
    });
    Ok(TensorType { dtype: x.dtype, shape: Shape(dims.collect()) })
}

pub(crate) fn matmul(a: &TensorType, b: &TensorType) -> Result<TensorType, Reason> {
    if a.rank() < 2 || b.rank() < 2 {
        return Err(format!("matmul needs rank >= 2, found {} and {}", a.shape, b.shape));
    }
    same_dtype(a, b)?;
    numeric(a.dtype, "matmul")?;
    let (ra, rb) = (a.rank(), b.rank());
    let (m, k1) = (&a.shape.0[ra - 2], &a.shape.0[ra - 1]);
    let (k2, n) = (&b.shape.0[rb - 2], &b.shape.0[rb - 1]);
    if k1 != k2 {
        return Err(format!("contracted dims differ: {} @ {} ({k1} vs {k2})", a.shape, b.shape));
    }
    let mut dims = broadcast(&Shape(a.shape.0[..ra - 2].to_vec()), &Shape(b.shape.0[..rb - 2].to_vec()))?.0;
    dims.push(m.clone());
    dims.push(n.clone());
    Ok(TensorType { dtype: a.dtype, shape: Shape(dims) })
}

pub(crate) fn slice(x: &TensorType, axis: usize, start: usize, end: &Dim) -> Result<TensorType, Reason> {
    check_axis(axis, x.rank())?;
    let dim = &x.shape.0[axis];
    let out = match (end, dim) {
        (Dim::Static(e), Dim::Static(d)) if start <= *e && *e <= *d => Dim::Static(e - start),
        // A static range of a symbolic dim (the first token of `seq`) is checked at run time.
        (Dim::Static(e), Dim::Sym(_)) if start <= *e => Dim::Static(e - start),
        (Dim::Sym(e), _) if start == 0 && is_identifier(e) && (dim == end || dim.as_static().is_some()) => end.clone(),
        _ => {
            return Err(format!(
                "slice {start}..{end} does not fit dim {dim} of {} (a symbolic end needs start 0)",
                x.shape
            ));
        }
    };
    let mut shape = x.shape.clone();
    shape.0[axis] = out;
    Ok(TensorType { dtype: x.dtype, shape })
}

pub(crate) fn concat(args: &[&TensorType], axis: usize) -> Result<TensorType, Reason> {
    let first = args[0];
    check_axis(axis, first.rank())?;
    if args.len() == 1 {
        return Ok(first.clone());
    }
    let mut total = 0usize;
    for a in args {
        same_dtype(first, a)?;
        let same_other_dims =
            a.rank() == first.rank() && (0..a.rank()).all(|i| i == axis || a.shape.0[i] == first.shape.0[i]);
        if !same_other_dims {
            return Err(format!("cannot concat {} with {} along axis {axis}", first.shape, a.shape));
        }
        match a.shape.0[axis].as_static() {
            Some(n) => total = total.checked_add(n).ok_or("concat size overflows")?,
            None => return Err(format!("concat axis {axis} of {} must be static", a.shape)),
        }
    }
    let mut shape = first.shape.clone();
    shape.0[axis] = Dim::Static(total);
    Ok(TensorType { dtype: first.dtype, shape })
}

/// `update_slice`: `update` has `target`'s dtype, rank and dims but along `axis` (where it
/// must not be longer); `position` is an integer scalar. The result is `target`'s type.
pub(crate) fn update_slice(
    target: &TensorType,
    update: &TensorType,
    position: &TensorType,
    axis: usize,
) -> Result<TensorType, Reason> {
    check_axis(axis, target.rank())?;
    same_dtype(target, update)?;
    let same_other_dims = update.rank() == target.rank()
        && (0..target.rank()).all(|i| i == axis || update.shape.0[i] == target.shape.0[i]);
    if !same_other_dims {
        return Err(format!("cannot write {} into {} along axis {axis}", update.shape, target.shape));
    }
    if let (Some(u), Some(t)) = (update.shape.0[axis].as_static(), target.shape.0[axis].as_static())
        && u > t
    {
        return Err(format!("an update of {u} along axis {axis} cannot fit in {}", target.shape));
    }
    integer_scalar(position, "position")?;
    Ok(target.clone())
}

/// `cached_attention`: rank-4 `q[b, h, lq, d]`, `k[b, kvh, lk, d]`, `v[b, kvh, lk, dv]` with
/// `h` a multiple of `kvh`, and an integer scalar position; the result is `[b, h, lq, dv]`.
pub(crate) fn cached_attention(args: &[&TensorType], scale: F64) -> Result<TensorType, Reason> {
    if !scale.0.is_finite() {
        return Err(format!("scale must be finite, found {scale}"));
    }
    let (q, k, v) = (args[0], args[1], args[2]);
    for t in [q, k, v] {
        if t.rank() != 4 {
            return Err(format!("cached_attention operands need rank 4, found {}", t.shape));
        }
        same_dtype(q, t)?;
    }
    float(q.dtype, "cached_attention")?;
    let [b, h, lq, d] = &q.shape.0[..] else { unreachable!("rank checked") };
    let [bk, kvh, lk, dk] = &k.shape.0[..] else { unreachable!("rank checked") };
    let [bv, kvh_v, lv, dv] = &v.shape.0[..] else { unreachable!("rank checked") };
    if b != bk || b != bv || kvh != kvh_v || d != dk || lk != lv {
        return Err(format!(
            "q {}, k {}, v {} do not agree (batch, kv heads, head dims, lengths)",
            q.shape, k.shape, v.shape
        ));
    }
    match (h.as_static(), kvh.as_static()) {
        (Some(h), Some(kvh)) if kvh > 0 && h % kvh == 0 => {}
        _ => return Err(format!("query heads {h} must be a static multiple of key/value heads {kvh}")),
    }
    integer_scalar(args[3], "position")?;
    Ok(TensorType { dtype: q.dtype, shape: Shape(vec![b.clone(), h.clone(), lq.clone(), dv.clone()]) })
}

fn integer_scalar(t: &TensorType, what: &str) -> Result<(), Reason> {
    if t.rank() != 0 || !t.dtype.is_int() {
        return Err(format!("{what} must be an integer scalar, found {t}"));
    }
    Ok(())
}

pub(crate) fn attention(args: &[&TensorType], scale: F64) -> Result<TensorType, Reason> {
    if !scale.0.is_finite() {
        return Err(format!("scale must be finite, found {scale}"));
    }
    let (q, k, v) = (args[0], args[1], args[2]);
    for t in [q, k, v] {
        if t.rank() < 2 {
            return Err(format!("attention operands need rank >= 2, found {}", t.shape));
        }
        same_dtype(q, t)?;
    }
    float(q.dtype, "attention")?;
    let (rq, rk, rv) = (q.rank(), k.rank(), v.rank());
    let (lq, d) = (&q.shape.0[rq - 2], &q.shape.0[rq - 1]);
    let (lk, dk) = (&k.shape.0[rk - 2], &k.shape.0[rk - 1]);
    let (lv, dv) = (&v.shape.0[rv - 2], &v.shape.0[rv - 1]);
    if d != dk || lk != lv {
        return Err(format!("q {}, k {}, v {} do not agree (q/k head dims, k/v lengths)", q.shape, k.shape, v.shape));
    }
    let batch = |t: &TensorType| Shape(t.shape.0[..t.rank() - 2].to_vec());
    let b = broadcast(&broadcast(&batch(q), &batch(k))?, &batch(v))?;
    if let Some(mask) = args.get(3) {
        same_dtype(q, mask)?;
        let mut scores = b.0.clone();
        scores.extend([lq.clone(), lk.clone()]);
        if !broadcasts_to(&mask.shape, &Shape(scores.clone())) {
            return Err(format!("mask {} does not broadcast to scores {}", mask.shape, Shape(scores)));
        }
    }
    let mut dims = b.0;
    dims.extend([lq.clone(), dv.clone()]);
    Ok(TensorType { dtype: q.dtype, shape: Shape(dims) })
}

/// Type a fused body: check every index points backwards and return the result dtype.
fn infer_body(body: &ElementwiseExpr, args: &[&TensorType]) -> Result<DType, Reason> {
    let mut types: Vec<DType> = Vec::with_capacity(body.nodes.len());
    for (i, n) in body.nodes.iter().enumerate() {
        let get = |j: usize| -> Result<DType, Reason> {
            types.get(j).copied().ok_or_else(|| format!("body node t{i} refers to t{j}, which is not earlier"))
        };
        let t = match n {
            ExprNode::Arg(a) => args
                .get(*a)
                .map(|t| t.dtype)
                .ok_or_else(|| format!("body node t{i} reads ${a}, but there are {} operands", args.len()))?,
            ExprNode::Const { value, dtype } => {
                if !dtype.is_float() && value.0.fract() != 0.0 {
                    return Err(format!("body constant {value} is not a {dtype}"));
                }
                *dtype
            }
            ExprNode::Unary(u, x) => {
                let d = get(*x)?;
                check_unary_dtype(*u, d).map_err(|r| format!("body node t{i}: {r}"))?;
                d
            }
            ExprNode::Binary(b, x, y) => {
                let (dx, dy) = (get(*x)?, get(*y)?);
                let (tx, ty) = (TensorType::new(dx, Shape::scalar()), TensorType::new(dy, Shape::scalar()));
                binary(*b, &tx, &ty).map_err(|r| format!("body node t{i}: {r}"))?.dtype
            }
            ExprNode::Where(c, x, y) => {
                let (dc, dx, dy) = (get(*c)?, get(*x)?, get(*y)?);
                if dc != DType::Bool || dx != dy {
                    return Err(format!("body node t{i}: where needs bool, T, T; found {dc}, {dx}, {dy}"));
                }
                dx
            }
            ExprNode::Cast(to, x) => {
                get(*x)?;
                *to
            }
        };
        types.push(t);
    }
    types.last().copied().ok_or_else(|| "fused body is empty".into())
}
