//! The scalar meaning of the elementwise ops, written once. The reference interpreter
//! evaluates these in f64, the constant folder folds with them, and the CPU target's f32
//! scalar path calls them for every op it has no faster kernel of its own for, so the NaN
//! rules of `max`/`min`, the comparisons and the casts cannot drift apart between stages.

use super::{BinaryOp, UnaryOp};
use crate::dtype::DType;

/// A float type the scalar semantics can be evaluated in: f64 (the reference) or f32 (the
/// CPU target's scalar path).
pub trait Real: Copy + PartialOrd + std::ops::Neg<Output = Self> + std::ops::Add<Output = Self> {
    /// Not a number.
    const NAN: Self;
    /// `0`.
    const ZERO: Self;
    /// `1`.
    const ONE: Self;
    /// True for NaN.
    fn is_nan(self) -> bool;
    /// `|x|`.
    fn abs(self) -> Self;
    /// `e^x`.
    fn exp(self) -> Self;
    /// Natural logarithm.
    fn ln(self) -> Self;
    /// `ln(1 + x)`, accurate near 0.
    fn ln_1p(self) -> Self;
    /// Square root.
    fn sqrt(self) -> Self;
    /// Hyperbolic tangent.
    fn tanh(self) -> Self;
    /// The error function (libm's).
    fn erf(self) -> Self;
    /// Sine.
    fn sin(self) -> Self;
    /// Cosine.
    fn cos(self) -> Self;
    /// `self^y`.
    fn powf(self, y: Self) -> Self;
    /// `self / y`.
    fn div(self, y: Self) -> Self;
    /// `self - y`.
    fn sub(self, y: Self) -> Self;
    /// `self * y`.
    fn mul(self, y: Self) -> Self;
    /// The larger of two non-NaN values (the platform's `max`).
    fn max_of(self, y: Self) -> Self;
    /// The smaller of two non-NaN values.
    fn min_of(self, y: Self) -> Self;
}

macro_rules! real {
    ($t:ty, $erf:path) => {
        impl Real for $t {
            const NAN: $t = <$t>::NAN;
            const ZERO: $t = 0.0;
            const ONE: $t = 1.0;
            fn is_nan(self) -> bool {
                <$t>::is_nan(self)
            }
            fn abs(self) -> $t {
                <$t>::abs(self)
            }
            fn exp(self) -> $t {
                <$t>::exp(self)
            }
            fn ln(self) -> $t {
                <$t>::ln(self)
            }
            fn ln_1p(self) -> $t {
                <$t>::ln_1p(self)
            }
            fn sqrt(self) -> $t {
                <$t>::sqrt(self)
            }
            fn tanh(self) -> $t {
                <$t>::tanh(self)
            }
            fn erf(self) -> $t {
                $erf(self)
            }
            fn sin(self) -> $t {
                <$t>::sin(self)
            }
            fn cos(self) -> $t {
                <$t>::cos(self)
            }
            fn powf(self, y: $t) -> $t {
                <$t>::powf(self, y)
            }
            fn div(self, y: $t) -> $t {
                self / y
            }
            fn sub(self, y: $t) -> $t {
                self - y
            }
            fn mul(self, y: $t) -> $t {
                self * y
            }
            fn max_of(self, y: $t) -> $t {
                <$t>::max(self, y)
            }
            fn min_of(self, y: $t) -> $t {
                <$t>::min(self, y)
            }
        }
    };
}

real!(f64, libm::erf);
real!(f32, libm::erff);

impl UnaryOp {
    /// The op at `x`, as the op's doc comment defines it (evaluated in `T`'s precision).
    pub fn eval<T: Real>(self, x: T) -> T {
        match self {
            UnaryOp::Neg => -x,
            UnaryOp::Abs => x.abs(),
            UnaryOp::Exp => x.exp(),
            UnaryOp::Log => x.ln(),
            UnaryOp::Sqrt => x.sqrt(),
            UnaryOp::Rsqrt => T::ONE.div(x.sqrt()),
            UnaryOp::Recip => T::ONE.div(x),
            UnaryOp::Tanh => x.tanh(),
            UnaryOp::Sigmoid => T::ONE.div(T::ONE + (-x).exp()),
            // NaN stays NaN (it is neither > 0 nor <= 0).
            UnaryOp::Relu => {
                if x > T::ZERO || x.is_nan() {
                    x
                } else {
                    T::ZERO
                }
            }
            UnaryOp::Erf => x.erf(),
            UnaryOp::Sin => x.sin(),
            UnaryOp::Cos => x.cos(),
            UnaryOp::Softplus => {
                let relu = if x > T::ZERO { x } else { T::ZERO };
                if x.is_nan() { x } else { relu + (-x.abs()).exp().ln_1p() }
            }
        }
    }
}

impl BinaryOp {
    /// The op at `x, y` for float operands: comparisons give 1 or 0, `max`/`min` give NaN
    /// when either operand is NaN.
    pub fn eval<T: Real>(self, x: T, y: T) -> T {
        let truth = |c: bool| if c { T::ONE } else { T::ZERO };
        match self {
            BinaryOp::Add => x + y,
            BinaryOp::Sub => x.sub(y),
            BinaryOp::Mul => x.mul(y),
            BinaryOp::Div => x.div(y),
            BinaryOp::Pow => x.powf(y),
            BinaryOp::Max => {
                if x.is_nan() || y.is_nan() {
                    T::NAN
                } else {
                    x.max_of(y)
                }
            }
            BinaryOp::Min => {
                if x.is_nan() || y.is_nan() {
                    T::NAN
                } else {
                    x.min_of(y)
                }
            }
            BinaryOp::Eq => truth(x == y),
            BinaryOp::Ne => truth(x != y),
            BinaryOp::Lt => truth(x < y),
            BinaryOp::Le => truth(x <= y),
            BinaryOp::Gt => truth(x > y),
            BinaryOp::Ge => truth(x >= y),
        }
    }

    /// The op at `x, y` for operands of `dtype`, values held as f64 as the reference holds
    /// them: integer division truncates toward zero, and dividing an integer by zero is an
    /// error (the message every target reports).
    pub fn eval_typed(self, dtype: DType, x: f64, y: f64) -> Result<f64, &'static str> {
        if self == BinaryOp::Div && dtype.is_int() {
            if y == 0.0 {
                return Err(INTEGER_DIVISION_BY_ZERO);
            }
            return Ok((x / y).trunc());
        }
        Ok(self.eval(x, y))
    }
}

/// What every target reports for an integer division by zero.
pub const INTEGER_DIVISION_BY_ZERO: &str = "integer division by zero";

impl DType {
    /// `x` held in this dtype, as `cast` defines it: floats to ints truncate toward zero and
    /// saturate (NaN gives 0), anything to bool is `!= 0`, floats round to nearest even.
    pub fn cast(self, x: f64) -> f64 {
        match self {
            DType::I32 => f64::from(x as i32),
            DType::I64 => x as i64 as f64,
            _ => self.round(x),
        }
    }

    /// `x` rounded to the nearest value this dtype holds (how every op's result is stored):
    /// floats to nearest even, integers wrap from i64, bools are `x != 0`.
    pub fn round(self, x: f64) -> f64 {
        match self {
            DType::F64 => x,
            DType::F32 => x as f32 as f64,
            DType::F16 => half::f16::from_f64(x).to_f64(),
            DType::BF16 => half::bf16::from_f64(x).to_f64(),
            DType::I32 => (x as i64) as i32 as f64,
            DType::I64 => (x as i64) as f64,
            DType::Bool => f64::from(u8::from(x != 0.0)),
            DType::U8 => f64::from(x as i64 as u8),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn max_and_min_propagate_nan_in_both_precisions() {
        for b in [BinaryOp::Max, BinaryOp::Min] {
            assert!(b.eval(f64::NAN, 1.0).is_nan() && b.eval(1.0, f64::NAN).is_nan());
            assert!(b.eval(f32::NAN, 1.0).is_nan() && b.eval(1.0f32, f32::NAN).is_nan());
        }
        assert_eq!(BinaryOp::Max.eval(2.0, -3.0), 2.0);
        assert_eq!(BinaryOp::Min.eval(2.0f32, -3.0), -3.0);
    }

    #[test]
    fn comparisons_with_nan_are_false_except_ne() {
        for b in BinaryOp::ALL.into_iter().filter(|b| b.is_comparison()) {
            let want = if b == BinaryOp::Ne { 1.0 } else { 0.0 };
            assert_eq!(b.eval(f64::NAN, f64::NAN), want, "{}", b.name());
        }
    }

    #[test]
    fn integer_division_truncates_and_refuses_zero() {
        assert_eq!(BinaryOp::Div.eval_typed(DType::I32, -7.0, 2.0), Ok(-3.0));
        assert_eq!(BinaryOp::Div.eval_typed(DType::I64, 1.0, 0.0), Err(INTEGER_DIVISION_BY_ZERO));
        assert!(BinaryOp::Div.eval_typed(DType::F32, 1.0, 0.0).unwrap().is_infinite());
    }

    /// Softplus against the direct `ln(1 + e^x)` where that is accurate in f64 (to 1e-13,
    /// what rounding `1 + e^x` costs), and against its asymptotes (`x` above, `e^x` below)
    /// where the direct form overflows or rounds the tail away.
    #[test]
    fn softplus_is_log_one_plus_exp_without_overflow_or_lost_tails() {
        let s = |x: f64| UnaryOp::Softplus.eval(x);
        for x in [-5.0, -1.0, -0.25, 0.0, 0.25, 1.0, 5.0] {
            let want = (1.0 + f64::exp(x)).ln();
            assert!((s(x) - want).abs() <= 1e-13 * want, "softplus({x}) = {} vs {want}", s(x));
        }
        assert_eq!(s(0.0), std::f64::consts::LN_2);
        assert!((s(800.0) - 800.0).abs() < 1e-12, "no overflow above");
        let tail = s(-50.0);
        assert!((tail / f64::exp(-50.0) - 1.0).abs() < 1e-12, "relative accuracy in the tail: {tail}");
        assert_eq!(s(f64::INFINITY), f64::INFINITY);
        assert_eq!(s(f64::NEG_INFINITY), 0.0);
        assert!(s(f64::NAN).is_nan());
        let t = UnaryOp::Softplus.eval(-30.0f32);
        assert!((f64::from(t) / f64::exp(-30.0) - 1.0).abs() < 1e-6, "f32 tail: {t}");
    }

    #[test]
    fn casts_saturate_and_round() {
        assert_eq!(DType::I32.cast(1e20), f64::from(i32::MAX));
        assert_eq!(DType::I32.cast(f64::NAN), 0.0);
        assert_eq!(DType::I64.cast(-2.7), -2.0);
        assert_eq!(DType::Bool.cast(-0.5), 1.0);
        assert_eq!(DType::F16.cast(1.0 + 1.0 / 4096.0), 1.0);
        assert_eq!(DType::F32.cast(0.1), 0.1f32 as f64);
    }
}
