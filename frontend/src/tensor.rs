//! `Tensor`: a handle to a traced value. Every method records one op (or a few primitives)
//! in the graph of the context that made the tensor, under the current module path, and
//! returns a `Result`: a shape error names the op, both shapes and the module path.

use crate::ctx::{Shared, TraceEvent};
use crate::error::{Error, Result};
use rustral_ir::{BinaryOp, DType, Dim, F64, Literal, NodeId, Op, ReduceOp, Shape, TensorType, UnaryOp};
use std::rc::Rc;

/// A traced tensor value.
#[derive(Clone)]
pub struct Tensor {
    pub(crate) state: Shared,
    pub(crate) id: NodeId,
    ty: TensorType,
}

impl std::fmt::Debug for Tensor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Tensor(%{} {})", self.id.index(), self.ty)
    }
}

impl Tensor {
    pub(crate) fn recorded(state: &Shared, id: NodeId) -> Tensor {
        let ty = state.borrow().graph.node(id).expect("just recorded").ty.clone();
        Tensor { state: Rc::clone(state), id, ty }
    }

    /// The node this tensor is.
    pub fn node(&self) -> NodeId {
        self.id
    }

    /// Its type.
    pub fn ty(&self) -> &TensorType {
        &self.ty
    }

    /// Its element type.
    pub fn dtype(&self) -> DType {
        self.ty.dtype
    }

    /// Its dims.
    pub fn dims(&self) -> &[Dim] {
        &self.ty.shape.0
    }

    /// Its rank.
    pub fn rank(&self) -> usize {
        self.ty.rank()
    }

    /// The dim at `axis` (negative counts from the end).
    #[track_caller]
    pub fn dim(&self, axis: isize) -> Result<Dim> {
        let a = self.axis("dim", axis)?;
        Ok(self.ty.shape.0[a].clone())
    }

    /// Record `op` on `self` and `others`.
    #[track_caller]
    fn record(&self, op: Op, others: &[&Tensor]) -> Result<Tensor> {
        let caller = std::panic::Location::caller();
        let mut ids = vec![self.id];
        for t in others {
            if !Rc::ptr_eq(&t.state, &self.state) {
                let error = Error::ForeignTensor { op: op.name().into(), path: self.state.borrow().path() };
                return Err(Error::at(caller, error));
            }
            ids.push(t.id);
        }
        let mut state = self.state.borrow_mut();
        let path = state.path();
        let name = op.name();
        let id = state.graph.add(op, &ids, &path).map_err(|e| Error::at(caller, e.into()))?;
        state.locate(id, caller);
        let ty = state.graph.node(id).expect("just added").ty.clone();
        if let Some(profiler) = state.profiler.as_mut() {
            profiler(&TraceEvent { node: id, op: name, path: &path, ty: &ty });
        }
        drop(state);
        Ok(Tensor { state: Rc::clone(&self.state), id, ty })
    }

    #[track_caller]
    fn error(&self, op: &str, message: String) -> Error {
        let error = Error::Argument { op: op.into(), path: self.state.borrow().path(), message };
        Error::at(std::panic::Location::caller(), error)
    }

    /// Resolve a possibly negative axis.
    #[track_caller]
    fn axis(&self, op: &str, axis: isize) -> Result<usize> {
        let r = self.rank() as isize;
        let a = if axis < 0 { axis + r } else { axis };
        if a < 0 || a >= r.max(0) {
            return Err(self.error(op, format!("axis {axis} out of range for {}", self.ty)));
        }
        Ok(a as usize)
    }

    /// A scalar constant of this tensor's dtype, recorded under the current path.
    #[track_caller]
    fn scalar_like(&self, value: f64) -> Result<Tensor> {
        let mut state = self.state.borrow_mut();
        let path = state.path();
        let ty = TensorType::new(self.dtype(), Shape::scalar());
        let constant = Op::Constant { value: Literal::Splat(F64(value)) };
        let caller = std::panic::Location::caller();
        let id = state.graph.declare(constant, ty, &path).map_err(|e| Error::at(caller, e.into()))?;
        state.locate(id, caller);
        drop(state);
        Ok(Tensor::recorded(&self.state, id))
    }

    #[track_caller]
    fn unary(&self, u: UnaryOp) -> Result<Tensor> {
        self.record(Op::Unary(u), &[])
    }

    #[track_caller]
    fn binary(&self, b: BinaryOp, other: &Tensor) -> Result<Tensor> {
        self.record(Op::Binary(b), &[other])
    }
}

/// Elementwise unary methods, one per IR unary op.
macro_rules! unary_methods {
    ($($(#[$doc:meta])* $name:ident => $op:ident;)*) => {
        impl Tensor {
            $($(#[$doc])* #[track_caller] pub fn $name(&self) -> Result<Tensor> { self.unary(UnaryOp::$op) })*
        }
    };
}

unary_methods! {
    /// `-x`.
    neg => Neg;
    /// `|x|`.
    abs => Abs;
    /// `e^x`.
    exp => Exp;
    /// Natural log.
    log => Log;
    /// Square root.
    sqrt => Sqrt;
    /// `1 / sqrt(x)`.
    rsqrt => Rsqrt;
    /// `1 / x`.
    recip => Recip;
    /// Hyperbolic tangent.
    tanh => Tanh;
    /// Logistic sigmoid.
    sigmoid => Sigmoid;
    /// `max(x, 0)`.
    relu => Relu;
    /// Error function.
    erf => Erf;
    /// Sine.
    sin => Sin;
    /// Cosine.
    cos => Cos;
    /// `log(1 + e^x)`, a smooth ReLU.
    softplus => Softplus;
}

/// Elementwise binary methods (numpy broadcasting), one per IR binary op.
macro_rules! binary_methods {
    ($($(#[$doc:meta])* $name:ident => $op:ident;)*) => {
        impl Tensor {
            $($(#[$doc])* #[track_caller] pub fn $name(&self, other: &Tensor) -> Result<Tensor> { self.binary(BinaryOp::$op, other) })*
        }
    };
}

binary_methods! {
    /// `a + b`.
    add => Add;
    /// `a - b`.
    sub => Sub;
    /// `a * b`.
    mul => Mul;
    /// `a / b`.
    div => Div;
    /// `a ^ b`.
    pow => Pow;
    /// Elementwise maximum.
    maximum => Max;
    /// Elementwise minimum.
    minimum => Min;
    /// `a == b` (bool).
    eq => Eq;
    /// `a != b` (bool).
    ne => Ne;
    /// `a < b` (bool).
    lt => Lt;
    /// `a <= b` (bool).
    le => Le;
    /// `a > b` (bool).
    gt => Gt;
    /// `a >= b` (bool).
    ge => Ge;
}

impl Tensor {
    /// `x + c`.
    #[track_caller]
    pub fn add_scalar(&self, c: f64) -> Result<Tensor> {
        self.add(&self.scalar_like(c)?)
    }

    /// `x * c`.
    #[track_caller]
    pub fn mul_scalar(&self, c: f64) -> Result<Tensor> {
        self.mul(&self.scalar_like(c)?)
    }

    /// `x / c`.
    #[track_caller]
    pub fn div_scalar(&self, c: f64) -> Result<Tensor> {
        self.div(&self.scalar_like(c)?)
    }

    /// `x ^ c`.
    #[track_caller]
    pub fn pow_scalar(&self, c: f64) -> Result<Tensor> {
        self.pow(&self.scalar_like(c)?)
    }

    /// `x * x`.
    #[track_caller]
    pub fn square(&self) -> Result<Tensor> {
        self.mul(self)
    }

    /// `self ? on_true : on_false` (self is bool), broadcasting all three.
    #[track_caller]
    pub fn select(&self, on_true: &Tensor, on_false: &Tensor) -> Result<Tensor> {
        self.record(Op::Where, &[on_true, on_false])
    }

    /// Convert to `dtype`.
    #[track_caller]
    pub fn cast(&self, dtype: DType) -> Result<Tensor> {
        if dtype == self.dtype() {
            return Ok(self.clone());
        }
        self.record(Op::Cast { to: dtype }, &[])
    }

    #[track_caller]
    fn reduce(&self, op: ReduceOp, axes: &[isize], keepdim: bool) -> Result<Tensor> {
        // A loop, not a closure: the axis error must keep the model's line (`#[track_caller]`).
        let mut resolved = Vec::with_capacity(axes.len());
        for &a in axes {
            resolved.push(self.axis(op.name(), a)?);
        }
        resolved.sort_unstable();
        resolved.dedup();
        self.record(Op::Reduce { op, axes: resolved, keepdim }, &[])
    }

    /// Sum over `axes` (negative axes count from the end).
    #[track_caller]
    pub fn sum(&self, axes: &[isize], keepdim: bool) -> Result<Tensor> {
        self.reduce(ReduceOp::Sum, axes, keepdim)
    }

    /// Mean over `axes`.
    #[track_caller]
    pub fn mean(&self, axes: &[isize], keepdim: bool) -> Result<Tensor> {
        self.reduce(ReduceOp::Mean, axes, keepdim)
    }

    /// Maximum over `axes`.
    #[track_caller]
    pub fn max(&self, axes: &[isize], keepdim: bool) -> Result<Tensor> {
        self.reduce(ReduceOp::Max, axes, keepdim)
    }

    /// Minimum over `axes`.
    #[track_caller]
    pub fn min(&self, axes: &[isize], keepdim: bool) -> Result<Tensor> {
        self.reduce(ReduceOp::Min, axes, keepdim)
    }

    /// Batched matrix product (batch dims broadcast).
    #[track_caller]
    pub fn matmul(&self, other: &Tensor) -> Result<Tensor> {
        self.record(Op::MatMul, &[other])
    }

    /// `self[..., k] @ dequantize(w)^T` for `w: u8[n, row_bytes]` in `format` (`Op::QuantMatMul`).
    #[track_caller]
    pub fn quant_matmul(&self, w: &Tensor, format: rustral_ir::QuantFormat) -> Result<Tensor> {
        self.record(Op::QuantMatMul { format }, &[w])
    }

    /// `u8` blocks `[..., row_bytes]` to their f32 weights (`Op::Dequantize`).
    #[track_caller]
    pub fn dequantize(&self, format: rustral_ir::QuantFormat) -> Result<Tensor> {
        self.record(Op::Dequantize { format }, &[])
    }

    /// Same elements, new shape (element counts must agree, symbolically).
    #[track_caller]
    pub fn reshape(&self, dims: &[Dim]) -> Result<Tensor> {
        self.record(Op::Reshape { shape: Shape(dims.to_vec()) }, &[])
    }

    /// Reorder axes: `out.dims[i] = in.dims[perm[i]]`.
    #[track_caller]
    pub fn permute(&self, perm: &[usize]) -> Result<Tensor> {
        self.record(Op::Permute { perm: perm.to_vec() }, &[])
    }

    /// Swap two axes (negative axes count from the end).
    #[track_caller]
    pub fn transpose(&self, d0: isize, d1: isize) -> Result<Tensor> {
        let (a, b) = (self.axis("transpose", d0)?, self.axis("transpose", d1)?);
        let mut perm: Vec<usize> = (0..self.rank()).collect();
        perm.swap(a, b);
        self.permute(&perm)
    }

    /// Broadcast to `dims` by numpy's rules.
    #[track_caller]
    pub fn broadcast_to(&self, dims: &[Dim]) -> Result<Tensor> {
        self.record(Op::BroadcastTo { shape: Shape(dims.to_vec()) }, &[])
    }

    /// Elements `start..end` along `axis`.
    #[track_caller]
    pub fn slice(&self, axis: isize, start: usize, end: impl Into<Dim>) -> Result<Tensor> {
        let axis = self.axis("slice", axis)?;
        self.record(Op::Slice { axis, start, end: end.into() }, &[])
    }

    /// Join `parts` along `axis`.
    #[track_caller]
    pub fn concat(parts: &[&Tensor], axis: isize) -> Result<Tensor> {
        let caller = std::panic::Location::caller();
        let (first, rest) = parts.split_first().ok_or_else(|| {
            let error = Error::Argument {
                op: "concat".into(),
                path: String::new(),
                message: "needs at least one tensor".into(),
            };
            Error::at(caller, error)
        })?;
        let axis = first.axis("concat", axis)?;
        first.record(Op::Concat { axis }, rest)
    }

    /// `take(self, indices, axis)`: rows of a table (embedding lookup with `axis = 0`).
    #[track_caller]
    pub fn gather(&self, indices: &Tensor, axis: isize) -> Result<Tensor> {
        let axis = self.axis("gather", axis)?;
        self.record(Op::Gather { axis }, &[indices])
    }

    /// `self` with `update` written at `position..` along `axis` (`position` an integer
    /// scalar tensor): a KV cache growing by a step.
    #[track_caller]
    pub fn update_slice(&self, update: &Tensor, position: &Tensor, axis: isize) -> Result<Tensor> {
        let axis = self.axis("update_slice", axis)?;
        self.record(Op::UpdateSlice { axis }, &[update, position])
    }

    /// Attention of queries `self: [b, h, lq, d]` starting at `position` over a cache
    /// `k: [b, kvh, lk, d]`, `v: [b, kvh, lk, dv]` (`Op::CachedAttention`).
    #[track_caller]
    pub fn cached_attention(&self, k: &Tensor, v: &Tensor, position: &Tensor, scale: f64) -> Result<Tensor> {
        self.record(Op::CachedAttention { scale: rustral_ir::F64(scale) }, &[k, v, position])
    }

    /// 2-D convolution of `self: [n, c, h, w]` with `w: [o, c / groups, kh, kw]` and an
    /// optional `bias: [o]` (`Op::Conv2d`; [`Window`] gives stride, padding and dilation).
    #[track_caller]
    pub fn conv2d(&self, w: &Tensor, bias: Option<&Tensor>, window: Window, groups: usize) -> Result<Tensor> {
        let op = Op::Conv2d {
            stride: window.stride.to_vec(),
            padding: window.padding.to_vec(),
            dilation: window.dilation.to_vec(),
            groups,
        };
        match bias {
            Some(b) => self.record(op, &[w, b]),
            None => self.record(op, &[w]),
        }
    }

    /// The largest element of each `kernel` window of `self: [n, c, h, w]` (`Op::MaxPool2d`;
    /// the window's dilation must be 1).
    #[track_caller]
    pub fn max_pool2d(&self, kernel: [usize; 2], window: Window) -> Result<Tensor> {
        self.pool(true, kernel, window)
    }

    /// The mean of each `kernel` window, zero padding counted (`Op::AvgPool2d`).
    #[track_caller]
    pub fn avg_pool2d(&self, kernel: [usize; 2], window: Window) -> Result<Tensor> {
        self.pool(false, kernel, window)
    }

    /// Max (`max`) or average pooling; a pooling has no dilation.
    #[track_caller]
    fn pool(&self, max: bool, kernel: [usize; 2], window: Window) -> Result<Tensor> {
        let (kernel, stride, padding) = (kernel.to_vec(), window.stride.to_vec(), window.padding.to_vec());
        let op =
            if max { Op::MaxPool2d { kernel, stride, padding } } else { Op::AvgPool2d { kernel, stride, padding } };
        if window.dilation != [1, 1] {
            return Err(self.error(op.name(), format!("pooling has no dilation, found {:?}", window.dilation)));
        }
        self.record(op, &[])
    }

    /// The windows of `self: [n, c, h, w]` as columns `[n, c * kh * kw, blocks]` (im2col,
    /// `Op::Unfold`).
    #[track_caller]
    pub fn unfold(&self, kernel: [usize; 2], window: Window) -> Result<Tensor> {
        let (stride, padding, dilation) = (window.stride.to_vec(), window.padding.to_vec(), window.dilation.to_vec());
        self.record(Op::Unfold { kernel: kernel.to_vec(), stride, padding, dilation }, &[])
    }

    /// Columns `[n, c * kh * kw, blocks]` summed back into `[n, c, size[0], size[1]]` (col2im,
    /// `Op::Fold`, the adjoint of [`Tensor::unfold`]).
    #[track_caller]
    pub fn fold(&self, size: [usize; 2], kernel: [usize; 2], window: Window) -> Result<Tensor> {
        let (stride, padding, dilation) = (window.stride.to_vec(), window.padding.to_vec(), window.dilation.to_vec());
        self.record(Op::Fold { size: size.to_vec(), kernel: kernel.to_vec(), stride, padding, dilation }, &[])
    }

    /// Softmax along `axis`, traced as primitives: `exp(x - max) / sum(exp(x - max))`.
    #[track_caller]
    pub fn softmax(&self, axis: isize) -> Result<Tensor> {
        let shifted = self.sub(&self.max(&[axis], true)?)?;
        let e = shifted.exp()?;
        e.div(&e.sum(&[axis], true)?)
    }

    /// Log-softmax along `axis`: `(x - max) - log(sum(exp(x - max)))`.
    #[track_caller]
    pub fn log_softmax(&self, axis: isize) -> Result<Tensor> {
        let shifted = self.sub(&self.max(&[axis], true)?)?;
        shifted.sub(&shifted.exp()?.sum(&[axis], true)?.log()?)
    }
}

/// `&a + &b` and friends trace the same ops as the methods.
macro_rules! operator {
    ($trait:ident, $method:ident, $call:ident) => {
        impl std::ops::$trait<&Tensor> for &Tensor {
            type Output = Result<Tensor>;
            #[track_caller]
            fn $method(self, rhs: &Tensor) -> Result<Tensor> {
                self.$call(rhs)
            }
        }
    };
}

operator!(Add, add, add);
operator!(Sub, sub, sub);
operator!(Mul, mul, mul);
operator!(Div, div, div);

impl std::ops::Neg for &Tensor {
    type Output = Result<Tensor>;
    #[track_caller]
    fn neg(self) -> Result<Tensor> {
        Tensor::neg(self)
    }
}

/// Where sliding windows step over the spatial axes (height, width): stride, zero padding on
/// both sides, and the step between taps. `Window::default()` is stride 1, no padding,
/// dilation 1.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Window {
    /// Step between windows.
    pub stride: [usize; 2],
    /// Padding on both sides.
    pub padding: [usize; 2],
    /// Step between the taps of a window.
    pub dilation: [usize; 2],
}

impl Default for Window {
    fn default() -> Window {
        Window { stride: [1, 1], padding: [0, 0], dilation: [1, 1] }
    }
}

impl Window {
    /// The same stride along both axes.
    pub fn stride(self, s: usize) -> Window {
        Window { stride: [s, s], ..self }
    }

    /// The same padding along both axes.
    pub fn padding(self, p: usize) -> Window {
        Window { padding: [p, p], ..self }
    }

    /// The same dilation along both axes.
    pub fn dilation(self, d: usize) -> Window {
        Window { dilation: [d, d], ..self }
    }
}
