//! The elementwise op families (unary, binary, reductions, GELU forms, epilogue activations):
//! each variant's doc comment is its meaning, and `scalar.rs` evaluates it.

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
    /// `log(1 + e^x)`, a smooth ReLU (float only); computed as `max(x, 0) + log1p(e^-|x|)`,
    /// which neither overflows for large `x` nor loses the tail for very negative `x`.
    Softplus,
}

impl UnaryOp {
    /// Every unary op.
    pub const ALL: [UnaryOp; 14] = [
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
        UnaryOp::Softplus,
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
            UnaryOp::Softplus => "softplus",
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
