//! Sliding windows over the two spatial axes of `[batch, channels, height, width]` (NCHW)
//! tensors: the geometry that `conv2d`, the poolings, `unfold` and `fold` share, and their
//! typing rules. One [`Window2d`] says where every window reads, so the reference, every
//! target's kernel and the gradients compute the same positions.
//!
//! Spatial dims (channels, height, width) are static: an output size is a function of the
//! input size that a symbolic dim cannot spell. The batch may be symbolic.

use super::Op;
use crate::dtype::DType;
use crate::infer::Reason;
use crate::shape::{Dim, Shape, TensorType};

/// Where the windows of a 2-D sliding-window op read, per spatial axis (height, width): output
/// position `y` reads input rows `y * stride - padding + i * dilation` for `i` in
/// `0..kernel`; rows outside the input are padding (zero, or never chosen by a max).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Window2d {
    /// Window size.
    pub kernel: [usize; 2],
    /// Step between windows.
    pub stride: [usize; 2],
    /// Implicit padding on both sides.
    pub padding: [usize; 2],
    /// Step between the taps of one window.
    pub dilation: [usize; 2],
}

impl Window2d {
    /// The output size along spatial axis `a` (0 height, 1 width) for an input of `size`, or
    /// why there is none (a window larger than the padded input).
    pub fn out_len(&self, a: usize, size: usize) -> Result<usize, Reason> {
        let span = self.dilation[a] * (self.kernel[a] - 1) + 1;
        let padded = size + 2 * self.padding[a];
        if padded < span {
            return Err(format!(
                "a window spanning {span} does not fit an input of {size} padded by {} on each side",
                self.padding[a]
            ));
        }
        Ok((padded - span) / self.stride[a] + 1)
    }

    /// The input index that tap `i` of output position `o` reads along axis `a`, None inside
    /// the padding.
    pub fn source(&self, a: usize, o: usize, i: usize, size: usize) -> Option<usize> {
        (o * self.stride[a] + i * self.dilation[a]).checked_sub(self.padding[a]).filter(|&s| s < size)
    }

    /// The taps of output position `o` along axis `a` that read inside an input of `size`
    /// (those [`Window2d::source`] gives Some for), a range since sources grow with the tap.
    pub fn taps_inside(&self, a: usize, o: usize, size: usize) -> std::ops::Range<usize> {
        let (start, d, p) = (o * self.stride[a], self.dilation[a], self.padding[a]);
        // start + i * d - p in [0, size)  <=>  i * d in [p - start, p + size - start)
        let lo = p.saturating_sub(start).div_ceil(d);
        let hi = (p + size).saturating_sub(start).div_ceil(d).min(self.kernel[a]);
        lo.min(hi)..hi
    }

    /// The output positions (of `out_len`) along axis `a` whose tap `tap` reads inside an
    /// input of `size`, as a range (sources grow with the position).
    pub fn outputs_inside(&self, a: usize, tap: usize, size: usize, out_len: usize) -> std::ops::Range<usize> {
        let (s, offset, p) = (self.stride[a], tap * self.dilation[a], self.padding[a]);
        // o * s + offset - p in [0, size)  <=>  o * s in [p - offset, p + size - offset)
        let lo = p.saturating_sub(offset).div_ceil(s);
        let hi = (p + size).saturating_sub(offset).div_ceil(s).min(out_len);
        lo.min(hi)..hi
    }

    /// Taps per window (`kernel[0] * kernel[1]`).
    pub fn taps(&self) -> usize {
        self.kernel[0] * self.kernel[1]
    }
}

impl Op {
    /// The window geometry of a sliding-window op; `kernel` is the weight's spatial size for
    /// `conv2d` (whose kernel is its weight's shape). None for other ops, or attribute lists
    /// that are not two values each.
    pub fn window2d(&self, kernel: Option<[usize; 2]>) -> Option<Window2d> {
        let pair = |v: &[usize]| <[usize; 2]>::try_from(v).ok();
        match self {
            Op::Conv2d { stride, padding, dilation, .. } | Op::Conv2dEpilogue { stride, padding, dilation, .. } => {
                Some(Window2d {
                    kernel: kernel?,
                    stride: pair(stride)?,
                    padding: pair(padding)?,
                    dilation: pair(dilation)?,
                })
            }
            Op::MaxPool2d { kernel, stride, padding } | Op::AvgPool2d { kernel, stride, padding } => Some(Window2d {
                kernel: pair(kernel)?,
                stride: pair(stride)?,
                padding: pair(padding)?,
                dilation: [1, 1],
            }),
            Op::Unfold { kernel, stride, padding, dilation } | Op::Fold { kernel, stride, padding, dilation, .. } => {
                Some(Window2d {
                    kernel: pair(kernel)?,
                    stride: pair(stride)?,
                    padding: pair(padding)?,
                    dilation: pair(dilation)?,
                })
            }
            _ => None,
        }
    }
}

impl Op {
    /// The convolution a `conv2d_epilogue` applies its activation to (a `conv2d` is its own);
    /// None for other ops.
    pub fn conv2d_part(&self) -> Option<Op> {
        match self {
            Op::Conv2d { .. } => Some(self.clone()),
            Op::Conv2dEpilogue { stride, padding, dilation, groups, .. } => Some(Op::Conv2d {
                stride: stride.clone(),
                padding: padding.clone(),
                dilation: dilation.clone(),
                groups: *groups,
            }),
            _ => None,
        }
    }
}

/// The largest kernel, stride, padding, dilation or output size an attribute may give: far
/// beyond any real window, and small enough that every product and sum the window's geometry
/// forms of them (with a dim, which fits in 2^63 bytes) stays inside a `usize`.
pub const MAX_WINDOW: usize = 1 << 24;

/// Two values per list, each at least `min` (kernels, strides and dilations are positive)
/// and at most [`MAX_WINDOW`].
fn pairs(lists: &[(&str, &[usize], usize)]) -> Result<(), Reason> {
    for (name, v, min) in lists {
        if v.len() != 2 {
            return Err(format!("{name} needs 2 values (height, width), found {v:?}"));
        }
        if v.iter().any(|x| x < min || *x > MAX_WINDOW) {
            return Err(format!("{name} values must be {min} to {MAX_WINDOW}, found {v:?}"));
        }
    }
    Ok(())
}

/// `a * b`, or why not (a product of dims past a `usize`).
fn times(a: usize, b: usize, what: &str) -> Result<usize, Reason> {
    a.checked_mul(b).ok_or_else(|| format!("{what} ({a} * {b}) overflows"))
}

/// The static spatial dims of a rank-4 NCHW float tensor: `[channels, height, width]`.
fn nchw(name: &str, x: &TensorType) -> Result<[usize; 3], Reason> {
    if !x.dtype.is_float() {
        return Err(format!("{name} needs floats, found {}", x.dtype));
    }
    let [_, c, h, w] = &x.shape.0[..] else {
        return Err(format!("{name} takes [batch, channels, height, width], found {}", x.shape));
    };
    match (c, h, w) {
        (Dim::Static(c), Dim::Static(h), Dim::Static(w)) => Ok([*c, *h, *w]),
        _ => Err(format!("{name} needs static channels, height and width, found {}", x.shape)),
    }
}

fn out_hw(op: &Op, win: &Window2d, h: usize, w: usize) -> Result<[usize; 2], Reason> {
    let oh = win.out_len(0, h).map_err(|e| format!("{} height: {e}", op.name()))?;
    let ow = win.out_len(1, w).map_err(|e| format!("{} width: {e}", op.name()))?;
    Ok([oh, ow])
}

fn typed(dtype: DType, dims: Vec<Dim>) -> TensorType {
    TensorType { dtype, shape: Shape(dims) }
}

/// `conv2d`: `x[n, c, h, w]`, `w[o, c / groups, kh, kw]`, optional `bias[o]`.
pub(crate) fn conv2d(op: &Op, groups: usize, args: &[&TensorType]) -> Result<TensorType, Reason> {
    let (x, wt) = (args[0], args[1]);
    let (Op::Conv2d { stride, padding, dilation, .. } | Op::Conv2dEpilogue { stride, padding, dilation, .. }) = op
    else {
        unreachable!("conv2d's rule")
    };
    pairs(&[("stride", stride, 1), ("padding", padding, 0), ("dilation", dilation, 1)])?;
    let [c, h, w] = nchw("conv2d", x)?;
    if wt.dtype != x.dtype {
        return Err(format!("operands must share a dtype, found {} and {}", x.dtype, wt.dtype));
    }
    let static_dims: Option<Vec<usize>> = wt.shape.0.iter().map(Dim::as_static).collect();
    let Some([o, cg, kh, kw]) = static_dims.as_deref().and_then(|d| <[usize; 4]>::try_from(d).ok()) else {
        return Err(format!("the weight must be a static [out, in / groups, kh, kw], found {}", wt.shape));
    };
    if groups == 0 || groups > c || c % groups != 0 || o % groups != 0 {
        return Err(format!("groups={groups} must divide the {c} input and {o} output channels"));
    }
    if times(cg, groups, "channels per group times groups")? != c {
        return Err(format!("the weight reads {cg} channels per group, but the input has {c} in {groups} group(s)"));
    }
    if kh == 0 || kw == 0 || kh > MAX_WINDOW || kw > MAX_WINDOW {
        return Err(format!("the kernel must be 1 to {MAX_WINDOW} a side, found {kh}x{kw}"));
    }
    if let Some(bias) = args.get(2)
        && (bias.dtype != x.dtype || bias.shape.0 != [Dim::Static(o)])
    {
        return Err(format!("the bias must be {}[{o}], found {bias}", x.dtype));
    }
    let win = op.window2d(Some([kh, kw])).expect("pairs checked");
    let [oh, ow] = out_hw(op, &win, h, w)?;
    Ok(typed(x.dtype, vec![x.shape.0[0].clone(), Dim::Static(o), Dim::Static(oh), Dim::Static(ow)]))
}

/// `max_pool2d`, `avg_pool2d`: the channels kept, the windows pooled.
pub(crate) fn pool2d(op: &Op, x: &TensorType) -> Result<TensorType, Reason> {
    let (Op::MaxPool2d { kernel, stride, padding } | Op::AvgPool2d { kernel, stride, padding }) = op else {
        unreachable!("pool2d's rule")
    };
    pairs(&[("kernel", kernel, 1), ("stride", stride, 1), ("padding", padding, 0)])?;
    if padding.iter().zip(kernel).any(|(p, k)| 2 * p > *k) {
        return Err(format!("padding {padding:?} must be at most half the kernel {kernel:?}"));
    }
    let [c, h, w] = nchw(op.name(), x)?;
    // With padding at most the input and at most half the kernel, a window is at most three
    // times the input: its work is bounded by the input's size.
    if padding[0] > h || padding[1] > w {
        return Err(format!("padding {padding:?} is more than the {h}x{w} input"));
    }
    let win = op.window2d(None).expect("pairs checked");
    let [oh, ow] = out_hw(op, &win, h, w)?;
    Ok(typed(x.dtype, vec![x.shape.0[0].clone(), Dim::Static(c), Dim::Static(oh), Dim::Static(ow)]))
}

/// `unfold`: `[n, c, h, w]` to `[n, c * kh * kw, oh * ow]`.
pub(crate) fn unfold(op: &Op, x: &TensorType) -> Result<TensorType, Reason> {
    let Op::Unfold { kernel, stride, padding, dilation } = op else { unreachable!("unfold's rule") };
    pairs(&[("kernel", kernel, 1), ("stride", stride, 1), ("padding", padding, 0), ("dilation", dilation, 1)])?;
    let [c, h, w] = nchw("unfold", x)?;
    let win = op.window2d(None).expect("pairs checked");
    let [oh, ow] = out_hw(op, &win, h, w)?;
    let rows = times(c, win.taps(), "channels times taps")?;
    Ok(typed(x.dtype, vec![x.shape.0[0].clone(), Dim::Static(rows), Dim::Static(times(oh, ow, "blocks")?)]))
}

/// `fold`: `[n, c * kh * kw, oh * ow]` to `[n, c, size[0], size[1]]`.
pub(crate) fn fold(op: &Op, x: &TensorType) -> Result<TensorType, Reason> {
    let Op::Fold { size, kernel, stride, padding, dilation } = op else { unreachable!("fold's rule") };
    pairs(&[
        ("size", size, 1),
        ("kernel", kernel, 1),
        ("stride", stride, 1),
        ("padding", padding, 0),
        ("dilation", dilation, 1),
    ])?;
    if !x.dtype.is_float() {
        return Err(format!("fold needs floats, found {}", x.dtype));
    }
    let win = op.window2d(None).expect("pairs checked");
    let [oh, ow] = out_hw(op, &win, size[0], size[1])?;
    let [n, ck, l] = &x.shape.0[..] else {
        return Err(format!("fold takes [batch, channels * kh * kw, blocks], found {}", x.shape));
    };
    let (Dim::Static(ck), Dim::Static(l)) = (ck, l) else {
        return Err(format!("fold needs static channels and blocks, found {}", x.shape));
    };
    if ck % win.taps() != 0 || *l != times(oh, ow, "blocks")? {
        return Err(format!(
            "fold of {}x{} windows into {}x{} needs [batch, c * {}, {}], found {}",
            win.kernel[0],
            win.kernel[1],
            size[0],
            size[1],
            win.taps(),
            oh * ow,
            x.shape
        ));
    }
    Ok(typed(x.dtype, vec![n.clone(), Dim::Static(ck / win.taps()), Dim::Static(size[0]), Dim::Static(size[1])]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_sizes_follow_pytorch() {
        // torch.nn.Conv2d(3, 8, 7, stride=2, padding=3) on 224x224 gives 112x112.
        let w = Window2d { kernel: [7, 7], stride: [2, 2], padding: [3, 3], dilation: [1, 1] };
        assert_eq!(w.out_len(0, 224), Ok(112));
        // MaxPool2d(3, 2, 1) on 112 gives 56; a dilated 3x3 (span 5) on 5 gives 1.
        let p = Window2d { kernel: [3, 3], stride: [2, 2], padding: [1, 1], dilation: [1, 1] };
        assert_eq!(p.out_len(1, 112), Ok(56));
        let d = Window2d { kernel: [3, 3], stride: [1, 1], padding: [0, 0], dilation: [2, 2] };
        assert_eq!(d.out_len(0, 5), Ok(1));
        assert!(d.out_len(0, 4).is_err());
        assert_eq!(p.source(0, 0, 0, 112), None, "the first tap of the first window is padding");
        assert_eq!(p.source(0, 0, 1, 112), Some(0));
        assert_eq!(p.source(0, 55, 2, 112), Some(111), "55 * 2 + 2 - 1");
    }

    /// Attributes whose geometry would overflow, and windows mostly outside a tiny input, are
    /// type errors, not panics or wrapped sizes.
    #[test]
    fn hostile_attributes_are_type_errors() {
        use crate::shape::{Shape, TensorType};
        let ty = |dims: &[usize]| TensorType::new(DType::F32, Shape::of(dims));
        let x = ty(&[1, 4, 2]);
        let fold = Op::Fold {
            size: vec![1, 2],
            kernel: vec![1 << 63, 2],
            stride: vec![1, 1],
            padding: vec![1 << 62, 0],
            dilation: vec![1, 1],
        };
        assert!(crate::infer(&fold, &[&x], &x).unwrap_err().contains("kernel values must be"));
        let img = ty(&[1, 1, 1, 1]);
        let pool =
            Op::MaxPool2d { kernel: vec![200_000, 200_000], stride: vec![1, 1], padding: vec![100_000, 100_000] };
        assert!(crate::infer(&pool, &[&img], &img).unwrap_err().contains("more than the 1x1 input"));
        let wide = Op::AvgPool2d { kernel: vec![2, 2], stride: vec![1, 1], padding: vec![1 << 63, 0] };
        assert!(crate::infer(&wide, &[&img], &img).is_err());
        let conv = Op::Conv2d { stride: vec![1, 1], padding: vec![0, 0], dilation: vec![1 << 40, 1], groups: 1 };
        let w = ty(&[1, 1, 2, 1]);
        assert!(crate::infer(&conv, &[&img, &w], &img).is_err());
    }

    /// The ranges are exactly the taps and positions `source` finds inside the input.
    #[test]
    fn inside_ranges_agree_with_source() {
        for kernel in 1..5 {
            for stride in 1..4 {
                for padding in 0..4 {
                    for dilation in 1..3 {
                        let w = Window2d {
                            kernel: [kernel; 2],
                            stride: [stride; 2],
                            padding: [padding; 2],
                            dilation: [dilation; 2],
                        };
                        for size in 1..9 {
                            let Ok(out) = w.out_len(0, size) else { continue };
                            for o in 0..out {
                                let want: Vec<usize> =
                                    (0..kernel).filter(|&t| w.source(0, o, t, size).is_some()).collect();
                                assert_eq!(
                                    w.taps_inside(0, o, size).collect::<Vec<_>>(),
                                    want,
                                    "{w:?} size {size} o {o}"
                                );
                            }
                            for t in 0..kernel {
                                let want: Vec<usize> =
                                    (0..out).filter(|&o| w.source(0, o, t, size).is_some()).collect();
                                assert_eq!(
                                    w.outputs_inside(0, t, size, out).collect::<Vec<_>>(),
                                    want,
                                    "{w:?} size {size} t {t}"
                                );
                            }
                        }
                    }
                }
            }
        }
    }
}
