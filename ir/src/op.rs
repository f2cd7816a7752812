//! The op set, declared in one place. Each variant's doc comment is its exact semantics; the
//! reference interpreter (`rustral_runtime::reference`) implements exactly these words.
//!
//! Conventions that hold for every op:
//! - Binary ops, `where` and the fused elementwise op broadcast by numpy's rules (align
//!   shapes from the right; a dim of 1 stretches). Operands of arithmetic must share a dtype:
//!   there is no implicit promotion, conversions are explicit `cast`s.
//! - Axes are non-negative (the frontend resolves negative axes).
//! - Integer arithmetic wraps; integer division truncates toward zero.
//! - "Source" ops (`input`, `param`, `const`, `iota`) take their type from the node's declared
//!   type; every other op's type is inferred from its operands and checked by the verifier.
//!
//! Below the enum sit the op's declaration tables, one row per op, each an exhaustive match so
//! that a new variant does not compile until it has a row: [`Op::decl`] (text name, operand
//! counts, class, kernel family), [`Op::visit_attrs`] (its attributes and their spelling, from
//! which the text form, its parser and the fusion pass's e-graph symbols are all derived),
//! [`Op::type_rule`] (which typing rule of `infer.rs` applies) and [`Op::kinds`] (one value of
//! every kind, which the parser looks names up in). `docs/adding-an-op.md` walks through them.

mod attr;
mod elementwise;
mod scalar;
mod window;

use crate::dtype::DType;
use crate::float::F64;
use crate::infer::{self as rule, Reason};
use crate::quant::QuantFormat;
use crate::shape::{Dim, Shape, TensorType};
pub use attr::{AttrVisitor, AttrWriter, Choice};
pub use elementwise::{Activation, BinaryOp, GeluApprox, ReduceOp, UnaryOp};
pub use scalar::{INTEGER_DIVISION_BY_ZERO, Real};
use serde::{Deserialize, Serialize};
pub use window::Window2d;

/// The data of a constant, in row-major order, stored as f64 (integers up to 2^53 are exact).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Literal {
    /// Every element has this value (any shape, symbolic too).
    Splat(F64),
    /// One value per element; the count must equal the static element count.
    Dense(Vec<F64>),
}

/// One node of a fused elementwise body. Operand indices refer to earlier body nodes.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ExprNode {
    /// The fused op's operand with this index, broadcast to the output shape.
    Arg(usize),
    /// A scalar constant.
    Const {
        /// The value.
        value: F64,
        /// Its dtype.
        dtype: DType,
    },
    /// A unary op of an earlier body node.
    Unary(UnaryOp, usize),
    /// A binary op of two earlier body nodes.
    Binary(BinaryOp, usize, usize),
    /// `where(cond, a, b)` of three earlier body nodes.
    Where(usize, usize, usize),
    /// A cast of an earlier body node.
    Cast(DType, usize),
}

/// A small expression DAG evaluated per element; the last node is the result.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(transparent)]
pub struct ElementwiseExpr {
    /// Body nodes in evaluation order.
    pub nodes: Vec<ExprNode>,
}

/// Every operation a graph node can perform.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Op {
    /// A graph input fed at run time; its type is the node's declared type.
    Input {
        /// Unique among inputs and params.
        name: String,
    },
    /// A trainable parameter (weights), fed or loaded at run time; type as for `Input`.
    Param {
        /// Unique among inputs and params; Hugging Face style (`encoder.layer.0.query.weight`).
        name: String,
    },
    /// A constant tensor of the node's declared type.
    #[serde(rename = "const")]
    Constant {
        /// Its data.
        value: Literal,
    },
    /// The node's declared type filled with each element's index along `axis` (0, 1, 2, ...),
    /// used to build position ids and masks.
    Iota {
        /// The axis whose index is written.
        axis: usize,
    },
    /// Uniform random numbers in `[0, 1)` of the node's declared (float) type, a pure function
    /// of `seed`, an optional operand `step` (an integer scalar) and each element's row-major
    /// index `i`, so every target reproduces them: `pcg(i ^ key) >> 8` divided by 2^24, with
    /// `key = pcg(seed + 2654435769 * step)` (`step` 0 when absent, taken modulo 2^32), where
    /// `pcg` is the 32-bit PCG-RXS-M-XS hash (`s = v * 747796405 + 2891336453;
    /// w = ((s >> ((s >> 28) + 4)) ^ s) * 277803737; (w >> 22) ^ w`, all wrapping u32).
    /// Dropout masks are built from it, the training step's number as `step`, so each step
    /// draws fresh masks and a run is reproducible. Its type is declared, as for a source op;
    /// without an operand it is a constant.
    RandomUniform {
        /// The stream; the frontend derives one per dropout from the trace's seed.
        seed: u32,
    },
    /// `f(x)` elementwise.
    Unary(UnaryOp),
    /// `f(a, b)` elementwise with broadcasting; comparisons give bool.
    Binary(BinaryOp),
    /// `cond ? a : b` elementwise with broadcasting over all three; `cond` is bool.
    Where,
    /// Elementwise conversion: floats to ints truncate toward zero (saturating), anything to
    /// bool is `!= 0`, bool to numbers is 0 or 1, floats round to nearest even.
    Cast {
        /// Target dtype.
        to: DType,
    },
    /// Reduce over `axes` (strictly increasing, non-empty); `keepdim` keeps them as size 1.
    Reduce {
        /// Which reduction.
        op: ReduceOp,
        /// Axes reduced.
        axes: Vec<usize>,
        /// Keep reduced axes as size-1 dims.
        keepdim: bool,
    },
    /// 2-D convolution (cross-correlation, as in PyTorch) of `x[n, c, h, w]` with
    /// `w[o, c / groups, kh, kw]` and an optional `bias[o]`:
    /// `out[n, f, y, x] = bias[f] + sum_{k, i, j} x[n, g * c/groups + k, y * stride[0] -
    /// padding[0] + i * dilation[0], x * stride[1] - padding[1] + j * dilation[1]] * w[f, k, i, j]`
    /// with `g = f / (o / groups)` the output channel's group; reads outside the input are zero.
    /// `groups = c` is a depthwise convolution. Channels, height and width are static.
    Conv2d {
        /// Step between windows (height, width).
        stride: Vec<usize>,
        /// Zero padding on both sides (height, width).
        padding: Vec<usize>,
        /// Step between the taps of a window (height, width).
        dilation: Vec<usize>,
        /// Channel groups; both channel counts are multiples of it.
        groups: usize,
    },
    /// `act(conv2d(x, w, bias))`: a convolution (as `Conv2d`) with its activation applied
    /// while the output is hot. Operands `x, w[, bias]`; what `fuse-conv-epilogue` builds.
    Conv2dEpilogue {
        /// Step between windows (height, width).
        stride: Vec<usize>,
        /// Zero padding on both sides (height, width).
        padding: Vec<usize>,
        /// Step between the taps of a window (height, width).
        dilation: Vec<usize>,
        /// Channel groups.
        groups: usize,
        /// Applied after the bias.
        activation: Activation,
    },
    /// The largest element of each `kernel` window of `x[n, c, h, w]` (windows as for
    /// `conv2d` with dilation 1). Padding is never chosen (it is minus infinity); padding is at
    /// most half the kernel, so every window holds an element. NaN wins, as in PyTorch.
    MaxPool2d {
        /// Window size (height, width).
        kernel: Vec<usize>,
        /// Step between windows.
        stride: Vec<usize>,
        /// Padding on both sides, at most half the kernel.
        padding: Vec<usize>,
    },
    /// The mean of each `kernel` window of `x[n, c, h, w]`, padding counted as zeros in a
    /// divisor of `kernel[0] * kernel[1]` (PyTorch's `count_include_pad=True`).
    AvgPool2d {
        /// Window size (height, width).
        kernel: Vec<usize>,
        /// Step between windows.
        stride: Vec<usize>,
        /// Zero padding on both sides, at most half the kernel.
        padding: Vec<usize>,
    },
    /// The windows of `x[n, c, h, w]` as columns (im2col, PyTorch's `nn.functional.unfold`):
    /// `out[n, (k * kh + i) * kw + j, y * ow + x]` is the element tap `(i, j)` of window
    /// `(y, x)` reads in channel `k` (zero in the padding), shape `[n, c * kh * kw, oh * ow]`.
    Unfold {
        /// Window size (height, width).
        kernel: Vec<usize>,
        /// Step between windows.
        stride: Vec<usize>,
        /// Zero padding on both sides.
        padding: Vec<usize>,
        /// Step between taps.
        dilation: Vec<usize>,
    },
    /// The adjoint of `unfold` (col2im, PyTorch's `nn.functional.fold`): each element of
    /// `x[n, c * kh * kw, oh * ow]` is added into the position of `[n, c, size[0], size[1]]`
    /// that `unfold` with the same window would have read it from; padding positions drop.
    Fold {
        /// Output height and width.
        size: Vec<usize>,
        /// Window size (height, width).
        kernel: Vec<usize>,
        /// Step between windows.
        stride: Vec<usize>,
        /// Padding on both sides.
        padding: Vec<usize>,
        /// Step between taps.
        dilation: Vec<usize>,
    },
    /// `a[..., m, k] @ b[..., k, n] -> [..., m, n]`; both ranks >= 2, batch dims broadcast.
    #[serde(rename = "matmul")]
    MatMul,
    /// `w[..., row_bytes]` (`u8`) of `format`'s blocks, each row a run of whole blocks, to
    /// f32 `[..., k]` with `k = row_bytes / block_bytes * block_size`, by the format's exact
    /// dequantization (`QuantFormat::dequantize`).
    Dequantize {
        /// The block format.
        format: QuantFormat,
    },
    /// `x[..., k] @ dequantize(w)^T`: f32 activations against a quantized `w[n, row_bytes]`
    /// (`u8`, one row of blocks per output feature) to f32 `[..., n]`. The same values as
    /// `matmul(x, transpose(dequantize(w)))` up to summation order; kernels read the blocks
    /// and never hold the f32 matrix.
    #[serde(rename = "quant_matmul")]
    QuantMatMul {
        /// The block format.
        format: QuantFormat,
    },
    /// Same elements in row-major order with a new shape of equal (symbolic) element count.
    Reshape {
        /// The new shape.
        shape: Shape,
    },
    /// `out.shape[i] = in.shape[perm[i]]`; transpose is a permute.
    Permute {
        /// A permutation of `0..rank`.
        perm: Vec<usize>,
    },
    /// Broadcast by numpy's rules to `shape`.
    BroadcastTo {
        /// Target shape.
        shape: Shape,
    },
    /// Elements `start..end` along `axis`. A symbolic `end` needs `start == 0` (a prefix whose
    /// length is bound at run time). Where the verifier cannot prove the range fits (a symbolic
    /// end on a static dim, a static end on a symbolic dim), running checks it.
    Slice {
        /// Sliced axis.
        axis: usize,
        /// First index kept.
        start: usize,
        /// One past the last index kept.
        end: Dim,
    },
    /// A dynamic update slice: operands `target, update, position` (an integer scalar read at
    /// run time); the result is `target` with `update` written at
    /// `position..position + update.shape[axis]` along `axis`, every other dim equal. A write
    /// past the end is an error. This is how a KV cache grows by one step: targets write in
    /// place when `target`'s buffer dies here, so the op is never fused, and passes keep each
    /// write a node of its own.
    UpdateSlice {
        /// The written axis.
        axis: usize,
    },
    /// Join operands along `axis`; other dims must be equal and the joined dims static
    /// (unless there is a single operand).
    Concat {
        /// Joined axis.
        axis: usize,
    },
    /// `take(table, indices, axis)`: out shape is `table[..axis] ++ indices ++ table[axis+1..]`;
    /// an index out of range is an error. Embedding lookup is `axis = 0`.
    Gather {
        /// Indexed axis of the table.
        axis: usize,
    },
    /// LayerNorm over the last axis: `(x - mean) / sqrt(var + eps) * gamma + beta`, with the
    /// biased variance; operands `x` or `x, gamma, beta` (`gamma`, `beta` of shape `[last]`).
    LayerNorm {
        /// Added to the variance.
        eps: F64,
    },
    /// RMSNorm over the last axis: `x / sqrt(mean(x^2) + eps) * gamma`; operands `x` or
    /// `x, gamma`.
    RmsNorm {
        /// Added to the mean square.
        eps: F64,
    },
    /// `exp(x - max) / sum(exp(x - max))` along `axis`.
    Softmax {
        /// Normalised axis.
        axis: usize,
    },
    /// GELU, in the form `approx` names.
    Gelu {
        /// erf or tanh form.
        approx: GeluApprox,
    },
    /// `x * sigmoid(x)`.
    Silu,
    /// Scaled dot-product attention: operands `q[..., lq, d], k[..., lk, d], v[..., lk, dv]`
    /// and optionally an additive `mask` broadcastable to `[..., lq, lk]`.
    /// `softmax(q @ k^T * scale + mask) @ v`; with `causal`, query `i` sees key `j` only when
    /// `j <= i + (lk - lq)` (bottom-right aligned, as for a KV cache), and hidden keys are left
    /// out of the weighted sum altogether (their values, even NaN, never reach the output).
    /// Batch dims broadcast.
    Attention {
        /// Multiplies the scores, usually `1/sqrt(d)`.
        scale: F64,
        /// Mask future keys.
        causal: bool,
    },
    /// Attention over a KV cache: `q[b, h, lq, d]`, `k[b, kvh, lk, d]`, `v[b, kvh, lk, dv]` and
    /// an integer scalar `position`, the index of the first query in the sequence. Query head
    /// `n` reads key/value head `n / (h / kvh)` (grouped-query attention, `h` a multiple of
    /// `kvh`); query `i` sees key `j` only when `j <= position + i`, so the keys from
    /// `position + lq` on (the cache's unfilled rows) are never read, and the work is linear in
    /// the filled length. `softmax(q k^T * scale) v` over the visible keys;
    /// `position + lq > lk` is an error.
    CachedAttention {
        /// Multiplies the scores, usually `1/sqrt(d)`.
        scale: F64,
    },
    /// `act(a @ b + bias)`: a matmul (as `MatMul`) with an optional bias broadcast to the
    /// output and an activation, computed while the output is hot. Operands `a, b[, bias]`.
    #[serde(rename = "matmul_epilogue")]
    MatMulEpilogue {
        /// Applied after the bias.
        activation: Activation,
    },
    /// Cross-entropy of each row of `logits[..., c]` (float) against its class in
    /// `targets[..., 1]` (integer, the indices `take_along_axis` would use):
    /// `out[...] = m + log(sum_j exp(logits[..., j] - m)) - logits[..., targets[..., 0]]` with
    /// `m` the row's max (NaN if any element is NaN), so no exponential overflows. The result
    /// has the logits' dtype and shape `[...]`; a target outside `0..c` is an error. It is
    /// `-log_softmax(logits)` picked at the target, what the fusion pass finds in
    /// `nn::cross_entropy`, and its gradient is `softmax(logits) - onehot(targets)`.
    CrossEntropy,
    /// A DAG of elementwise ops over the operands (broadcast to a common shape), evaluated
    /// per element; the result dtype is the body's.
    FusedElementwise {
        /// The expression.
        body: ElementwiseExpr,
    },
}

/// How an op comes to be in a graph.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum OpClass {
    /// Its value comes from outside its operands: inputs, parameters, constants, iotas and
    /// random streams (the node's declared type is its type).
    Source,
    /// A primitive that traced model code writes.
    Primitive,
    /// An op that fusion passes produce (drawn distinctly in DOT pictures, counted in the
    /// compile statistics' `fused`).
    Fused,
}

/// The kernel family an op's kernels belong to. Every target keeps one file per family
/// (`runtime/src/cpu/kernels/rows.rs` beside `lowering/src/wgsl/rows.rs`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum KernelFamily {
    /// Data that is bound, not computed: inputs, parameters, constants.
    Source,
    /// One output element from the same element of each operand (broadcasting), and the
    /// generators that write each element from its index (iota, random streams).
    Pointwise,
    /// A reduction or normalisation along rows: reductions, norms, softmax, cross-entropy.
    Rows,
    /// Matrix products, with or without an epilogue.
    MatMul,
    /// Scaled dot-product attention.
    Attention,
    /// Moves elements without arithmetic: reshape, permute, broadcast, slice, concat, gather.
    Layout,
    /// Sliding windows over the spatial axes of NCHW tensors: convolution, pooling, and the
    /// im2col/col2im pair (`unfold`, `fold`) the gradients use.
    Window,
}

/// What an op's declaration row says about it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OpDecl {
    /// The op's name in the text IR (`add`, `reduce_sum`, `layer_norm`).
    pub name: &'static str,
    /// The allowed operand counts, inclusive (`usize::MAX` for any number).
    pub arity: (usize, usize),
    /// Source, primitive or fused.
    pub class: OpClass,
    /// The kernel family.
    pub family: KernelFamily,
}

const fn decl(name: &'static str, lo: usize, hi: usize, class: OpClass, family: KernelFamily) -> OpDecl {
    OpDecl { name, arity: (lo, hi), class, family }
}

/// A sliding window's attributes in their one order: kernel, stride, padding, dilation.
fn window_attrs(
    v: &mut impl AttrVisitor,
    kernel: Option<&mut Vec<usize>>,
    stride: &mut Vec<usize>,
    padding: &mut Vec<usize>,
    dilation: Option<&mut Vec<usize>>,
) {
    if let Some(k) = kernel {
        v.ints("kernel", k);
    }
    v.ints("stride", stride);
    v.ints("padding", padding);
    if let Some(d) = dilation {
        v.ints("dilation", d);
    }
}

impl Op {
    /// The op's declaration row: name, operand counts, class and kernel family.
    pub fn decl(&self) -> OpDecl {
        use KernelFamily::{Attention, Layout, MatMul, Pointwise, Rows, Source, Window};
        use OpClass::{Fused, Primitive, Source as Src};
        const ANY: usize = usize::MAX;
        match self {
            Op::Input { .. } => decl("input", 0, 0, Src, Source),
            Op::Param { .. } => decl("param", 0, 0, Src, Source),
            Op::Constant { .. } => decl("const", 0, 0, Src, Source),
            Op::Iota { .. } => decl("iota", 0, 0, Src, Pointwise),
            Op::RandomUniform { .. } => decl("random_uniform", 0, 1, Src, Pointwise),
            Op::Unary(u) => decl(u.name(), 1, 1, Primitive, Pointwise),
            Op::Binary(b) => decl(b.name(), 2, 2, Primitive, Pointwise),
            Op::Where => decl("where", 3, 3, Primitive, Pointwise),
            Op::Cast { .. } => decl("cast", 1, 1, Primitive, Pointwise),
            Op::Reduce { op, .. } => decl(op.name(), 1, 1, Primitive, Rows),
            Op::MatMul => decl("matmul", 2, 2, Primitive, MatMul),
            Op::Conv2d { .. } => decl("conv2d", 2, 3, Primitive, Window),
            Op::Conv2dEpilogue { .. } => decl("conv2d_epilogue", 2, 3, Fused, Window),
            Op::MaxPool2d { .. } => decl("max_pool2d", 1, 1, Primitive, Window),
            Op::AvgPool2d { .. } => decl("avg_pool2d", 1, 1, Primitive, Window),
            Op::Unfold { .. } => decl("unfold", 1, 1, Primitive, Window),
            Op::Fold { .. } => decl("fold", 1, 1, Primitive, Window),
            Op::Dequantize { .. } => decl("dequantize", 1, 1, Primitive, Pointwise),
            Op::QuantMatMul { .. } => decl("quant_matmul", 2, 2, Primitive, MatMul),
            Op::Reshape { .. } => decl("reshape", 1, 1, Primitive, Layout),
            Op::Permute { .. } => decl("permute", 1, 1, Primitive, Layout),
            Op::BroadcastTo { .. } => decl("broadcast_to", 1, 1, Primitive, Layout),
            Op::Slice { .. } => decl("slice", 1, 1, Primitive, Layout),
            Op::UpdateSlice { .. } => decl("update_slice", 3, 3, Primitive, Layout),
            Op::Concat { .. } => decl("concat", 1, ANY, Primitive, Layout),
            Op::Gather { .. } => decl("gather", 2, 2, Primitive, Layout),
            Op::LayerNorm { .. } => decl("layer_norm", 1, 3, Fused, Rows),
            Op::RmsNorm { .. } => decl("rms_norm", 1, 2, Fused, Rows),
            Op::Softmax { .. } => decl("softmax", 1, 1, Fused, Rows),
            Op::Gelu { .. } => decl("gelu", 1, 1, Fused, Pointwise),
            Op::Silu => decl("silu", 1, 1, Fused, Pointwise),
            Op::Attention { .. } => decl("attention", 3, 4, Fused, Attention),
            Op::CachedAttention { .. } => decl("cached_attention", 4, 4, Primitive, Attention),
            Op::MatMulEpilogue { .. } => decl("matmul_epilogue", 2, 3, Fused, MatMul),
            Op::CrossEntropy => decl("cross_entropy", 2, 2, Fused, Rows),
            Op::FusedElementwise { .. } => decl("fused_elementwise", 1, ANY, Fused, Pointwise),
        }
    }

    /// Visit the op's attributes in their declared order: the one list the text printer and
    /// parser and the fusion pass's symbols spell. The payloads of `input`/`param` (a name),
    /// `const` (its data) and `fused_elementwise` (its body) are written beside the op, not
    /// as attributes, and are not visited.
    pub fn visit_attrs(&mut self, v: &mut impl AttrVisitor) {
        match self {
            Op::Input { .. }
            | Op::Param { .. }
            | Op::Constant { .. }
            | Op::Unary(_)
            | Op::Binary(_)
            | Op::Where
            | Op::MatMul
            | Op::Silu
            | Op::CrossEntropy
            | Op::FusedElementwise { .. } => {}
            Op::Iota { axis } => v.int("axis", axis),
            Op::RandomUniform { seed } => v.u32("seed", seed),
            Op::Cast { to } => attr::choice(v, "to", to),
            Op::Reduce { op: _, axes, keepdim } => {
                v.axes("axes", axes);
                v.bool("keepdim", keepdim);
            }
            Op::Reshape { shape } | Op::BroadcastTo { shape } => v.shape("shape", shape),
            Op::Permute { perm } => v.ints("perm", perm),
            Op::Conv2d { stride, padding, dilation, groups } => {
                window_attrs(v, None, stride, padding, Some(dilation));
                v.int("groups", groups);
            }
            Op::Conv2dEpilogue { stride, padding, dilation, groups, activation } => {
                window_attrs(v, None, stride, padding, Some(dilation));
                v.int("groups", groups);
                attr::choice(v, "activation", activation);
            }
            Op::MaxPool2d { kernel, stride, padding } | Op::AvgPool2d { kernel, stride, padding } => {
                window_attrs(v, Some(kernel), stride, padding, None)
            }
            Op::Unfold { kernel, stride, padding, dilation } => {
                window_attrs(v, Some(kernel), stride, padding, Some(dilation))
            }
            Op::Fold { size, kernel, stride, padding, dilation } => {
                v.ints("size", size);
                window_attrs(v, Some(kernel), stride, padding, Some(dilation));
            }
            Op::Slice { axis, start, end } => {
                v.axis("axis", axis);
                v.int("start", start);
                v.dim("end", end);
            }
            Op::Concat { axis } | Op::Gather { axis } | Op::Softmax { axis } | Op::UpdateSlice { axis } => {
                v.axis("axis", axis)
            }
            Op::LayerNorm { eps } | Op::RmsNorm { eps } => v.float("eps", eps),
            Op::Gelu { approx } => attr::choice(v, "approx", approx),
            Op::Attention { scale, causal } => {
                v.float("scale", scale);
                v.bool("causal", causal);
            }
            Op::CachedAttention { scale } => v.float("scale", scale),
            Op::Dequantize { format } | Op::QuantMatMul { format } => attr::choice(v, "format", format),
            Op::MatMulEpilogue { activation } => attr::choice(v, "activation", activation),
        }
    }

    /// The op's result type from its operands' (`declared` is the node's declared type,
    /// which source ops take): which rule of `infer.rs` types it. Operand counts are checked
    /// before (`rustral_ir::infer`).
    pub(crate) fn type_rule(&self, args: &[&TensorType], declared: &TensorType) -> Result<TensorType, Reason> {
        match self {
            Op::Input { name } | Op::Param { name } => rule::named_source(name, declared),
            Op::Constant { value } => rule::constant(value, declared),
            Op::Iota { axis } => rule::iota(*axis, declared),
            Op::RandomUniform { .. } => rule::random_uniform(args.first().copied(), declared),
            Op::Unary(u) => rule::unary(*u, args[0]),
            Op::Binary(b) => rule::binary(*b, args[0], args[1]),
            Op::Where => rule::select(args[0], args[1], args[2]),
            Op::Cast { to } => Ok(TensorType { dtype: *to, shape: args[0].shape.clone() }),
            Op::Reduce { op, axes, keepdim } => rule::reduce(*op, axes, *keepdim, args[0]),
            Op::MatMul => rule::matmul(args[0], args[1]),
            Op::Conv2d { groups, .. } => window::conv2d(self, *groups, args),
            Op::Conv2dEpilogue { groups, activation, .. } => {
                let t = window::conv2d(self, *groups, args)?;
                if *activation != Activation::None {
                    rule::float_map(activation.name(), &t)?;
                }
                Ok(t)
            }
            Op::MaxPool2d { .. } | Op::AvgPool2d { .. } => window::pool2d(self, args[0]),
            Op::Unfold { .. } => window::unfold(self, args[0]),
            Op::Fold { .. } => window::fold(self, args[0]),
            Op::Dequantize { format } => rule::dequantize(args[0], *format),
            Op::QuantMatMul { format } => rule::quant_matmul(args[0], args[1], *format),
            Op::Reshape { shape } => rule::reshape(args[0], shape),
            Op::Permute { perm } => rule::permute(args[0], perm),
            Op::BroadcastTo { shape } => rule::broadcast_to(args[0], shape),
            Op::Slice { axis, start, end } => rule::slice(args[0], *axis, *start, end),
            Op::UpdateSlice { axis } => rule::update_slice(args[0], args[1], args[2], *axis),
            Op::Concat { axis } => rule::concat(args, *axis),
            Op::Gather { axis } => rule::gather(args[0], args[1], *axis),
            Op::LayerNorm { eps } => rule::norm("layer_norm", *eps, &[1, 3], args),
            Op::RmsNorm { eps } => rule::norm("rms_norm", *eps, &[1, 2], args),
            Op::Softmax { axis } => rule::softmax(*axis, args[0]),
            Op::Gelu { .. } | Op::Silu => rule::float_map(self.name(), args[0]),
            Op::Attention { scale, .. } => rule::attention(args, *scale),
            Op::CachedAttention { scale } => rule::cached_attention(args, *scale),
            Op::MatMulEpilogue { activation } => rule::matmul_epilogue(*activation, args),
            Op::CrossEntropy => rule::cross_entropy(args[0], args[1]),
            Op::FusedElementwise { body } => rule::fused(body, args),
        }
    }

    /// One op of every kind, attributes at placeholder values: the table the text parser
    /// and the fusion pass look op names up in, and the list tools and schemas enumerate.
    /// Families contribute one entry per member (`neg`, `abs`, ..., `reduce_min`).
    pub fn kinds() -> Vec<Op> {
        let mut k = vec![
            Op::Input { name: String::new() },
            Op::Param { name: String::new() },
            Op::Constant { value: Literal::Splat(F64(0.0)) },
            Op::Iota { axis: 0 },
            Op::RandomUniform { seed: 0 },
        ];
        k.extend(UnaryOp::ALL.map(Op::Unary));
        k.extend(BinaryOp::ALL.map(Op::Binary));
        k.extend([Op::Where, Op::Cast { to: DType::F32 }]);
        k.extend(ReduceOp::ALL.map(|op| Op::Reduce { op, axes: vec![], keepdim: false }));
        k.extend([
            Op::MatMul,
            Op::Reshape { shape: Shape(vec![]) },
            Op::Permute { perm: vec![] },
            Op::BroadcastTo { shape: Shape(vec![]) },
            Op::Slice { axis: 0, start: 0, end: Dim::Static(0) },
            Op::UpdateSlice { axis: 0 },
            Op::Concat { axis: 0 },
            Op::Gather { axis: 0 },
            Op::LayerNorm { eps: F64(0.0) },
            Op::RmsNorm { eps: F64(0.0) },
            Op::Softmax { axis: 0 },
            Op::Gelu { approx: GeluApprox::Erf },
            Op::Silu,
            Op::Attention { scale: F64(1.0), causal: false },
            Op::CachedAttention { scale: F64(1.0) },
            Op::MatMulEpilogue { activation: Activation::None },
            Op::CrossEntropy,
            Op::FusedElementwise { body: ElementwiseExpr::default() },
            Op::Dequantize { format: QuantFormat::Q8_0 },
            Op::QuantMatMul { format: QuantFormat::Q8_0 },
            Op::Conv2d { stride: vec![1, 1], padding: vec![0, 0], dilation: vec![1, 1], groups: 1 },
            Op::MaxPool2d { kernel: vec![1, 1], stride: vec![1, 1], padding: vec![0, 0] },
            Op::AvgPool2d { kernel: vec![1, 1], stride: vec![1, 1], padding: vec![0, 0] },
            Op::Unfold { kernel: vec![1, 1], stride: vec![1, 1], padding: vec![0, 0], dilation: vec![1, 1] },
            Op::Fold {
                size: vec![1, 1],
                kernel: vec![1, 1],
                stride: vec![1, 1],
                padding: vec![0, 0],
                dilation: vec![1, 1],
            },
            Op::Conv2dEpilogue {
                stride: vec![1, 1],
                padding: vec![0, 0],
                dilation: vec![1, 1],
                groups: 1,
                activation: Activation::None,
            },
        ]);
        k
    }

    /// The op of this name with placeholder attributes (fill them with [`Op::visit_attrs`]);
    /// None for a name no op has.
    pub fn from_name(name: &str) -> Option<Op> {
        static BY_NAME: std::sync::OnceLock<std::collections::HashMap<&'static str, Op>> = std::sync::OnceLock::new();
        BY_NAME.get_or_init(|| Op::kinds().into_iter().map(|k| (k.name(), k)).collect()).get(name).cloned()
    }

    /// The names of the fused ops, in declaration order: the keys of the compile statistics'
    /// `fused` counts.
    pub fn fused_kinds() -> Vec<&'static str> {
        Op::kinds().iter().filter(|k| k.is_fused()).map(|k| k.name()).collect()
    }

    /// The op's name in the text IR (e.g. `add`, `reduce_sum`, `layer_norm`).
    pub fn name(&self) -> &'static str {
        self.decl().name
    }

    /// True for ops whose type is the node's declared type rather than inferred. All but a
    /// `random_uniform` with a `step` operand are constants of the graph.
    pub fn is_source(&self) -> bool {
        self.decl().class == OpClass::Source
    }

    /// True for the ops that fusion passes produce (drawn distinctly in DOT pictures).
    pub fn is_fused(&self) -> bool {
        self.decl().class == OpClass::Fused
    }

    /// The allowed operand counts, inclusive.
    pub fn arity(&self) -> (usize, usize) {
        self.decl().arity
    }

    /// The kernel family.
    pub fn family(&self) -> KernelFamily {
        self.decl().family
    }

    /// The attributes as the text IR spells them inside braces: `axes=[1], keepdim=true`
    /// (empty for an op without attributes).
    pub fn attr_text(&self) -> String {
        let mut w = AttrWriter::text();
        self.clone().visit_attrs(&mut w);
        w.text
    }

    /// The op as one e-graph symbol, for a first operand of rank `rank`: the text spelling
    /// without spaces and with axes counted from the end, `reduce_mean{axes=[-1],keepdim=true}`,
    /// so that one fusion rule serves every rank.
    pub fn symbol(&self, rank: usize) -> String {
        let mut w = AttrWriter::symbol(rank);
        self.clone().visit_attrs(&mut w);
        if w.text.is_empty() { self.name().to_string() } else { format!("{}{{{}}}", self.name(), w.text) }
    }

    /// The op an e-graph symbol spells (the inverse of [`Op::symbol`]), its first operand of
    /// rank `rank`; None when the symbol names no op or its attributes do not read.
    pub fn from_symbol(symbol: &str, rank: usize) -> Option<Op> {
        let (name, attrs) = match symbol.split_once('{') {
            Some((name, rest)) => (name, rest.strip_suffix('}')?),
            None => (symbol, ""),
        };
        let mut op = Op::from_name(name)?;
        let mut reader = attr::SymbolReader::new(attrs, rank);
        op.visit_attrs(&mut reader);
        reader.finished().then_some(op)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every variant, so that a new one fails here until `kinds()` lists it (this match is
    /// exhaustive: a new variant does not compile until it has a line).
    fn variant(op: &Op) -> usize {
        match op {
            Op::Input { .. } => 0,
            Op::Param { .. } => 1,
            Op::Constant { .. } => 2,
            Op::Iota { .. } => 3,
            Op::RandomUniform { .. } => 4,
            Op::Unary(_) => 5,
            Op::Binary(_) => 6,
            Op::Where => 7,
            Op::Cast { .. } => 8,
            Op::Reduce { .. } => 9,
            Op::MatMul => 10,
            Op::Dequantize { .. } => 28,
            Op::QuantMatMul { .. } => 29,
            Op::Reshape { .. } => 11,
            Op::Permute { .. } => 12,
            Op::BroadcastTo { .. } => 13,
            Op::Slice { .. } => 14,
            Op::UpdateSlice { .. } => 15,
            Op::Concat { .. } => 16,
            Op::Gather { .. } => 17,
            Op::LayerNorm { .. } => 18,
            Op::RmsNorm { .. } => 19,
            Op::Softmax { .. } => 20,
            Op::Gelu { .. } => 21,
            Op::Silu => 22,
            Op::Attention { .. } => 23,
            Op::CachedAttention { .. } => 24,
            Op::MatMulEpilogue { .. } => 25,
            Op::CrossEntropy => 26,
            Op::FusedElementwise { .. } => 27,
            Op::Conv2d { .. } => 30,
            Op::MaxPool2d { .. } => 31,
            Op::AvgPool2d { .. } => 32,
            Op::Unfold { .. } => 33,
            Op::Fold { .. } => 34,
            Op::Conv2dEpilogue { .. } => 35,
        }
    }

    #[test]
    fn kinds_cover_every_variant_and_every_family_member_once() {
        let kinds = Op::kinds();
        let mut seen: Vec<usize> = kinds.iter().map(variant).collect();
        seen.dedup();
        assert_eq!(seen, (0..=35).collect::<Vec<_>>(), "Op::kinds() must list every variant, in order");
        let mut names: Vec<&str> = kinds.iter().map(|k| k.name()).collect();
        let n = names.len();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), n, "op names must be unique");
        assert_eq!(n, 5 + UnaryOp::ALL.len() + BinaryOp::ALL.len() + 2 + ReduceOp::ALL.len() + 26);
    }

    #[test]
    fn fused_kinds_are_the_fusion_passes_outputs() {
        assert_eq!(
            Op::fused_kinds(),
            [
                "layer_norm",
                "rms_norm",
                "softmax",
                "gelu",
                "silu",
                "attention",
                "matmul_epilogue",
                "cross_entropy",
                "fused_elementwise",
                "conv2d_epilogue"
            ]
        );
    }

    #[test]
    fn symbols_count_axes_from_the_end() {
        let op = Op::Reduce { op: ReduceOp::Mean, axes: vec![1, 2], keepdim: true };
        assert_eq!(op.symbol(3), "reduce_mean{axes=[-2,-1],keepdim=true}");
        assert_eq!(op.attr_text(), "axes=[1, 2], keepdim=true");
        assert_eq!(Op::MatMul.symbol(2), "matmul");
        let slice = Op::Slice { axis: 0, start: 1, end: Dim::Sym("seq".into()) };
        assert_eq!(slice.symbol(2), "slice{axis=-2,start=1,end=seq}");
    }

    #[test]
    fn symbols_read_back_for_every_kind() {
        let samples = [
            Op::Reduce { op: ReduceOp::Max, axes: vec![0, 2], keepdim: false },
            Op::Cast { to: DType::BF16 },
            Op::Reshape { shape: Shape(vec![Dim::Sym("batch".into()), Dim::Static(8)]) },
            Op::BroadcastTo { shape: Shape(vec![]) },
            Op::Permute { perm: vec![2, 0, 1] },
            Op::Slice { axis: 1, start: 3, end: Dim::Static(9) },
            Op::LayerNorm { eps: F64(1e-5) },
            Op::Gelu { approx: GeluApprox::Tanh },
            Op::Attention { scale: F64(0.125), causal: true },
            Op::CachedAttention { scale: F64(0.25) },
            Op::UpdateSlice { axis: 2 },
            Op::Dequantize { format: QuantFormat::Q6K },
            Op::QuantMatMul { format: QuantFormat::Q4_1 },
            Op::MatMulEpilogue { activation: Activation::Silu },
            Op::RandomUniform { seed: 4_000_000_000 },
            Op::Conv2d { stride: vec![2, 1], padding: vec![3, 0], dilation: vec![1, 2], groups: 4 },
            Op::MaxPool2d { kernel: vec![3, 3], stride: vec![2, 2], padding: vec![1, 1] },
            Op::Fold {
                size: vec![8, 9],
                kernel: vec![3, 2],
                stride: vec![1, 1],
                padding: vec![1, 0],
                dilation: vec![1, 1],
            },
        ];
        for op in samples.into_iter().chain(Op::kinds().into_iter().filter(|k| k.attr_text().is_empty())) {
            assert_eq!(Op::from_symbol(&op.symbol(3), 3), Some(op.clone()), "{}", op.symbol(3));
        }
        assert_eq!(Op::from_symbol("softmax{axis=-4}", 3), None, "an axis before the first");
        assert_eq!(Op::from_symbol("softmax{axis=-1,extra=1}", 3), None, "a leftover attribute");
        assert_eq!(Op::from_symbol("gelu{approx=fast}", 3), None, "an unknown choice");
        assert_eq!(Op::from_symbol("no_such_op", 3), None);
    }
}
