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

use crate::dtype::DType;
use crate::float::F64;
use crate::shape::{Dim, Shape};
use serde::{Deserialize, Serialize};

/// Elementwise functions of one operand.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum UnaryOp {
    /// `-x`.
    Neg,
    /// `|x|`.
    Abs,
    /// `e^x` (float only).
    Exp,
    /// Natural logarithm; `log(0) = -inf`, negative gives NaN (float only).
    Log,
    /// Square root; negative gives NaN (float only).
    Sqrt,
    /// `1 / sqrt(x)` (float only).
    Rsqrt,
    /// `1 / x` (float only).
    Recip,
    /// Hyperbolic tangent (float only).
    Tanh,
    /// `1 / (1 + e^-x)` (float only).
    Sigmoid,
    /// `max(x, 0)`.
    Relu,
    /// The Gauss error function `2/sqrt(pi) * integral_0^x e^(-t^2) dt` (float only).
    Erf,
    /// Sine of radians (float only).
    Sin,
    /// Cosine of radians (float only).
    Cos,
}

impl UnaryOp {
    /// Every unary op.
    pub const ALL: [UnaryOp; 13] = [
        UnaryOp::Neg,
        UnaryOp::Abs,
        UnaryOp::Exp,
        UnaryOp::Log,
        UnaryOp::Sqrt,
        UnaryOp::Rsqrt,
        UnaryOp::Recip,
        UnaryOp::Tanh,
        UnaryOp::Sigmoid,
        UnaryOp::Relu,
        UnaryOp::Erf,
        UnaryOp::Sin,
        UnaryOp::Cos,
    ];

    /// Text name.
    pub fn name(self) -> &'static str {
        match self {
            UnaryOp::Neg => "neg",
            UnaryOp::Abs => "abs",
            UnaryOp::Exp => "exp",
            UnaryOp::Log => "log",
            UnaryOp::Sqrt => "sqrt",
            UnaryOp::Rsqrt => "rsqrt",
            UnaryOp::Recip => "recip",
            UnaryOp::Tanh => "tanh",
            UnaryOp::Sigmoid => "sigmoid",
            UnaryOp::Relu => "relu",
            UnaryOp::Erf => "erf",
            UnaryOp::Sin => "sin",
            UnaryOp::Cos => "cos",
        }
    }

    /// True when the op accepts integer operands (the rest are float-only).
    pub fn allows_int(self) -> bool {
        matches!(self, UnaryOp::Neg | UnaryOp::Abs | UnaryOp::Relu)
    }
}

/// Elementwise functions of two operands (broadcasting).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BinaryOp {
    /// `a + b`.
    Add,
    /// `a - b`.
    Sub,
    /// `a * b`.
    Mul,
    /// `a / b` (integers truncate toward zero; division by zero is an error in the reference).
    Div,
    /// `a ^ b` (float only).
    Pow,
    /// The larger of `a` and `b`; NaN if either is NaN.
    Max,
    /// The smaller of `a` and `b`; NaN if either is NaN.
    Min,
    /// `a == b`, giving bool.
    Eq,
    /// `a != b`, giving bool.
    Ne,
    /// `a < b`, giving bool.
    Lt,
    /// `a <= b`, giving bool.
    Le,
    /// `a > b`, giving bool.
    Gt,
    /// `a >= b`, giving bool.
    Ge,
}

impl BinaryOp {
    /// Every binary op.
    pub const ALL: [BinaryOp; 13] = [
        BinaryOp::Add,
        BinaryOp::Sub,
        BinaryOp::Mul,
        BinaryOp::Div,
        BinaryOp::Pow,
        BinaryOp::Max,
        BinaryOp::Min,
        BinaryOp::Eq,
        BinaryOp::Ne,
        BinaryOp::Lt,
        BinaryOp::Le,
        BinaryOp::Gt,
        BinaryOp::Ge,
    ];

    /// Text name.
    pub fn name(self) -> &'static str {
        match self {
            BinaryOp::Add => "add",
            BinaryOp::Sub => "sub",
            BinaryOp::Mul => "mul",
            BinaryOp::Div => "div",
            BinaryOp::Pow => "pow",
            BinaryOp::Max => "max",
            BinaryOp::Min => "min",
            BinaryOp::Eq => "eq",
            BinaryOp::Ne => "ne",
            BinaryOp::Lt => "lt",
            BinaryOp::Le => "le",
            BinaryOp::Gt => "gt",
            BinaryOp::Ge => "ge",
        }
    }

    /// True for the comparisons, whose result is bool.
    pub fn is_comparison(self) -> bool {
        matches!(self, BinaryOp::Eq | BinaryOp::Ne | BinaryOp::Lt | BinaryOp::Le | BinaryOp::Gt | BinaryOp::Ge)
    }
}

/// Reductions over a set of axes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReduceOp {
    /// Sum of the elements.
    Sum,
    /// Arithmetic mean (float only).
    Mean,
    /// Largest element (NaN if any is NaN).
    Max,
    /// Smallest element (NaN if any is NaN).
    Min,
}

impl ReduceOp {
    /// Every reduction.
    pub const ALL: [ReduceOp; 4] = [ReduceOp::Sum, ReduceOp::Mean, ReduceOp::Max, ReduceOp::Min];

    /// Text name (`reduce_sum`, ...), distinct from the binary `max`/`min`.
    pub fn name(self) -> &'static str {
        match self {
            ReduceOp::Sum => "reduce_sum",
            ReduceOp::Mean => "reduce_mean",
            ReduceOp::Max => "reduce_max",
            ReduceOp::Min => "reduce_min",
        }
    }
}

/// Which formula a `gelu` computes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GeluApprox {
    /// `0.5 * x * (1 + erf(x / sqrt(2)))`, the exact form (BERT).
    Erf,
    /// `0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x^3)))` (GPT-2's `gelu_new`).
    Tanh,
}

/// An activation applied in a matmul epilogue.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Activation {
    /// No activation.
    None,
    /// `relu`.
    Relu,
    /// `gelu` in its erf form.
    GeluErf,
    /// `gelu` in its tanh form.
    GeluTanh,
    /// `x * sigmoid(x)`.
    Silu,
    /// `tanh`.
    Tanh,
    /// `sigmoid`.
    Sigmoid,
}

impl Activation {
    /// Every activation.
    pub const ALL: [Activation; 7] = [
        Activation::None,
        Activation::Relu,
        Activation::GeluErf,
        Activation::GeluTanh,
        Activation::Silu,
        Activation::Tanh,
        Activation::Sigmoid,
    ];

    /// Text name.
    pub fn name(self) -> &'static str {
        match self {
            Activation::None => "none",
            Activation::Relu => "relu",
            Activation::GeluErf => "gelu_erf",
            Activation::GeluTanh => "gelu_tanh",
            Activation::Silu => "silu",
            Activation::Tanh => "tanh",
            Activation::Sigmoid => "sigmoid",
        }
    }
}

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
    /// `a[..., m, k] @ b[..., k, n] -> [..., m, n]`; both ranks >= 2, batch dims broadcast.
    #[serde(rename = "matmul")]
    MatMul,
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

impl Op {
    /// The op's name in the text IR (e.g. `add`, `reduce_sum`, `layer_norm`).
    pub fn name(&self) -> &'static str {
        match self {
            Op::Input { .. } => "input",
            Op::Param { .. } => "param",
            Op::Constant { .. } => "const",
            Op::Iota { .. } => "iota",
            Op::RandomUniform { .. } => "random_uniform",
            Op::Unary(u) => u.name(),
            Op::Binary(b) => b.name(),
            Op::Where => "where",
            Op::Cast { .. } => "cast",
            Op::Reduce { op, .. } => op.name(),
            Op::MatMul => "matmul",
            Op::Reshape { .. } => "reshape",
            Op::Permute { .. } => "permute",
            Op::BroadcastTo { .. } => "broadcast_to",
            Op::Slice { .. } => "slice",
            Op::Concat { .. } => "concat",
            Op::Gather { .. } => "gather",
            Op::LayerNorm { .. } => "layer_norm",
            Op::RmsNorm { .. } => "rms_norm",
            Op::Softmax { .. } => "softmax",
            Op::Gelu { .. } => "gelu",
            Op::Silu => "silu",
            Op::Attention { .. } => "attention",
            Op::MatMulEpilogue { .. } => "matmul_epilogue",
            Op::CrossEntropy => "cross_entropy",
            Op::FusedElementwise { .. } => "fused_elementwise",
        }
    }

    /// True for ops whose type is the node's declared type rather than inferred. All but a
    /// `random_uniform` with a `step` operand are constants of the graph.
    pub fn is_source(&self) -> bool {
        matches!(
            self,
            Op::Input { .. } | Op::Param { .. } | Op::Constant { .. } | Op::Iota { .. } | Op::RandomUniform { .. }
        )
    }

    /// True for the ops that fusion passes produce (drawn distinctly in DOT pictures).
    pub fn is_fused(&self) -> bool {
        matches!(
            self,
            Op::LayerNorm { .. }
                | Op::RmsNorm { .. }
                | Op::Softmax { .. }
                | Op::Gelu { .. }
                | Op::Silu
                | Op::Attention { .. }
                | Op::MatMulEpilogue { .. }
                | Op::CrossEntropy
                | Op::FusedElementwise { .. }
        )
    }

    /// The allowed operand counts, inclusive.
    pub fn arity(&self) -> (usize, usize) {
        match self {
            Op::Input { .. } | Op::Param { .. } | Op::Constant { .. } | Op::Iota { .. } => (0, 0),
            Op::RandomUniform { .. } => (0, 1),
            Op::Unary(_)
            | Op::Cast { .. }
            | Op::Reduce { .. }
            | Op::Reshape { .. }
            | Op::Permute { .. }
            | Op::BroadcastTo { .. }
            | Op::Slice { .. }
            | Op::Softmax { .. }
            | Op::Gelu { .. }
            | Op::Silu => (1, 1),
            Op::Binary(_) | Op::MatMul | Op::Gather { .. } | Op::CrossEntropy => (2, 2),
            Op::Where => (3, 3),
            Op::Concat { .. } | Op::FusedElementwise { .. } => (1, usize::MAX),
            Op::LayerNorm { .. } => (1, 3),
            Op::RmsNorm { .. } => (1, 2),
            Op::Attention { .. } => (3, 4),
            Op::MatMulEpilogue { .. } => (2, 3),
        }
    }
}
