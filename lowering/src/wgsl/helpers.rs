//! The WGSL helper functions kernels call, and the value expressions of every elementwise op.
//! Values are f32 whatever their dtype and are rounded to it after each op, as the reference
//! interpreter does in f64. The helpers pin down what WGSL leaves to the implementation: NaN
//! and infinities (made at run time, since a constant expression may not be one), `log`,
//! `sqrt` and `pow` outside their domains, NaN-propagating `max`/`min`, saturating and wrapping
//! float-to-int conversions, and f16/bf16 rounding.

use super::emit::Shader;
use rustral_ir::{Activation, BinaryOp, DType, GeluApprox, UnaryOp};

/// A helper function; the order is the order of emission.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Helper {
    Special,
    Exp,
    Log,
    Sqrt,
    Tanh,
    Erf,
    Softplus,
    Pow,
    MaxMin,
    ToInt,
    CastI32,
    RoundF16,
    RoundBf16,
    RoundI64,
    Pcg,
}

impl Helper {
    /// Helpers this one calls.
    pub fn deps(self) -> &'static [Helper] {
        match self {
            Helper::Special | Helper::Pcg => &[],
            Helper::Tanh | Helper::Erf | Helper::Softplus => &[Helper::Special, Helper::Exp],
            _ => &[Helper::Special],
        }
    }

    pub fn source(self) -> &'static str {
        match self {
            Helper::Special => {
                "// NaN and infinity from bits at run time (a constant expression may be neither).
fn nan() -> f32 {
    var b = 0x7fc00000u;
    return bitcast<f32>(b);
}
fn inf() -> f32 {
    var b = 0x7f800000u;
    return bitcast<f32>(b);
}
fn is_nan(x: f32) -> bool {
    return (bitcast<u32>(x) & 0x7fffffffu) > 0x7f800000u;
}
fn is_inf(x: f32) -> bool {
    return (bitcast<u32>(x) & 0x7fffffffu) == 0x7f800000u;
}
"
            }
            Helper::Exp => {
                "fn exp_(x: f32) -> f32 {
    if (is_nan(x)) { return x; }
    if (x > 88.72284) { return inf(); }
    if (x < -103.97208) { return 0.0; }
    return exp(x);
}
"
            }
            Helper::Log => {
                "fn log_(x: f32) -> f32 {
    if (is_nan(x) || x < 0.0) { return nan(); }
    if (x == 0.0) { return -inf(); }
    if (is_inf(x)) { return x; }
    return log(x);
}
"
            }
            Helper::Sqrt => {
                "fn sqrt_(x: f32) -> f32 {
    if (is_nan(x) || x < 0.0) { return nan(); }
    if (is_inf(x)) { return x; }
    return sqrt(x);
}
"
            }
            Helper::Tanh => {
                "// tanh from exp(-2|x|), which cannot overflow; a series near 0 keeps relative accuracy.
fn tanh_(x: f32) -> f32 {
    if (is_nan(x)) { return x; }
    let a = abs(x);
    var t: f32;
    if (a < 0.0625) {
        let a2 = a * a;
        t = a * (1.0 + a2 * (-0.33333334 + a2 * (0.13333334 - a2 * 0.053968254)));
    } else {
        let e = exp_(-2.0 * a);
        t = (1.0 - e) / (1.0 + e);
    }
    return select(t, -t, x < 0.0);
}
"
            }
            Helper::Erf => {
                "// erf: Abramowitz and Stegun 7.1.26 (absolute error below 1.5e-7), with a series near 0.
fn erf_(x: f32) -> f32 {
    if (is_nan(x)) { return x; }
    let a = abs(x);
    var y: f32;
    if (a < 0.125) {
        let a2 = a * a;
        y = a * (1.1283792 + a2 * (-0.37612638 + a2 * 0.11283792));
    } else {
        let t = 1.0 / (1.0 + 0.3275911 * a);
        let p = ((((1.0614054 * t - 1.4531521) * t + 1.4214138) * t - 0.28449672) * t + 0.2548296) * t;
        y = 1.0 - p * exp_(-a * a);
    }
    return select(y, -y, x < 0.0);
}
"
            }
            Helper::Softplus => {
                "// softplus(x) = max(x, 0) + log1p(exp(-|x|)); log1p(u) as log(w) * u / (w - 1) with
// w = 1 + u (Goldberg's correction), exact to rounding for small u, and u itself when w == 1.
fn softplus_(x: f32) -> f32 {
    if (is_nan(x)) { return x; }
    let u = exp_(-abs(x));
    let w = 1.0 + u;
    var l = u;
    if (w != 1.0) { l = log(w) * u / (w - 1.0); }
    return max(x, 0.0) + l;
}
"
            }
            Helper::Pow => {
                "// pow with the C99/Rust special cases (negative bases with integer exponents included).
fn pow_(x: f32, y: f32) -> f32 {
    if (y == 0.0 || x == 1.0) { return 1.0; }
    if (is_nan(x) || is_nan(y)) { return nan(); }
    let ax = abs(x);
    if (is_inf(y)) {
        if (ax == 1.0) { return 1.0; }
        return select(0.0, inf(), (ax > 1.0) == (y > 0.0));
    }
    let integer = floor(y) == y;
    let odd = integer && abs(y) < 16777216.0 && (i32(abs(y)) & 1) == 1;
    if (x < 0.0 && !integer) { return nan(); }
    var r: f32;
    if (ax == 0.0) {
        r = select(0.0, inf(), y < 0.0);
    } else if (is_inf(ax)) {
        r = select(0.0, inf(), y > 0.0);
    } else {
        r = exp2(y * log2(ax));
    }
    let negative = (bitcast<u32>(x) & 0x80000000u) != 0u;
    return select(r, -r, negative && odd);
}
"
            }
            Helper::MaxMin => {
                "fn max_(a: f32, b: f32) -> f32 {
    if (is_nan(a) || is_nan(b)) { return nan(); }
    return max(a, b);
}
fn min_(a: f32, b: f32) -> f32 {
    if (is_nan(a) || is_nan(b)) { return nan(); }
    return min(a, b);
}
"
            }
            Helper::ToInt => {
                "// Float to i32 as Rust's `x as i64 as i32`: truncate, saturate to i64, keep the low 32 bits.
fn to_int(x: f32) -> i32 {
    if (is_nan(x)) { return 0; }
    let t = trunc(x);
    if (abs(t) < 2147483648.0) { return i32(t); }
    if (t >= 9.223372e18) { return -1; }
    if (t <= -9.223372e18) { return 0; }
    let bits = bitcast<u32>(abs(t));
    let e = ((bits >> 23u) & 0xffu) - 150u;
    let mantissa = (bits & 0x7fffffu) | 0x800000u;
    var low = select(0u, mantissa << e, e < 32u);
    if (t < 0.0) { low = ~low + 1u; }
    return bitcast<i32>(low);
}
"
            }
            Helper::RoundF16 => {
                "// Round to the nearest f16 (ties to even) by the bits; below 2^-14 to multiples of 2^-24.
fn round_f16(x: f32) -> f32 {
    if (is_nan(x)) { return x; }
    let a = abs(x);
    var r: f32;
    if (a >= 65520.0) {
        r = inf();
    } else if (a < 6.1035156e-05) {
        r = round(a * 16777216.0) / 16777216.0;
    } else {
        let b = bitcast<u32>(a);
        r = bitcast<f32>((b + 0xfffu + ((b >> 13u) & 1u)) & 0xffffe000u);
    }
    return bitcast<f32>(bitcast<u32>(r) | (bitcast<u32>(x) & 0x80000000u));
}
"
            }
            Helper::RoundBf16 => {
                "// Round to the nearest bfloat16 (ties to even) by the bits.
fn round_bf16(x: f32) -> f32 {
    if (is_nan(x)) { return x; }
    let b = bitcast<u32>(x);
    return bitcast<f32>((b + 0x7fffu + ((b >> 16u) & 1u)) & 0xffff0000u);
}
"
            }
            Helper::Pcg => {
                "// The 32-bit PCG-RXS-M-XS hash that defines `random_uniform`.
fn pcg(v: u32) -> u32 {
    let s = v * 747796405u + 2891336453u;
    let w = ((s >> ((s >> 28u) + 4u)) ^ s) * 277803737u;
    return (w >> 22u) ^ w;
}
"
            }
            Helper::CastI32 => {
                "// Float to i32 as `cast` defines it: truncate and saturate (NaN gives 0). Values live
// in f32 here, so the top is the largest f32 below 2^31.
fn cast_i32(x: f32) -> f32 {
    if (is_nan(x)) { return 0.0; }
    return clamp(trunc(x), -2147483648.0, 2147483520.0);
}
"
            }
            Helper::RoundI64 => {
                "fn round_i64(x: f32) -> f32 {
    if (is_nan(x)) { return 0.0; }
    return clamp(trunc(x), -9.223372e18, 9.223372e18);
}
"
            }
        }
    }
}

/// `x` of `from` cast to `to` (before `round` to `to`): a float cast to i32 saturates, where
/// storing an i32 result wraps as integer arithmetic does.
pub(crate) fn cast(sh: &mut Shader, from: DType, to: DType, x: &str) -> String {
    if to == DType::I32 && from.is_float() {
        sh.need(Helper::CastI32);
        format!("cast_i32({x})")
    } else {
        x.to_string()
    }
}

/// An f32 literal; NaN and infinities are made at run time.
pub(crate) fn literal(sh: &mut Shader, v: f64) -> String {
    let x = v as f32;
    if x.is_nan() {
        sh.need(Helper::Special);
        "nan()".into()
    } else if x.is_infinite() {
        sh.need(Helper::Special);
        if x > 0.0 { "inf()".into() } else { "(-inf())".into() }
    } else {
        float_text(x)
    }
}

/// A finite f32 as a WGSL literal denoting exactly it: printed as the shortest f64 that is
/// its value. The shortest f32 spelling need not be exact (`3.4028235e38` lies above
/// f32::MAX), and Tint rejects a literal outside f32's range where naga rounds it. Negative
/// values are parenthesised, so they can follow any operator.
pub(crate) fn float_text(x: f32) -> String {
    let s = format!("{:?}", f64::from(x));
    let s = if s.contains(['.', 'e']) { s } else { format!("{s}.0") };
    if x.is_sign_negative() { format!("({s})") } else { s }
}

/// `x` rounded to `dtype`.
pub(crate) fn round(sh: &mut Shader, dtype: DType, x: &str) -> String {
    match dtype {
        DType::F32 | DType::F64 | DType::U8 => x.to_string(),
        DType::F16 => {
            sh.need(Helper::RoundF16);
            format!("round_f16({x})")
        }
        DType::BF16 => {
            sh.need(Helper::RoundBf16);
            format!("round_bf16({x})")
        }
        DType::I32 => {
            sh.need(Helper::ToInt);
            format!("f32(to_int({x}))")
        }
        DType::I64 => {
            sh.need(Helper::RoundI64);
            format!("round_i64({x})")
        }
        DType::Bool => format!("select(1.0, 0.0, {x} == 0.0)"),
    }
}

/// A unary op of `x` (unrounded).
pub(crate) fn unary(sh: &mut Shader, u: UnaryOp, x: &str) -> String {
    let call = |sh: &mut Shader, h: Helper, f: &str| {
        sh.need(h);
        format!("{f}({x})")
    };
    match u {
        UnaryOp::Neg => format!("-({x})"),
        UnaryOp::Abs => format!("abs({x})"),
        UnaryOp::Exp => call(sh, Helper::Exp, "exp_"),
        UnaryOp::Log => call(sh, Helper::Log, "log_"),
        UnaryOp::Sqrt => call(sh, Helper::Sqrt, "sqrt_"),
        UnaryOp::Rsqrt => {
            sh.need(Helper::Sqrt);
            format!("(1.0 / sqrt_({x}))")
        }
        UnaryOp::Recip => format!("(1.0 / {x})"),
        UnaryOp::Tanh => call(sh, Helper::Tanh, "tanh_"),
        UnaryOp::Sigmoid => {
            sh.need(Helper::Exp);
            format!("(1.0 / (1.0 + exp_(-({x}))))")
        }
        UnaryOp::Relu => {
            sh.need(Helper::Special);
            format!("select(0.0, {x}, {x} > 0.0 || is_nan({x}))")
        }
        UnaryOp::Erf => call(sh, Helper::Erf, "erf_"),
        UnaryOp::Sin => format!("sin({x})"),
        UnaryOp::Cos => format!("cos({x})"),
        UnaryOp::Softplus => call(sh, Helper::Softplus, "softplus_"),
    }
}

/// A binary op of `x` and `y` whose operands have dtype `dtype` (unrounded; comparisons give
/// 0 or 1). Integer division by zero records a failure and gives 0.
pub(crate) fn binary(sh: &mut Shader, b: BinaryOp, dtype: DType, x: &str, y: &str) -> String {
    let truth = |c: String| format!("select(0.0, 1.0, {c})");
    match b {
        BinaryOp::Add => format!("({x} + {y})"),
        BinaryOp::Sub => format!("({x} - {y})"),
        BinaryOp::Mul => format!("({x} * {y})"),
        BinaryOp::Div if dtype.is_int() => {
            let fail = sh.fail(rustral_ir::INTEGER_DIVISION_BY_ZERO);
            sh.line(1, &format!("if ({y} == 0.0) {{ {fail} }}"));
            format!("select(trunc({x} / {y}), 0.0, {y} == 0.0)")
        }
        BinaryOp::Div => format!("({x} / {y})"),
        BinaryOp::Pow => {
            sh.need(Helper::Pow);
            format!("pow_({x}, {y})")
        }
        BinaryOp::Max => {
            sh.need(Helper::MaxMin);
            format!("max_({x}, {y})")
        }
        BinaryOp::Min => {
            sh.need(Helper::MaxMin);
            format!("min_({x}, {y})")
        }
        BinaryOp::Eq => truth(format!("{x} == {y}")),
        BinaryOp::Ne => truth(format!("!({x} == {y})")),
        BinaryOp::Lt => truth(format!("{x} < {y}")),
        BinaryOp::Le => truth(format!("{x} <= {y}")),
        BinaryOp::Gt => truth(format!("{x} > {y}")),
        BinaryOp::Ge => truth(format!("{x} >= {y}")),
    }
}

/// GELU of `x`.
pub(crate) fn gelu(sh: &mut Shader, approx: GeluApprox, x: &str) -> String {
    match approx {
        GeluApprox::Erf => {
            sh.need(Helper::Erf);
            format!("(0.5 * {x} * (1.0 + erf_({x} * 0.70710677)))")
        }
        GeluApprox::Tanh => {
            sh.need(Helper::Tanh);
            format!("(0.5 * {x} * (1.0 + tanh_(0.7978846 * ({x} + 0.044715 * {x} * {x} * {x}))))")
        }
    }
}

/// SiLU of `x`.
pub(crate) fn silu(sh: &mut Shader, x: &str) -> String {
    sh.need(Helper::Exp);
    format!("({x} / (1.0 + exp_(-({x}))))")
}

/// A matmul epilogue's activation of `x`.
pub(crate) fn activation(sh: &mut Shader, act: Activation, x: &str) -> String {
    match act {
        Activation::None => x.to_string(),
        Activation::Relu => unary(sh, UnaryOp::Relu, x),
        Activation::GeluErf => gelu(sh, GeluApprox::Erf, x),
        Activation::GeluTanh => gelu(sh, GeluApprox::Tanh, x),
        Activation::Silu => silu(sh, x),
        Activation::Tanh => unary(sh, UnaryOp::Tanh, x),
        Activation::Sigmoid => unary(sh, UnaryOp::Sigmoid, x),
    }
}
