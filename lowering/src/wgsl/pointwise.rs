//! Kernels with one invocation per output element: elementwise ops and fused bodies (operands
//! broadcast by their strides), layout ops (reshape, permute, broadcast, slice, concat),
//! gather, and the sources made on the device (splat constants, iotas, random streams).

use super::emit::{Ctx, Head, Shader};
use super::helpers::{self, Helper};
use super::{Count, Generated, Operand, Storage};
use rustral_ir::{DType, ExprNode, Literal, Op};

const WORKGROUP: u32 = 256;

/// Generate the kernel of a per-element op.
pub(crate) fn pointwise(
    ctx: &Ctx,
    head: &Head,
    op: &Op,
    operands: &[Operand],
    out: &Operand,
) -> Result<Generated, String> {
    let names: Vec<String> = match op {
        Op::Gather { .. } => vec!["table".into(), "indices".into()],
        _ => (0..operands.len()).map(|i| format!("in{i}")).collect(),
    };
    let inputs: Vec<(&str, &Operand)> = names.iter().map(String::as_str).zip(operands).collect();
    let mut sh = Shader::new(head, &inputs, out, WORKGROUP);
    let total = ctx.prod(&out.shape);
    let bytes = out.storage == Storage::Bytes;
    if bytes {
        // Four u8 elements share a word: one invocation per word, element by element.
        sh.line(1, &format!("let word = group * {WORKGROUP}u + lid;"));
        sh.line(1, &format!("if (word >= ({total} + 3u) / 4u) {{ return; }}"));
        sh.line(1, "var packed = 0u;");
        sh.line(1, "for (var j = 0u; j < 4u; j = j + 1u) {");
        sh.nest(true);
        sh.line(1, "let i = word * 4u + j;");
        sh.line(1, &format!("if (i >= {total}) {{ break; }}"));
    } else {
        sh.line(1, &format!("let i = group * {WORKGROUP}u + lid;"));
        sh.line(1, &format!("if (i >= {total}) {{ return; }}"));
    }
    let rank = out.shape.len();
    let idx: Vec<String> = (0..rank).map(|k| format!("o{k}")).collect();
    // The output's multi-index, when some operand needs it.
    let unravel_all = |sh: &mut Shader| sh.push(&ctx.unravel("i", "o", &out.shape, |_| true));
    // An operand's element at the output index: direct when shapes agree, else by strides.
    let at = |sh: &mut Shader, k: usize| -> String {
        let o = &operands[k];
        let off = if o.shape == out.shape { "i".to_string() } else { ctx.offset(&idx, &out.shape, &o.shape) };
        sh.load(&names[k], &off)
    };
    let needs_index = |ops: &[Operand]| ops.iter().any(|o| o.shape != out.shape);

    let value = match op {
        Op::Unary(u) => {
            let x = load_let(&mut sh, "a", &at, 0, needs_index(operands), &unravel_all);
            helpers::unary(&mut sh, *u, &x)
        }
        Op::Binary(b) => {
            if needs_index(operands) {
                unravel_all(&mut sh);
            }
            let (x, y) = (at(&mut sh, 0), at(&mut sh, 1));
            sh.line(1, &format!("let a = {x};"));
            sh.line(1, &format!("let b = {y};"));
            helpers::binary(&mut sh, *b, operands[0].dtype, "a", "b")
        }
        Op::Where => {
            if needs_index(operands) {
                unravel_all(&mut sh);
            }
            let (c, x, y) = (at(&mut sh, 0), at(&mut sh, 1), at(&mut sh, 2));
            format!("select({y}, {x}, {c} != 0.0)")
        }
        Op::Cast { .. } | Op::BroadcastTo { .. } | Op::Reshape { .. } => {
            let v = if needs_index(operands) && !matches!(op, Op::Reshape { .. }) {
                unravel_all(&mut sh);
                at(&mut sh, 0)
            } else {
                // A reshape keeps the row-major order: element i is element i.
                sh.load("in0", "i")
            };
            match op {
                Op::Cast { .. } => helpers::cast(&mut sh, operands[0].dtype, out.dtype, &v),
                _ => v,
            }
        }
        Op::Gelu { approx } => {
            let x = load_let(&mut sh, "a", &at, 0, false, &unravel_all);
            helpers::gelu(&mut sh, *approx, &x)
        }
        Op::Silu => {
            let x = load_let(&mut sh, "a", &at, 0, false, &unravel_all);
            helpers::silu(&mut sh, &x)
        }
        Op::FusedElementwise { body } => {
            if needs_index(operands) {
                unravel_all(&mut sh);
            }
            let mut dtypes: Vec<DType> = Vec::with_capacity(body.nodes.len());
            for (n, node) in body.nodes.iter().enumerate() {
                let (dtype, v) = match node {
                    ExprNode::Arg(k) => (operands[*k].dtype, at(&mut sh, *k)),
                    ExprNode::Const { value, dtype } => (*dtype, helpers::literal(&mut sh, value.0)),
                    ExprNode::Unary(u, x) => (dtypes[*x], helpers::unary(&mut sh, *u, &format!("t{x}"))),
                    ExprNode::Binary(b, x, y) => {
                        let d = dtypes[*x];
                        let v = helpers::binary(&mut sh, *b, d, &format!("t{x}"), &format!("t{y}"));
                        (if b.is_comparison() { DType::Bool } else { d }, v)
                    }
                    ExprNode::Where(c, x, y) => (dtypes[*x], format!("select(t{y}, t{x}, t{c} != 0.0)")),
                    ExprNode::Cast(to, x) => (*to, helpers::cast(&mut sh, dtypes[*x], *to, &format!("t{x}"))),
                };
                let v = helpers::round(&mut sh, dtype, &v);
                sh.line(1, &format!("let t{n} = {v};"));
                dtypes.push(dtype);
            }
            match body.nodes.len() {
                0 => "0.0".into(),
                n => format!("t{}", n - 1),
            }
        }
        Op::Permute { perm } => {
            unravel_all(&mut sh);
            let strides = ctx.strides(&operands[0].shape);
            let terms: Vec<String> = perm.iter().enumerate().map(|(k, &p)| format!("o{k} * {}", strides[p])).collect();
            let off = if terms.is_empty() { "0u".to_string() } else { terms.join(" + ") };
            sh.load("in0", &off)
        }
        Op::Slice { axis, start, .. } => {
            let a = *axis;
            let (inner, len_out, len_in) =
                (ctx.prod(&out.shape[a + 1..]), ctx.dim(&out.shape[a]), ctx.dim(&operands[0].shape[a]));
            let fail = sh.fail("the slice is past the end of its axis");
            sh.line(1, &format!("if ({start}u + {len_out} > {len_in}) {{ {fail} return; }}"));
            sh.line(1, &format!("let inner = i % {inner};"));
            sh.line(1, &format!("let along = (i / {inner}) % {len_out};"));
            sh.line(1, &format!("let outer = i / ({inner} * {len_out});"));
            sh.load("in0", &format!("(outer * {len_in} + along + {start}u) * {inner} + inner"))
        }
        Op::Concat { axis } => {
            let a = *axis;
            let inner = ctx.prod(&out.shape[a + 1..]);
            let len_out = ctx.dim(&out.shape[a]);
            sh.line(1, &format!("let inner = i % {inner};"));
            sh.line(1, &format!("let along = (i / {inner}) % {len_out};"));
            sh.line(1, &format!("let outer = i / ({inner} * {len_out});"));
            sh.line(1, "var v: f32;");
            let mut start = String::from("0u");
            let last = operands.len() - 1;
            for (k, o) in operands.iter().enumerate() {
                let len = ctx.dim(&o.shape[a]);
                let end = if start == "0u" { len.clone() } else { format!("{start} + {len}") };
                let load = sh.load(&names[k], &format!("(outer * {len} + along - {start}) * {inner} + inner"));
                let open = match (k, k == last) {
                    (0, true) => "{".to_string(),
                    (0, false) => format!("if (along < {end}) {{"),
                    (_, true) => "} else {".to_string(),
                    (_, false) => format!("}} else if (along < {end}) {{"),
                };
                sh.line(1, &open);
                sh.line(2, &format!("v = {load};"));
                start = end;
            }
            sh.line(1, "}");
            "v".into()
        }
        Op::Gather { axis } => {
            let a = *axis;
            let table = &operands[0].shape;
            let (inner, n_idx, size) = (ctx.prod(&table[a + 1..]), ctx.prod(&operands[1].shape), ctx.dim(&table[a]));
            sh.line(1, &format!("let inner = i % {inner};"));
            sh.line(1, &format!("let j = (i / {inner}) % {n_idx};"));
            sh.line(1, &format!("let outer = i / ({inner} * {n_idx});"));
            sh.line(1, &format!("let index = {};", sh.load("indices", "j")));
            let fail = sh.fail("an index is out of range");
            sh.line(1, &format!("if (!(index >= 0.0 && index < f32({size}))) {{ {fail} return; }}"));
            sh.load("table", &format!("(outer * {size} + u32(index)) * {inner} + inner"))
        }
        Op::Constant { value: Literal::Splat(v) } => helpers::literal(&mut sh, v.0),
        Op::Iota { axis } => {
            let (inner, len) = (ctx.prod(&out.shape[axis + 1..]), ctx.dim(&out.shape[*axis]));
            format!("f32((i / {inner}) % {len})")
        }
        Op::RandomUniform { seed } => {
            sh.need(Helper::Pcg);
            if operands.is_empty() {
                sh.line(1, &format!("let key = pcg({seed}u);"));
            } else {
                // The step arrives as an f32 (exact below 2^24); its i32 bits are the u32 step.
                let step = sh.load("in0", "0u");
                sh.line(1, &format!("let key = pcg({seed}u + 2654435769u * u32(i32({step})));"));
            }
            "f32(pcg(i ^ key) >> 8u) / 16777216.0".into()
        }
        // Bound, not computed (inputs, parameters, dense constants), or routed to another
        // family's generator by `generate`.
        other => return Err(format!("the WGSL target computes no per-element kernel for {}", other.name())),
    };
    let v = helpers::round(&mut sh, out.dtype, &value);
    let store = sh.store("i", &v);
    sh.line(1, &store);
    if bytes {
        sh.nest(false);
        sh.line(1, "}");
        let put = sh.put("word", "packed");
        sh.line(1, &put);
    }
    let status = sh.status.clone();
    let workgroup_bytes = sh.workgroup_bytes();
    Ok(Generated {
        source: sh.finish(ctx),
        workgroup_size: WORKGROUP,
        workgroups: Count::ceil_div(&out.shape, WORKGROUP as u64 * if bytes { 4 } else { 1 }),
        names,
        status,
        workgroup_bytes,
    })
}

/// `update_slice`, in place: one invocation per element of the update (operands `update` and
/// `position`; the target is `out` itself), so a KV cache step writes one row per head and
/// reads nothing else of the cache.
pub(crate) fn update_slice(ctx: &Ctx, head: &Head, axis: usize, operands: &[Operand], out: &Operand) -> Generated {
    let names = vec!["update".to_string(), "position".to_string()];
    let inputs: Vec<(&str, &Operand)> = names.iter().map(String::as_str).zip(operands).collect();
    let mut sh = Shader::new(head, &inputs, out, WORKGROUP);
    let update = &operands[0];
    let (inner, n, size) =
        (ctx.prod(&update.shape[axis + 1..]), ctx.dim(&update.shape[axis]), ctx.dim(&out.shape[axis]));
    sh.line(1, &format!("let i = group * {WORKGROUP}u + lid;"));
    sh.line(1, &format!("if (i >= {}) {{ return; }}", ctx.prod(&update.shape)));
    sh.line(1, &format!("let position = {};", sh.load("position", "0u")));
    let fail = sh.fail("the write is past the end of its axis");
    sh.line(1, &format!("if (!(position >= 0.0 && position + f32({n}) <= f32({size}))) {{ {fail} return; }}"));
    sh.line(1, &format!("let inner = i % {inner};"));
    sh.line(1, &format!("let along = (i / {inner}) % {n};"));
    sh.line(1, &format!("let outer = i / ({inner} * {n});"));
    let loaded = sh.load("update", "i");
    let v = helpers::round(&mut sh, out.dtype, &loaded);
    let store = sh.store(&format!("(outer * {size} + along + u32(position)) * {inner} + inner"), &v);
    sh.line(1, &store);
    let status = sh.status.clone();
    let workgroup_bytes = sh.workgroup_bytes();
    Generated {
        source: sh.finish(ctx),
        workgroup_size: WORKGROUP,
        workgroups: Count::ceil_div(&update.shape, WORKGROUP as u64),
        names,
        status,
        workgroup_bytes,
    }
}

/// Load operand `k` into `let name`, unravelling the index first when it broadcasts.
fn load_let(
    sh: &mut Shader,
    name: &str,
    at: &dyn Fn(&mut Shader, usize) -> String,
    k: usize,
    unravel: bool,
    unravel_all: &dyn Fn(&mut Shader),
) -> String {
    if unravel {
        unravel_all(sh);
    }
    let v = at(sh, k);
    sh.line(1, &format!("let {name} = {v};"));
    name.to_string()
}
