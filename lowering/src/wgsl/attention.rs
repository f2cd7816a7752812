//! Attention with an online softmax (a running max and sum; the output accumulator is rescaled
//! when the max grows), so the score matrix never exists. Where the head widths are static and
//! at most 128, each invocation owns one query row with q and the accumulator in registers and
//! walks the keys alone: no barriers, and the invocations of a workgroup read the same keys
//! together. Otherwise one workgroup per query row walks the keys in tiles of 64, with the
//! accumulator in workgroup memory. Causally hidden keys are never read; an additive mask
//! broadcasts by its strides.

use super::emit::{Ctx, Head, Shader};
use super::helpers::{self, Helper};
use super::rows::tree;
use super::{Count, Generated, Operand};

const WG: u32 = 64;
/// The widest head a single invocation keeps in registers.
const MAX_ROW_WIDTH: usize = 128;
/// Accumulator width for a value width known only at run time.
const DYNAMIC_WIDTH: u32 = 256;
/// The widest value a workgroup accumulates (16 KiB of workgroup memory in all).
const MAX_WIDTH: usize = 2048;

pub(crate) fn attention(
    ctx: &Ctx,
    head: &Head,
    scale: f64,
    causal: bool,
    ops: &[Operand],
    out: &Operand,
) -> Result<Generated, String> {
    let names: Vec<String> = ["q", "k", "v", "mask"].iter().take(ops.len()).map(|s| s.to_string()).collect();
    let inputs: Vec<(&str, &Operand)> = names.iter().map(String::as_str).zip(ops).collect();
    let (q, v) = (&ops[0], &ops[2]);
    let r = out.shape.len();
    let last = |o: &Operand| o.shape[o.shape.len() - 1].as_static();
    if let (Some(d), Some(dv)) = (last(q), last(v))
        && d <= MAX_ROW_WIDTH
        && dv <= MAX_ROW_WIDTH
    {
        return Ok(per_row(ctx, head, scale, Keys::Prefix { causal }, ops, out, &names, d.max(1), dv.max(1)));
    }
    let width = match v.shape[v.shape.len() - 1].as_static() {
        Some(w) if w > MAX_WIDTH => {
            return Err(format!("value width {w} is over the {MAX_WIDTH} one workgroup accumulates"));
        }
        Some(w) => w.max(1) as u32,
        None => DYNAMIC_WIDTH,
    };
    let mut sh = Shader::new(head, &inputs, out, WG);
    sh.shared("red", WG);
    sh.shared("p", WG);
    sh.shared("acc", width);
    sh.need(Helper::MaxMin);
    sh.need(Helper::Exp);
    let batch_idx = preamble(ctx, &mut sh, causal, ops, out, "group");
    if v.shape[v.shape.len() - 1].as_static().is_none() {
        let fail = sh.fail("the value width is over what one workgroup accumulates");
        sh.line(1, &format!("if (dv > {width}u) {{ {fail} return; }}"));
    }
    sh.line(1, "for (var c = lid; c < dv; c = c + 64u) { acc[c] = 0.0; }");
    sh.line(1, "var m = -inf();");
    sh.line(1, "var l = 0.0;");
    sh.line(1, "for (var t0 = 0u; t0 < visible; t0 = t0 + 64u) {");
    sh.line(2, "let j = t0 + lid;");
    sh.line(2, "var s = -inf();");
    sh.line(2, "if (j < visible) {");
    sh.line(3, "var dot = 0.0;");
    let (qe, ke) = (sh.load("q", "q_base + c"), sh.load("k", "k_base + j * d + c"));
    sh.line(3, &format!("for (var c = 0u; c < d; c = c + 1u) {{ dot = dot + {qe} * {ke}; }}"));
    let score = score(ctx, &mut sh, scale, ops, out, &batch_idx);
    sh.line(3, &format!("s = {score};"));
    sh.line(2, "}");
    tree(&mut sh, 2, WG, "s", "max_($a, $b)", "tile_max");
    sh.line(2, "let m_new = max_(m, tile_max);");
    sh.line(2, "// exp(-inf - -inf) is NaN: a key masked to -inf weighs 0, an unchanged max rescales by 1.");
    sh.line(2, "let pj = select(exp_(s - m_new), 0.0, s == -inf());");
    sh.line(2, "let correction = select(exp_(m - m_new), 1.0, m == m_new);");
    let pj = helpers::round(&mut sh, out.dtype, "pj");
    sh.line(2, &format!("p[lid] = {pj};"));
    tree(&mut sh, 2, WG, "pj", "$a + $b", "tile_sum");
    sh.line(2, "l = l * correction + tile_sum;");
    sh.line(2, "let n_keys = min(64u, visible - t0);");
    sh.line(2, "for (var c = lid; c < dv; c = c + 64u) {");
    sh.line(3, "var a = acc[c] * correction;");
    let ve = sh.load("v", "v_base + (t0 + jj) * dv + c");
    sh.line(3, &format!("for (var jj = 0u; jj < n_keys; jj = jj + 1u) {{ a = a + p[jj] * {ve}; }}"));
    sh.line(3, "acc[c] = a;");
    sh.line(2, "}");
    sh.line(2, "m = m_new;");
    sh.line(2, "workgroupBarrier();");
    sh.line(1, "}");
    sh.line(1, "// A query that sees no key sums nothing: 0.");
    sh.line(1, "for (var c = lid; c < dv; c = c + 64u) {");
    let o = helpers::round(&mut sh, out.dtype, "select(acc[c] / l, 0.0, visible == 0u)");
    let store = sh.store("group * dv + c", &o);
    sh.line(2, &store);
    sh.line(1, "}");
    let mut rows = out.shape[..r - 2].to_vec();
    rows.push(q.shape[q.shape.len() - 2].clone());
    let (status, workgroup_bytes) = (sh.status.clone(), sh.workgroup_bytes());
    Ok(Generated {
        source: sh.finish(ctx),
        workgroup_size: WG,
        workgroups: Count::elements(&rows),
        names,
        status,
        workgroup_bytes,
    })
}

/// Lines shared by both forms: dims, the row's batch index, operand bases, visible keys.
fn preamble(ctx: &Ctx, sh: &mut Shader, causal: bool, ops: &[Operand], out: &Operand, row: &str) -> Vec<String> {
    let (q, k, v) = (&ops[0], &ops[1], &ops[2]);
    let r = out.shape.len();
    let batch = &out.shape[..r - 2];
    let (lq, lk) = (ctx.dim(&q.shape[q.shape.len() - 2]), ctx.dim(&k.shape[k.shape.len() - 2]));
    let (d, dv) = (ctx.dim(&q.shape[q.shape.len() - 1]), ctx.dim(&v.shape[v.shape.len() - 1]));
    for (n, e) in [("lq", &lq), ("lk", &lk), ("d", &d), ("dv", &dv)] {
        sh.line(1, &format!("let {n} = {e};"));
    }
    sh.line(1, &format!("if ({row} >= {} * lq) {{ return; }}", ctx.prod(batch)));
    sh.line(1, &format!("let i = {row} % lq;"));
    sh.line(1, &format!("let bi = {row} / lq;"));
    sh.push(&ctx.unravel("bi", "o", batch, |_| true));
    let mut idx: Vec<String> = (0..r - 2).map(|k| format!("o{k}")).collect();
    idx.extend(["i".to_string(), "0u".to_string()]);
    sh.line(1, &format!("let q_base = {};", ctx.offset(&idx, &out.shape, &q.shape)));
    idx[r - 2] = "0u".into();
    sh.line(1, &format!("let k_base = {};", ctx.offset(&idx, &out.shape, &k.shape)));
    sh.line(1, &format!("let v_base = {};", ctx.offset(&idx, &out.shape, &v.shape)));
    if causal {
        sh.line(1, "// Query i sees keys j <= i + lk - lq.");
        sh.line(1, "let visible = min(lk, select(0u, i + lk + 1u - lq, i + lk + 1u > lq));");
    } else {
        sh.line(1, "let visible = lk;");
    }
    (0..r - 2).map(|k| format!("o{k}")).collect()
}

/// The score of key `j` for query `i` (scaled, rounded, masked) as an expression.
fn score(ctx: &Ctx, sh: &mut Shader, scale: f64, ops: &[Operand], out: &Operand, batch_idx: &[String]) -> String {
    let (q, k) = (&ops[0], &ops[1]);
    let r = out.shape.len();
    let scale = helpers::literal(sh, scale);
    let mut score = helpers::round(sh, out.dtype, &format!("dot * {scale}"));
    if let Some(mask) = ops.get(3) {
        let mut scores = out.shape[..r - 2].to_vec();
        scores.extend([q.shape[q.shape.len() - 2].clone(), k.shape[k.shape.len() - 2].clone()]);
        let mut full = batch_idx.to_vec();
        full.extend(["i".to_string(), "j".to_string()]);
        let m = sh.load("mask", &ctx.offset(&full, &scores, &mask.shape));
        score = format!("{score} + {m}");
    }
    score
}

/// Which keys a query row reads.
#[derive(Clone, Copy)]
enum Keys {
    /// `attention`: all keys, or with `causal` those up to `i + lk - lq`; a mask operand adds.
    Prefix { causal: bool },
    /// `cached_attention`: keys `0..=position + i` of the row's key/value head.
    Cached,
}

/// `cached_attention`: one invocation per query row over the filled rows of its key/value
/// head (the unfilled rest of the cache is never read). Head widths must be static and at
/// most 128, as in every LLM.
pub(crate) fn cached_attention(
    ctx: &Ctx,
    head: &Head,
    scale: f64,
    ops: &[Operand],
    out: &Operand,
) -> Result<Generated, String> {
    let names: Vec<String> = ["q", "k", "v", "position"].iter().map(|s| s.to_string()).collect();
    let last = |o: &Operand| o.shape[3].as_static();
    match (last(&ops[0]), last(&ops[2])) {
        (Some(d), Some(dv)) if d <= MAX_ROW_WIDTH && dv <= MAX_ROW_WIDTH => {
            Ok(per_row(ctx, head, scale, Keys::Cached, ops, out, &names, d.max(1), dv.max(1)))
        }
        _ => Err(format!("cached_attention needs static head widths of at most {MAX_ROW_WIDTH}")),
    }
}

/// The `cached_attention` preamble: the row's query head, its key/value head's bases, and the
/// keys it sees.
fn cached_preamble(ctx: &Ctx, sh: &mut Shader, ops: &[Operand]) {
    let (q, k, v) = (&ops[0], &ops[1], &ops[2]);
    let dims = |o: &Operand, a: usize| ctx.dim(&o.shape[a]);
    for (n, e) in [
        ("h", dims(q, 1)),
        ("lq", dims(q, 2)),
        ("d", dims(q, 3)),
        ("kvh", dims(k, 1)),
        ("lk", dims(k, 2)),
        ("dv", dims(v, 3)),
    ] {
        sh.line(1, &format!("let {n} = {e};"));
    }
    sh.line(1, &format!("if (row >= {} * h * lq) {{ return; }}", ctx.dim(&q.shape[0])));
    sh.line(1, "let i = row % lq;");
    sh.line(1, "let qh = (row / lq) % h;");
    sh.line(1, "let kv = (row / (lq * h)) * kvh + qh / (h / kvh);");
    sh.line(1, &format!("let position = {};", sh.load("position", "0u")));
    let fail = sh.fail("the queries are past the end of the cache");
    sh.line(1, &format!("if (!(position >= 0.0 && position + f32(lq) <= f32(lk))) {{ {fail} return; }}"));
    sh.line(1, "let q_base = row * d;");
    sh.line(1, "let k_base = kv * lk * d;");
    sh.line(1, "let v_base = kv * lk * dv;");
    sh.line(1, "// Query i sees keys j <= position + i.");
    sh.line(1, "let visible = u32(position) + i + 1u;");
}

/// One invocation per query row, q and the accumulator in registers.
#[allow(clippy::too_many_arguments)]
fn per_row(
    ctx: &Ctx,
    head: &Head,
    scale: f64,
    keys: Keys,
    ops: &[Operand],
    out: &Operand,
    names: &[String],
    d: usize,
    dv: usize,
) -> Generated {
    let inputs: Vec<(&str, &Operand)> = names.iter().map(String::as_str).zip(ops).collect();
    let mut sh = Shader::new(head, &inputs, out, WG);
    sh.need(Helper::MaxMin);
    sh.need(Helper::Exp);
    sh.line(1, &format!("let row = group * {WG}u + lid;"));
    let (batch_idx, scored) = match keys {
        Keys::Prefix { causal } => (preamble(ctx, &mut sh, causal, ops, out, "row"), ops),
        Keys::Cached => {
            cached_preamble(ctx, &mut sh, ops);
            (vec![], &ops[..3])
        }
    };
    // q and the accumulator live in vec4 registers, the loops over the head unrolled (lanes
    // past the width are 0 and never stored).
    let vec = |sh: &Shader, name: &str, base: &str, chunk: usize, width: usize| {
        let lanes: Vec<String> = (0..4)
            .map(|l| {
                let c = 4 * chunk + l;
                if c < width { sh.load(name, &format!("{base} + {c}u")) } else { "0.0".into() }
            })
            .collect();
        format!("vec4<f32>({})", lanes.join(", "))
    };
    for c in 0..d.div_ceil(4) {
        sh.line(1, &format!("let q{c} = {};", vec(&sh, "q", "q_base", c, d)));
    }
    for c in 0..dv.div_ceil(4) {
        sh.line(1, &format!("var acc{c} = vec4<f32>(0.0);"));
    }
    sh.line(1, "var m = -inf();");
    sh.line(1, "var l = 0.0;");
    sh.line(1, "for (var j = 0u; j < visible; j = j + 1u) {");
    sh.line(2, "let kb = k_base + j * d;");
    let terms: Vec<String> = (0..d.div_ceil(4)).map(|c| format!("dot(q{c}, {})", vec(&sh, "k", "kb", c, d))).collect();
    sh.line(2, &format!("let dot = {};", terms.join("\n            + ")));
    let s = score(ctx, &mut sh, scale, scored, out, &batch_idx);
    sh.line(2, &format!("let s = {s};"));
    sh.line(2, "// A new maximum rescales what was summed so far (a NaN score is never one: it");
    sh.line(2, "// reaches the sum through p instead).");
    sh.line(2, "if (s > m) {");
    sh.line(3, "let correction = exp_(m - s);");
    sh.line(3, "l = l * correction;");
    for c in 0..dv.div_ceil(4) {
        sh.line(3, &format!("acc{c} = acc{c} * correction;"));
    }
    sh.line(3, "m = s;");
    sh.line(2, "}");
    sh.line(2, "// A key masked to -inf weighs 0 (exp(-inf - -inf) would be NaN).");
    let p = helpers::round(&mut sh, out.dtype, "select(exp_(s - m), 0.0, s == -inf())");
    sh.line(2, &format!("let p = {p};"));
    sh.line(2, "l = l + p;");
    sh.line(2, "let vb = v_base + j * dv;");
    for c in 0..dv.div_ceil(4) {
        sh.line(2, &format!("acc{c} = acc{c} + p * {};", vec(&sh, "v", "vb", c, dv)));
    }
    sh.line(1, "}");
    sh.line(1, "// A query that sees no key sums nothing: 0.");
    sh.line(1, "let inv = select(1.0 / l, 0.0, visible == 0u);");
    for c in 0..dv {
        let o = helpers::round(&mut sh, out.dtype, &format!("acc{}[{}] * inv", c / 4, c % 4));
        let store = sh.store(&format!("row * dv + {c}u"), &o);
        sh.line(1, &store);
    }
    let r = out.shape.len();
    let mut rows = out.shape[..r - 2].to_vec();
    rows.push(ops[0].shape[ops[0].shape.len() - 2].clone());
    let (status, workgroup_bytes) = (sh.status.clone(), sh.workgroup_bytes());
    Generated {
        source: sh.finish(ctx),
        workgroup_size: WG,
        workgroups: Count::ceil_div(&rows, WG as u64),
        names: names.to_vec(),
        status,
        workgroup_bytes,
    }
}
