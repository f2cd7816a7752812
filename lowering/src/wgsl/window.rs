//! Sliding-window kernels over NCHW tensors, one invocation per output element: direct
//! convolution (every tap of every input channel of the output's group), max and average
//! pooling, and the im2col/col2im pair (`unfold`, `fold`) that gradients use. Window positions
//! follow `rustral_ir::Window2d`; spatial dims are static, the batch may be symbolic.

use super::emit::{Ctx, Head, Shader};
use super::helpers::{self, Helper};
use super::{Count, Generated, Operand};
use rustral_ir::{Op, Window2d};

const WORKGROUP: u32 = 256;

/// The static dims of a shape after the (possibly symbolic) batch.
fn statics(o: &Operand) -> Vec<usize> {
    o.shape[1..].iter().map(|d| d.as_static().unwrap_or(0)).collect()
}

/// Generate the kernel of a sliding-window op.
pub(crate) fn window(
    ctx: &Ctx,
    head: &Head,
    op: &Op,
    operands: &[Operand],
    out: &Operand,
) -> Result<Generated, String> {
    let kernel = match op {
        Op::Conv2d { .. } | Op::Conv2dEpilogue { .. } => {
            let w = statics(&operands[1]);
            Some([w[1], w[2]])
        }
        _ => None,
    };
    let win = op.window2d(kernel).ok_or_else(|| format!("{} has no window geometry", op.name()))?;
    let names: Vec<String> = match op {
        Op::Conv2d { .. } | Op::Conv2dEpilogue { .. } => {
            ["x", "w", "bias"].iter().take(operands.len()).map(|s| s.to_string()).collect()
        }
        _ => vec!["x".into()],
    };
    let inputs: Vec<(&str, &Operand)> = names.iter().map(String::as_str).zip(operands).collect();
    let mut sh = Shader::new(head, &inputs, out, WORKGROUP);
    sh.line(1, &format!("let i = group * {WORKGROUP}u + lid;"));
    sh.line(1, &format!("if (i >= {}) {{ return; }}", ctx.prod(&out.shape)));
    let o = statics(out);
    if let [c, h, w] = o[..] {
        // An NCHW output's multi-index: n, then its three static axes.
        sh.line(1, &format!("let a2 = i % {w}u;"));
        sh.line(1, &format!("let a1 = (i / {w}u) % {h}u;"));
        sh.line(1, &format!("let a0 = (i / {}u) % {c}u;", w * h));
        sh.line(1, &format!("let n = i / {}u;", w * h * c));
    }
    let value = match op {
        Op::Conv2d { groups, .. } => conv2d(&mut sh, &win, *groups, operands, &o),
        Op::Conv2dEpilogue { groups, activation, .. } => {
            let v = conv2d(&mut sh, &win, *groups, operands, &o);
            let v = helpers::round(&mut sh, out.dtype, &v);
            helpers::activation(&mut sh, *activation, &v)
        }
        Op::MaxPool2d { .. } | Op::AvgPool2d { .. } => {
            pool(&mut sh, &win, matches!(op, Op::MaxPool2d { .. }), operands)
        }
        Op::Unfold { .. } => unfold(&mut sh, &win, operands, &o),
        Op::Fold { .. } => fold(&mut sh, &win, operands, &o),
        other => return Err(format!("{} is not a sliding-window op", other.name())),
    };
    let v = helpers::round(&mut sh, out.dtype, &value);
    let store = sh.store("i", &v);
    sh.line(1, &store);
    let (status, workgroup_bytes) = (sh.status.clone(), sh.workgroup_bytes());
    Ok(Generated {
        source: sh.finish(ctx),
        workgroup_size: WORKGROUP,
        workgroups: Count::ceil_div(&out.shape, u64::from(WORKGROUP)),
        names,
        status,
        workgroup_bytes,
    })
}

/// Lines opening the loops over window taps `ta`, `tb` of output position (`py`, `px`),
/// binding the input row and column `sy`, `sx` and skipping taps in the padding; the caller
/// closes the two loops.
fn taps(sh: &mut Shader, win: &Window2d, at: usize, py: &str, px: &str, h: usize, w: usize) {
    for (axis, (t, p, s, len)) in [("ta", py, "sy", h), ("tb", px, "sx", w)].into_iter().enumerate() {
        let indent = at + axis;
        sh.line(indent, &format!("for (var {t} = 0u; {t} < {}u; {t} = {t} + 1u) {{", win.kernel[axis]));
        sh.line(
            indent + 1,
            &format!(
                "let {s} = i32({p} * {}u + {t} * {}u) - {};",
                win.stride[axis], win.dilation[axis], win.padding[axis]
            ),
        );
        sh.line(indent + 1, &format!("if ({s} < 0 || {s} >= {len}) {{ continue; }}"));
    }
}

fn conv2d(sh: &mut Shader, win: &Window2d, groups: usize, ops: &[Operand], o: &[usize]) -> String {
    let [c, h, w] = <[usize; 3]>::try_from(statics(&ops[0])).unwrap_or([0; 3]);
    let (cg, og) = (c / groups.max(1), o[0] / groups.max(1));
    let init = if ops.len() > 2 { sh.load("bias", "a0") } else { "0.0".into() };
    sh.line(1, &format!("var acc = {init};"));
    sh.line(1, &format!("let first = (a0 / {og}u) * {cg}u;"));
    sh.line(1, &format!("for (var k = 0u; k < {cg}u; k = k + 1u) {{"));
    sh.line(2, &format!("let plane = (n * {c}u + first + k) * {h}u;"));
    sh.line(2, &format!("let taps = (a0 * {cg}u + k) * {}u;", win.taps()));
    taps(sh, win, 2, "a1", "a2", h, w);
    let x = sh.load("x", &format!("(plane + u32(sy)) * {w}u + u32(sx)"));
    let wt = sh.load("w", &format!("taps + ta * {}u + tb", win.kernel[1]));
    sh.line(4, &format!("acc = acc + {x} * {wt};"));
    sh.line(3, "}");
    sh.line(2, "}");
    sh.line(1, "}");
    "acc".into()
}

fn pool(sh: &mut Shader, win: &Window2d, max: bool, ops: &[Operand]) -> String {
    let [c, h, w] = <[usize; 3]>::try_from(statics(&ops[0])).unwrap_or([0; 3]);
    if max {
        sh.need(Helper::MaxMin);
    }
    sh.line(1, &format!("var acc = {};", if max { "-inf()" } else { "0.0" }));
    sh.line(1, &format!("let plane = (n * {c}u + a0) * {h}u;"));
    taps(sh, win, 1, "a1", "a2", h, w);
    let x = sh.load("x", &format!("(plane + u32(sy)) * {w}u + u32(sx)"));
    sh.line(3, &if max { format!("acc = max_(acc, {x});") } else { format!("acc = acc + {x};") });
    sh.line(2, "}");
    sh.line(1, "}");
    if max { "acc".into() } else { format!("acc / {}.0", win.taps()) }
}

/// `o` is the output's `[c * taps, blocks]`.
fn unfold(sh: &mut Shader, win: &Window2d, ops: &[Operand], o: &[usize]) -> String {
    let [c, h, w] = <[usize; 3]>::try_from(statics(&ops[0])).unwrap_or([0; 3]);
    let ow = win.out_len(1, w).unwrap_or(1);
    let blocks = o.get(1).copied().unwrap_or(1);
    sh.line(1, &format!("let l = i % {blocks}u;"));
    sh.line(1, &format!("let tb = (i / {blocks}u) % {}u;", win.kernel[1]));
    sh.line(1, &format!("let ta = (i / {}u) % {}u;", blocks * win.kernel[1], win.kernel[0]));
    sh.line(1, &format!("let k = (i / {}u) % {c}u;", blocks * win.taps()));
    sh.line(1, &format!("let batch = i / {}u;", blocks * win.taps() * c));
    sh.line(
        1,
        &format!("let sy = i32((l / {ow}u) * {}u + ta * {}u) - {};", win.stride[0], win.dilation[0], win.padding[0]),
    );
    sh.line(
        1,
        &format!("let sx = i32((l % {ow}u) * {}u + tb * {}u) - {};", win.stride[1], win.dilation[1], win.padding[1]),
    );
    sh.line(1, "var v = 0.0;");
    let x = sh.load("x", &format!("((batch * {c}u + k) * {h}u + u32(sy)) * {w}u + u32(sx)"));
    sh.line(1, &format!("if (sy >= 0 && sy < {h} && sx >= 0 && sx < {w}) {{ v = {x}; }}"));
    "v".into()
}

fn fold(sh: &mut Shader, win: &Window2d, ops: &[Operand], o: &[usize]) -> String {
    // Output [n, c, h, w] (a0 = c, a1 = y, a2 = x); input [n, c * taps, oh * ow].
    let (h, w) = (o[1], o[2]);
    let (oh, ow) = (win.out_len(0, h).unwrap_or(1), win.out_len(1, w).unwrap_or(1));
    let rows = statics(&ops[0])[0];
    sh.line(1, "var acc = 0.0;");
    for (axis, (t, p, q, len)) in [("ta", "a1", "qy", oh), ("tb", "a2", "qx", ow)].into_iter().enumerate() {
        let indent = 1 + axis;
        sh.line(indent, &format!("for (var {t} = 0u; {t} < {}u; {t} = {t} + 1u) {{", win.kernel[axis]));
        // The window whose tap `t` lands on this position, if any.
        sh.line(
            indent + 1,
            &format!("let {q}s = i32({p} + {}u) - i32({t} * {}u);", win.padding[axis], win.dilation[axis]),
        );
        sh.line(
            indent + 1,
            &format!("if ({q}s < 0 || {q}s % {s} != 0 || {q}s / {s} >= {len}) {{ continue; }}", s = win.stride[axis]),
        );
        sh.line(indent + 1, &format!("let {q} = u32({q}s / {});", win.stride[axis]));
    }
    let x = sh.load(
        "x",
        &format!(
            "((n * {rows}u + (a0 * {}u + ta) * {}u + tb) * {}u) + qy * {ow}u + qx",
            win.kernel[0],
            win.kernel[1],
            oh * ow
        ),
    );
    sh.line(3, &format!("acc = acc + {x};"));
    sh.line(2, "}");
    sh.line(1, "}");
    "acc".into()
}
