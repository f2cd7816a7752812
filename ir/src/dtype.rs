//! Element types. The set is closed so that every backend can say, for each one, whether it
//! supports it; text names follow numpy/PyTorch (`f32`, `bf16`, `i64`, `bool`).

use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// The element type of a tensor.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DType {
    /// IEEE 754 half precision.
    F16,
    /// bfloat16: f32's exponent with a 7-bit mantissa.
    BF16,
    /// IEEE 754 single precision.
    F32,
    /// IEEE 754 double precision.
    F64,
    /// Two's-complement 32-bit integer.
    I32,
    /// Two's-complement 64-bit integer.
    I64,
    /// Boolean; produced by comparisons, consumed by `where`.
    Bool,
    /// Unsigned byte: storage for block-quantized weights (`rustral_ir::QuantFormat`). No
    /// arithmetic takes it; `dequantize` and `quant_matmul` read it, and the layout ops that
    /// move whole rows (`gather`, `slice`, `reshape`) carry it.
    U8,
}

impl DType {
    /// Every dtype that computes, in declaration order (used by tests and property
    /// generators); `U8`, storage only, is not among them.
    pub const ALL: [DType; 7] = [DType::F16, DType::BF16, DType::F32, DType::F64, DType::I32, DType::I64, DType::Bool];

    /// The name used in the text IR and in JSON.
    pub fn name(self) -> &'static str {
        match self {
            DType::F16 => "f16",
            DType::BF16 => "bf16",
            DType::F32 => "f32",
            DType::F64 => "f64",
            DType::I32 => "i32",
            DType::I64 => "i64",
            DType::Bool => "bool",
            DType::U8 => "u8",
        }
    }

    /// True for the floating-point types, which transcendental ops require.
    pub fn is_float(self) -> bool {
        matches!(self, DType::F16 | DType::BF16 | DType::F32 | DType::F64)
    }

    /// True for the integer types, which index ops (`gather`) require.
    pub fn is_int(self) -> bool {
        matches!(self, DType::I32 | DType::I64)
    }

    /// Bytes per element, for memory plans and cost models.
    pub fn size_bytes(self) -> usize {
        match self {
            DType::Bool | DType::U8 => 1,
            DType::F16 | DType::BF16 => 2,
            DType::F32 | DType::I32 => 4,
            DType::F64 | DType::I64 => 8,
        }
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for DType {
    type Err = ();
    fn from_str(s: &str) -> Result<Self, ()> {
        DType::ALL.into_iter().chain([DType::U8]).find(|d| d.name() == s).ok_or(())
    }
}
