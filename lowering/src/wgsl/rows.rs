//! Kernels with one workgroup per output row: reductions over any axes, LayerNorm and RMSNorm
//! over the last axis, softmax along any axis, cross-entropy of the last axis. Each invocation accumulates a strided part of
//! the row; the parts meet in a tree in workgroup memory.

use super::emit::{Ctx, Head, Shader};
use super::helpers::{self, Helper};
use super::{Count, Generated, Operand};
use rustral_ir::{Dim, ReduceOp};

/// Lines combining every invocation's `value` with `combine` (a template over `$a` and `$b`)
/// into `let {name}` in workgroup memory `red`, leaving it free for the next reduction.
pub(crate) fn tree(sh: &mut Shader, at: usize, wg: u32, value: &str, combine: &str, name: &str) {
    let c = combine.replace("$a", "red[lid]").replace("$b", "red[lid + w]");
    sh.line(at, &format!("red[lid] = {value};"));
    sh.line(at, "workgroupBarrier();");
    sh.line(at, &format!("for (var w = {}u; w > 0u; w = w >> 1u) {{", wg / 2));
    sh.line(at + 1, &format!("if (lid < w) {{ red[lid] = {c}; }}"));
    sh.line(at + 1, "workgroupBarrier();");
    sh.line(at, "}");
    sh.line(at, &format!("let {name} = red[0];"));
    sh.line(at, "workgroupBarrier();");
}

fn generated(sh: Shader, ctx: &Ctx, workgroups: Count, names: Vec<String>) -> Generated {
    let (status, workgroup_size, workgroup_bytes) = (sh.status.clone(), sh.workgroup_size, sh.workgroup_bytes());
    Generated { source: sh.finish(ctx), workgroup_size, workgroups, names, status, workgroup_bytes }
}

/// `reduce_{sum,mean,max,min}` over `axes`: one workgroup per output element.
pub(crate) fn reduce(ctx: &Ctx, head: &Head, r: ReduceOp, axes: &[usize], x: &Operand, out: &Operand) -> Generated {
    const WG: u32 = 64;
    let mut sh = Shader::new(head, &[("x", x)], out, WG);
    sh.shared("red", WG);
    sh.need(Helper::Special);
    let shape = &x.shape;
    let strides = ctx.strides(shape);
    let kept: Vec<Dim> = shape.iter().enumerate().filter(|(k, _)| !axes.contains(k)).map(|(_, d)| d.clone()).collect();
    let reduced: Vec<Dim> = axes.iter().map(|&k| shape[k].clone()).collect();
    sh.line(1, &format!("if (group >= {}) {{ return; }}", ctx.prod(&kept)));
    sh.push(&ctx.unravel("group", "x", shape, |k| !axes.contains(&k)));
    let offset = |prefix: &str, keep: &dyn Fn(usize) -> bool| {
        let terms: Vec<String> =
            (0..shape.len()).filter(|&k| keep(k)).map(|k| format!("{prefix}{k} * {}", strides[k])).collect();
        if terms.is_empty() { "0u".to_string() } else { terms.join(" + ") }
    };
    sh.line(1, &format!("let base = {};", offset("x", &|k| !axes.contains(&k))));
    let count = ctx.prod(&reduced);
    let (init, combine) = match r {
        ReduceOp::Sum | ReduceOp::Mean => ("0.0", "$a + $b"),
        ReduceOp::Max => ("-inf()", "max_($a, $b)"),
        ReduceOp::Min => ("inf()", "min_($a, $b)"),
    };
    if matches!(r, ReduceOp::Max | ReduceOp::Min) {
        sh.need(Helper::MaxMin);
    }
    sh.line(1, &format!("var acc = {init};"));
    sh.line(1, &format!("for (var j = lid; j < {count}; j = j + {WG}u) {{"));
    let body = ctx.unravel("j", "r", shape, |k| axes.contains(&k));
    sh.push(&body.lines().map(|l| format!("    {l}\n")).collect::<String>());
    let load = sh.load("x", &format!("base + {}", offset("r", &|k| axes.contains(&k))));
    sh.line(2, &format!("acc = {};", combine.replace("$a", "acc").replace("$b", &load)));
    sh.line(1, "}");
    tree(&mut sh, 1, WG, "acc", combine, "total");
    let v = match r {
        // The mean of nothing is NaN (0 / 0 is not reliably NaN on GPUs).
        ReduceOp::Mean => format!("select(total / f32({count}), nan(), {count} == 0u)"),
        _ => "total".into(),
    };
    let v = helpers::round(&mut sh, out.dtype, &v);
    let store = sh.store("group", &v);
    sh.line(1, &format!("if (lid == 0u) {{ {store} }}"));
    generated(sh, ctx, Count::elements(&kept), vec!["x".into()])
}

/// LayerNorm (`center`) or RMSNorm over the last axis: one workgroup per row, two passes
/// (mean, then the variance about it) and a write.
pub(crate) fn norm(ctx: &Ctx, head: &Head, eps: f64, center: bool, ops: &[Operand], out: &Operand) -> Generated {
    const WG: u32 = 256;
    let names: Vec<String> = ["x", "gamma", "beta"].iter().take(ops.len()).map(|s| s.to_string()).collect();
    let inputs: Vec<(&str, &Operand)> = names.iter().map(String::as_str).zip(ops).collect();
    let mut sh = Shader::new(head, &inputs, out, WG);
    sh.shared("red", WG);
    sh.need(Helper::Sqrt);
    let shape = &ops[0].shape;
    let rank = shape.len();
    let (rows, len) = (ctx.prod(&shape[..rank - 1]), ctx.dim(&shape[rank - 1]));
    sh.line(1, &format!("if (group >= {rows}) {{ return; }}"));
    sh.line(1, &format!("let base = group * {len};"));
    let x = sh.load("x", "base + j");
    let each = format!("for (var j = lid; j < {len}; j = j + {WG}u) {{");
    sh.line(1, "var acc = 0.0;");
    if center {
        sh.line(1, &each);
        sh.line(2, &format!("acc = acc + {x};"));
        sh.line(1, "}");
        tree(&mut sh, 1, WG, "acc", "$a + $b", "sum");
        sh.line(1, &format!("let mean = sum / f32({len});"));
    } else {
        sh.line(1, "let mean = 0.0;");
    }
    sh.line(1, "acc = 0.0;");
    sh.line(1, &each);
    sh.line(2, &format!("let d = {x} - mean;"));
    sh.line(2, "acc = acc + d * d;");
    sh.line(1, "}");
    tree(&mut sh, 1, WG, "acc", "$a + $b", "sq");
    let eps = helpers::literal(&mut sh, eps);
    sh.line(1, &format!("let inv = 1.0 / sqrt_(sq / f32({len}) + {eps});"));
    sh.line(1, &each);
    let mut v = format!("({x} - mean) * inv");
    if ops.len() > 1 {
        v = format!("{v} * {}", sh.load("gamma", "j"));
    }
    // An absent beta is 0 as the IR defines it (so -0 becomes +0).
    v = if ops.len() > 2 { format!("{v} + {}", sh.load("beta", "j")) } else { format!("{v} + 0.0") };
    let v = helpers::round(&mut sh, out.dtype, &v);
    let store = sh.store("base + j", &v);
    sh.line(2, &store);
    sh.line(1, "}");
    generated(sh, ctx, Count::elements(&shape[..rank - 1]), names)
}

/// The two passes softmax and cross-entropy share over a row of `len` elements whose `j`th is
/// `x`: its max `m`, then the sum of exponentials about it, `sum`. Returns the loop header
/// over the row (`j` from this invocation's index, stepping by the workgroup).
fn max_and_sum_exp(sh: &mut Shader, wg: u32, len: &str, x: &str) -> String {
    let each = format!("for (var j = lid; j < {len}; j = j + {wg}u) {{");
    sh.line(1, "var acc = -inf();");
    sh.line(1, &each);
    sh.line(2, &format!("acc = max_(acc, {x});"));
    sh.line(1, "}");
    tree(sh, 1, wg, "acc", "max_($a, $b)", "m");
    sh.line(1, "acc = 0.0;");
    sh.line(1, &each);
    sh.line(2, &format!("acc = acc + exp_({x} - m);"));
    sh.line(1, "}");
    tree(sh, 1, wg, "acc", "$a + $b", "sum");
    each
}

/// Softmax along `axis`: one workgroup per row (every index but `axis`), a max pass, a sum of
/// exponentials, and a write.
pub(crate) fn softmax(ctx: &Ctx, head: &Head, axis: usize, x: &Operand, out: &Operand) -> Generated {
    const WG: u32 = 256;
    let mut sh = Shader::new(head, &[("x", x)], out, WG);
    sh.shared("red", WG);
    sh.need(Helper::MaxMin);
    sh.need(Helper::Exp);
    let shape = &x.shape;
    let others: Vec<Dim> = shape.iter().enumerate().filter(|(k, _)| *k != axis).map(|(_, d)| d.clone()).collect();
    let (inner, len) = (ctx.prod(&shape[axis + 1..]), ctx.dim(&shape[axis]));
    sh.line(1, &format!("if (group >= {}) {{ return; }}", ctx.prod(&others)));
    sh.line(1, &format!("let base = (group / {inner}) * {len} * {inner} + group % {inner};"));
    let at = if inner == "1u" { "base + j".to_string() } else { format!("base + j * {inner}") };
    let x = sh.load("x", &at);
    let each = max_and_sum_exp(&mut sh, WG, &len, &x);
    sh.line(1, &each);
    let v = helpers::round(&mut sh, out.dtype, &format!("exp_({x} - m) / sum"));
    let store = sh.store(&at, &v);
    sh.line(2, &store);
    sh.line(1, "}");
    generated(sh, ctx, Count::elements(&others), vec!["x".into()])
}

/// Cross-entropy of each row of the last axis: one workgroup per row, a max pass, a sum of
/// exponentials about it, and one invocation picking the target's logit.
pub(crate) fn cross_entropy(ctx: &Ctx, head: &Head, x: &Operand, targets: &Operand, out: &Operand) -> Generated {
    const WG: u32 = 256;
    let mut sh = Shader::new(head, &[("x", x), ("targets", targets)], out, WG);
    sh.shared("red", WG);
    sh.need(Helper::MaxMin);
    sh.need(Helper::Exp);
    sh.need(Helper::Log);
    let shape = &x.shape;
    let rank = shape.len();
    let (rows, len) = (ctx.prod(&shape[..rank - 1]), ctx.dim(&shape[rank - 1]));
    sh.line(1, &format!("if (group >= {rows}) {{ return; }}"));
    sh.line(1, &format!("let base = group * {len};"));
    let xj = sh.load("x", "base + j");
    max_and_sum_exp(&mut sh, WG, &len, &xj);
    sh.line(1, "if (lid != 0u) { return; }");
    sh.line(1, &format!("let t = {};", sh.load("targets", "group")));
    let fail = sh.fail("a target is out of range of the classes");
    sh.line(1, &format!("if (!(t >= 0.0 && t < f32({len}))) {{ {fail} return; }}"));
    let picked = sh.load("x", "base + u32(t)");
    let v = helpers::round(&mut sh, out.dtype, &format!("m + log_(sum) - {picked}"));
    let store = sh.store("group", &v);
    sh.line(1, &store);
    generated(sh, ctx, Count::elements(&shape[..rank - 1]), vec!["x".into(), "targets".into()])
}
