//! Cranelift IR for one fused elementwise body: a loop over the output four lanes at a time
//! (`f32x4`, the widest vector the x64 backend has), every body node a few vector
//! instructions in registers, nothing written but the result.
//!
//! The transcendental functions are the same branch-free polynomials as `simd.rs`, emitted
//! operation for operation in the same order, so a JIT kernel gives the same bits as the
//! row interpreter. `log`, `sin`, `cos` and `pow` call back into Rust, a vector at a time.

use cranelift_codegen::ir::condcodes::{FloatCC, IntCC};
use cranelift_codegen::ir::types::{F32, F32X4, I32X4, I64};
use cranelift_codegen::ir::{AbiParam, Endianness, InstBuilder, MemFlagsData, Signature, StackSlotData, StackSlotKind};
use cranelift_codegen::ir::{FuncRef, Value};
use cranelift_frontend::FunctionBuilder;
use rustral_ir::{BinaryOp, DType, ElementwiseExpr, ExprNode, UnaryOp};

/// Which Rust helper a node calls, a vector at a time (see `helpers` in `mod.rs`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(super) enum Helper {
    /// A unary op without an inline form: the CPU target's scalar kernel on each lane, the
    /// op's index in `UnaryOp::ALL` passed in the second vector.
    Unary,
    /// `pow` of other exponents than 2 and 3.
    Pow,
}

impl Helper {
    pub(super) const ALL: [Helper; 2] = [Helper::Unary, Helper::Pow];

    pub(super) fn symbol(self) -> &'static str {
        match self {
            Helper::Unary => "rustral_unary_f32x4",
            Helper::Pow => "rustral_pow_f32x4",
        }
    }
}

/// The helpers' signature: `(a: *const f32, b: *const f32, out: *mut f32)`, four lanes each.
pub(super) fn helper_signature(mut sig: Signature) -> Signature {
    sig.params.extend([AbiParam::new(I64), AbiParam::new(I64), AbiParam::new(I64)]);
    sig
}

/// The kernel's signature: `(args: *const *const f32, out: *mut f32, n: usize)`, where `n`
/// is a multiple of `LANES` and every non-scalar argument has at least `n` values.
pub(super) fn kernel_signature(mut sig: Signature) -> Signature {
    sig.params.extend([AbiParam::new(I64), AbiParam::new(I64), AbiParam::new(I64)]);
    sig
}

/// Vectors per loop iteration.
const UNROLL: usize = 2;

/// Values per loop iteration: the kernel's `n` is a multiple of this.
pub(super) const LANES: usize = 4 * UNROLL;

/// A body node's value: floats, or a lane mask (all ones for true) for bools.
#[derive(Clone, Copy)]
enum V {
    F(Value),
    M(Value),
}

/// Emits one body into `b`, whose function has `kernel_signature`. `scalar[i]` says that
/// argument `i` is one value broadcast along the whole output rather than a run of values.
pub(super) fn emit(
    b: &mut FunctionBuilder<'_>,
    body: &ElementwiseExpr,
    scalar: &[bool],
    helper: impl Fn(Helper) -> FuncRef,
) {
    let entry = b.create_block();
    let looped = b.create_block();
    let exit = b.create_block();
    b.append_block_params_for_function_params(entry);
    b.append_block_param(looped, I64);
    b.switch_to_block(entry);
    let (args, out, n) = {
        let p = b.block_params(entry);
        (p[0], p[1], p[2])
    };
    let mem = MemFlagsData::new().with_notrap();
    // Argument pointers, and scalar arguments splatted once, before the loop.
    let mut bases = Vec::with_capacity(scalar.len());
    for (i, &s) in scalar.iter().enumerate() {
        let ptr = b.ins().load(I64, mem, args, (8 * i) as i32);
        bases.push(if s {
            let v = b.ins().load(F32, mem, ptr, 0);
            Err(b.ins().splat(F32X4, v))
        } else {
            Ok(ptr)
        });
    }
    let zero = b.ins().iconst(I64, 0);
    let empty = b.ins().icmp_imm_u(IntCC::Equal, n, 0);
    b.ins().brif(empty, exit, &[], looped, &[zero.into()]);

    b.switch_to_block(looped);
    let i = b.block_params(looped)[0];
    let offset = b.ins().ishl_imm_u(i, 2);
    let mut e = Emitter { b, helper, slot: None };
    // Two independent vectors per iteration, so that one's long dependency chains (the
    // polynomials) overlap the other's.
    for group in 0..UNROLL as i32 {
        let mut values: Vec<V> = Vec::with_capacity(body.nodes.len());
        for node in &body.nodes {
            let v = match *node {
                ExprNode::Arg(a) => V::F(match bases[a] {
                    Ok(ptr) => {
                        let at = e.b.ins().iadd(ptr, offset);
                        e.b.ins().load(F32X4, mem, at, 16 * group)
                    }
                    Err(splat) => splat,
                }),
                ExprNode::Const { value, dtype: DType::Bool } => V::M(e.mask_const(value.0 != 0.0)),
                ExprNode::Const { value, .. } => V::F(e.c(value.0 as f32)),
                ExprNode::Unary(u, x) => {
                    let x = e.as_float(values[x]);
                    V::F(e.unary(u, x))
                }
                // `x^2` and `x^3` by a constant exponent: products, as `kernels::binary` computes them.
                ExprNode::Binary(BinaryOp::Pow, x, y) if small_power(&body.nodes[y]).is_some() => {
                    let x = e.as_float(values[x]);
                    let sq = e.mul(x, x);
                    V::F(if small_power(&body.nodes[y]) == Some(3) { e.mul(sq, x) } else { sq })
                }
                ExprNode::Binary(op, x, y) => {
                    let (x, y) = (e.as_float(values[x]), e.as_float(values[y]));
                    e.binary(op, x, y)
                }
                ExprNode::Where(c, x, y) => {
                    let c = e.as_mask(values[c]);
                    let (x, y) = (e.as_float(values[x]), e.as_float(values[y]));
                    V::F(e.select(c, x, y))
                }
                ExprNode::Cast(DType::Bool, x) => V::M(e.as_mask(values[x])),
                ExprNode::Cast(_, x) => values[x],
            };
            values.push(v);
        }
        let result = e.as_float(*values.last().expect("bodies are not empty"));
        let at = e.b.ins().iadd(out, offset);
        e.b.ins().store(mem, result, at, 16 * group);
    }
    let b = e.b;
    let next = b.ins().iadd_imm_s(i, LANES as i64);
    let more = b.ins().icmp(IntCC::UnsignedLessThan, next, n);
    b.ins().brif(more, looped, &[next.into()], exit, &[]);

    b.switch_to_block(exit);
    b.ins().return_(&[]);
    b.seal_all_blocks();
}

struct Emitter<'a, 'b, F> {
    b: &'a mut FunctionBuilder<'b>,
    helper: F,
    /// A 32-byte stack slot for helper calls (two input vectors), made on first use.
    slot: Option<cranelift_codegen::ir::StackSlot>,
}

impl<F: Fn(Helper) -> FuncRef> Emitter<'_, '_, F> {
    fn c(&mut self, v: f32) -> Value {
        let s = self.b.ins().f32const(v);
        self.b.ins().splat(F32X4, s)
    }

    fn ci(&mut self, v: i32) -> Value {
        let s = self.b.ins().iconst(cranelift_codegen::ir::types::I32, i64::from(v as u32));
        self.b.ins().splat(I32X4, s)
    }

    fn mask_const(&mut self, truth: bool) -> Value {
        self.ci(if truth { -1 } else { 0 })
    }

    fn bits(&mut self, x: Value) -> Value {
        self.b.ins().bitcast(I32X4, lanes(), x)
    }

    fn float(&mut self, x: Value) -> Value {
        self.b.ins().bitcast(F32X4, lanes(), x)
    }

    /// Bools as floats: 1.0 or 0.0.
    fn as_float(&mut self, v: V) -> Value {
        match v {
            V::F(x) => x,
            V::M(m) => {
                let one = self.c(1.0);
                let one = self.bits(one);
                let x = self.b.ins().band(m, one);
                self.float(x)
            }
        }
    }

    /// Floats as bools: nonzero (NaN included) is true.
    fn as_mask(&mut self, v: V) -> Value {
        match v {
            V::M(m) => m,
            V::F(x) => {
                let zero = self.c(0.0);
                self.b.ins().fcmp(FloatCC::NotEqual, x, zero)
            }
        }
    }

    /// `mask ? x : y` lane by lane.
    fn select(&mut self, mask: Value, x: Value, y: Value) -> Value {
        let m = self.float(mask);
        self.b.ins().bitselect(m, x, y)
    }

    fn add(&mut self, x: Value, y: Value) -> Value {
        self.b.ins().fadd(x, y)
    }

    fn sub(&mut self, x: Value, y: Value) -> Value {
        self.b.ins().fsub(x, y)
    }

    fn mul(&mut self, x: Value, y: Value) -> Value {
        self.b.ins().fmul(x, y)
    }

    fn div(&mut self, x: Value, y: Value) -> Value {
        self.b.ins().fdiv(x, y)
    }

    /// `k + x * rest`, the step of a Horner evaluation.
    fn horner(&mut self, k: f32, x: Value, rest: Value) -> Value {
        let k = self.c(k);
        let t = self.mul(x, rest);
        self.add(k, t)
    }

    /// `|t|` with the sign of `x`.
    fn copysign(&mut self, t: Value, x: Value) -> Value {
        let (tb, xb) = (self.bits(t), self.bits(x));
        let (magnitude, sign) = (self.ci(0x7fff_ffff), self.ci(i32::MIN));
        let tb = self.b.ins().band(tb, magnitude);
        let xb = self.b.ins().band(xb, sign);
        let r = self.b.ins().bor(tb, xb);
        self.float(r)
    }

    fn is_nan(&mut self, x: Value) -> Value {
        self.b.ins().fcmp(FloatCC::Unordered, x, x)
    }

    fn lt(&mut self, x: Value, k: f32) -> Value {
        let k = self.c(k);
        self.b.ins().fcmp(FloatCC::LessThan, x, k)
    }

    /// `x < k ? k : x` (NaN stays NaN), Rust's `clamp` half; cheaper than `fmax`, which
    /// also orders the zeros and NaN.
    fn at_least(&mut self, x: Value, k: f32) -> Value {
        let kv = self.c(k);
        let below = self.b.ins().fcmp(FloatCC::LessThan, x, kv);
        self.select(below, kv, x)
    }

    /// `x > k ? k : x` (NaN stays NaN).
    fn at_most(&mut self, x: Value, k: f32) -> Value {
        let kv = self.c(k);
        let above = self.b.ins().fcmp(FloatCC::GreaterThan, x, kv);
        self.select(above, kv, x)
    }

    /// `simd::exp`, step for step: clamped into the range, `exp_core`, then the tests that
    /// give 0 below the range and infinity above it.
    fn exp(&mut self, x0: Value) -> Value {
        use crate::cpu::simd::{EXP_MAX, EXP_MIN};
        let x = self.at_least(x0, EXP_MIN);
        let x = self.at_most(x, EXP_MAX);
        let y = self.exp_core(x);
        let under = self.lt(x0, EXP_MIN);
        let zero = self.c(0.0);
        let y = self.select(under, zero, y);
        let hi = self.c(EXP_MAX);
        let over = self.b.ins().fcmp(FloatCC::GreaterThan, x0, hi);
        let inf = self.c(f32::INFINITY);
        self.select(over, inf, y)
    }

    /// `simd::exp_nonpositive` (for `x <= 0` or NaN): `exp`'s bits there, without the clamps
    /// and the overflow test.
    fn exp_nonpositive(&mut self, x: Value) -> Value {
        let y = self.exp_core(x);
        let under = self.lt(x, crate::cpu::simd::EXP_MIN);
        let zero = self.c(0.0);
        self.select(under, zero, y)
    }

    /// `simd::exp_core`, step for step, for `x` within `exp`'s range. The integer `n` is read
    /// from the bits of the rounded sum (`x log2 e + 1.5 * 2^23` holds `n` in its low
    /// mantissa bits), which equals `n as i32` over the range and avoids a saturating
    /// conversion.
    fn exp_core(&mut self, x: Value) -> Value {
        const LN2_HI: f32 = 0.693_359_4;
        const LN2_LO: f32 = -2.121_944_4e-4;
        const ROUND: f32 = 12_582_912.0;
        let log2e = self.c(std::f32::consts::LOG2_E);
        let round = self.c(ROUND);
        let n = self.mul(x, log2e);
        let shifted = self.add(n, round);
        let n = self.sub(shifted, round);
        let (hi_c, lo_c) = (self.c(LN2_HI), self.c(LN2_LO));
        let t = self.mul(n, hi_c);
        let r = self.sub(x, t);
        let t = self.mul(n, lo_c);
        let r = self.sub(r, t);
        let [c0, c1, c2, c3, c4, c5] = crate::cpu::simd::EXP_POLY;
        let mut p = self.c(c5);
        for k in [c4, c3, c2, c1, c0] {
            p = self.horner(k, r, p);
        }
        let bits = self.bits(shifted);
        let bias = self.ci(ROUND.to_bits() as i32 - 127);
        let e = self.b.ins().isub(bits, bias);
        let e = self.b.ins().ishl_imm_u(e, 23);
        let scale = self.float(e);
        self.mul(p, scale)
    }

    /// `simd::tanh`, step for step.
    fn tanh(&mut self, x: Value) -> Value {
        let a = self.b.ins().fabs(x);
        let a = self.at_most(a, 10.0);
        let two = self.c(2.0);
        let a2 = self.mul(two, a);
        // `2a <= 20`: within `exp`'s range, as `simd::tanh` relies on.
        let e = self.exp_core(a2);
        let one = self.c(1.0);
        let d = self.add(e, one);
        let q = self.div(two, d);
        let t = self.sub(one, q);
        let aa = self.mul(a, a);
        let inner = self.c(2.0 / 15.0);
        let inner = self.mul(aa, inner);
        let third = self.c(1.0 / 3.0);
        let inner = self.sub(third, inner);
        let inner = self.mul(aa, inner);
        let inner = self.sub(one, inner);
        let small = self.mul(a, inner);
        let is_small = self.lt(a, 0.0625);
        let t = self.select(is_small, small, t);
        let signed = self.copysign(t, x);
        let nan = self.is_nan(x);
        self.select(nan, x, signed)
    }

    /// `simd::erfc_nonneg`, step for step.
    fn erfc_nonneg(&mut self, a: Value) -> Value {
        let one = self.c(1.0);
        let k = self.c(0.327_591_1);
        let d = self.mul(k, a);
        let d = self.add(one, d);
        let t = self.div(one, d);
        let mut p = self.c(1.061_405_4);
        for k in [-1.453_152_1, 1.421_413_7, -0.284_496_72, 0.254_829_6] {
            p = self.horner(k, t, p);
        }
        let poly = self.mul(t, p);
        let neg = self.b.ins().fneg(a);
        let sq = self.mul(neg, a);
        let e = self.exp_nonpositive(sq);
        self.mul(poly, e)
    }

    /// `simd::erf`, step for step.
    fn erf(&mut self, x: Value) -> Value {
        let a = self.b.ins().fabs(x);
        let x2 = self.mul(x, x);
        let k = self.c(std::f32::consts::FRAC_2_SQRT_PI);
        let kx = self.mul(k, x);
        let mut s = self.c(1.0 / 42.0);
        for k in [1.0 / 10.0, 1.0 / 3.0, 1.0] {
            // `k - x2 * s`
            let kk = self.c(k);
            let t = self.mul(x2, s);
            s = self.sub(kk, t);
        }
        let series = self.mul(kx, s);
        let c = self.erfc_nonneg(a);
        let one = self.c(1.0);
        let far = self.sub(one, c);
        let far = self.copysign(far, x);
        let near = self.lt(a, 0.25);
        self.select(near, series, far)
    }

    fn call(&mut self, h: Helper, x: Value, y: Value) -> Value {
        let slot = *self.slot.get_or_insert_with(|| {
            self.b.create_sized_stack_slot(StackSlotData::new(StackSlotKind::ExplicitSlot, 48, 4))
        });
        let mem = MemFlagsData::new().with_notrap();
        let pa = self.b.ins().stack_addr(I64, slot, 0);
        let pb = self.b.ins().stack_addr(I64, slot, 16);
        let po = self.b.ins().stack_addr(I64, slot, 32);
        self.b.ins().store(mem, x, pa, 0);
        self.b.ins().store(mem, y, pb, 0);
        let f = (self.helper)(h);
        self.b.ins().call(f, &[pa, pb, po]);
        self.b.ins().load(F32X4, mem, po, 0)
    }

    fn unary(&mut self, u: UnaryOp, x: Value) -> Value {
        match u {
            UnaryOp::Neg => self.b.ins().fneg(x),
            UnaryOp::Abs => self.b.ins().fabs(x),
            UnaryOp::Exp => self.exp(x),
            UnaryOp::Sqrt => self.b.ins().sqrt(x),
            UnaryOp::Rsqrt => {
                let one = self.c(1.0);
                let s = self.b.ins().sqrt(x);
                self.div(one, s)
            }
            UnaryOp::Recip => {
                let one = self.c(1.0);
                self.div(one, x)
            }
            UnaryOp::Tanh => self.tanh(x),
            UnaryOp::Sigmoid => {
                let one = self.c(1.0);
                let n = self.b.ins().fneg(x);
                let e = self.exp(n);
                let d = self.add(one, e);
                self.div(one, d)
            }
            UnaryOp::Relu => {
                let zero = self.c(0.0);
                let keep = self.b.ins().fcmp(FloatCC::UnorderedOrGreaterThan, x, zero);
                self.select(keep, x, zero)
            }
            UnaryOp::Erf => self.erf(x),
            // No inline form (log, sin, cos, ...): call the scalar kernel four lanes at a
            // time, so every unary op compiles and gives the interpreter's bits.
            other => {
                let index = UnaryOp::ALL.iter().position(|&u| u == other).unwrap_or(UnaryOp::ALL.len());
                let code = self.c(index as f32);
                self.call(Helper::Unary, x, code)
            }
        }
    }

    fn binary(&mut self, op: BinaryOp, x: Value, y: Value) -> V {
        let cmp = |cc: FloatCC, e: &mut Self| V::M(e.b.ins().fcmp(cc, x, y));
        match op {
            BinaryOp::Add => V::F(self.add(x, y)),
            BinaryOp::Sub => V::F(self.sub(x, y)),
            BinaryOp::Mul => V::F(self.mul(x, y)),
            BinaryOp::Div => V::F(self.div(x, y)),
            BinaryOp::Pow => V::F(self.call(Helper::Pow, x, y)),
            // Cranelift's fmax/fmin give NaN when either input is NaN, as the IR says.
            BinaryOp::Max => V::F(self.b.ins().fmax(x, y)),
            BinaryOp::Min => V::F(self.b.ins().fmin(x, y)),
            BinaryOp::Eq => cmp(FloatCC::Equal, self),
            BinaryOp::Ne => cmp(FloatCC::NotEqual, self),
            BinaryOp::Lt => cmp(FloatCC::LessThan, self),
            BinaryOp::Le => cmp(FloatCC::LessThanOrEqual, self),
            BinaryOp::Gt => cmp(FloatCC::GreaterThan, self),
            BinaryOp::Ge => cmp(FloatCC::GreaterThanOrEqual, self),
        }
    }
}

/// 2 or 3 when `node` is that constant exponent.
fn small_power(node: &ExprNode) -> Option<u8> {
    match node {
        ExprNode::Const { value, .. } if value.0 == 2.0 => Some(2),
        ExprNode::Const { value, .. } if value.0 == 3.0 => Some(3),
        _ => None,
    }
}

/// Flags for bitcasts between vector types (Cranelift asks for an explicit lane order).
fn lanes() -> MemFlagsData {
    MemFlagsData::new().with_endianness(Endianness::Little)
}
