//! Attention: one workgroup per query row walks the keys in tiles of 64 with an online softmax
//! (a running max and sum; the output accumulator in workgroup memory is rescaled when the max
//! grows), so the score matrix never exists. Causally hidden keys are never read; an additive
//! mask broadcasts by its strides.

use super::emit::{Ctx, Head, Shader};
use super::helpers::{self, Helper};
use super::rows::tree;
use super::{Count, Generated, Operand};

const WG: u32 = 64;
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
    let (q, k, v) = (&ops[0], &ops[1], &ops[2]);
    let r = out.shape.len();
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
    let batch = &out.shape[..r - 2];
    let (lq, lk) = (ctx.dim(&q.shape[q.shape.len() - 2]), ctx.dim(&k.shape[k.shape.len() - 2]));
    let (d, dv) = (ctx.dim(&q.shape[q.shape.len() - 1]), ctx.dim(&v.shape[v.shape.len() - 1]));
    for (n, e) in [("lq", &lq), ("lk", &lk), ("d", &d), ("dv", &dv)] {
        sh.line(1, &format!("let {n} = {e};"));
    }
    sh.line(1, &format!("if (group >= {} * lq) {{ return; }}", ctx.prod(batch)));
    if v.shape[v.shape.len() - 1].as_static().is_none() {
        let fail = sh.fail();
        sh.line(1, &format!("if (dv > {width}u) {{ {fail} return; }}"));
    }
    sh.line(1, "let i = group % lq;");
    sh.line(1, "let bi = group / lq;");
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
    let scale = helpers::literal(&mut sh, scale);
    let mut score = helpers::round(&mut sh, out.dtype, &format!("dot * {scale}"));
    if let Some(mask) = ops.get(3) {
        let mut scores = batch.to_vec();
        scores.extend([q.shape[q.shape.len() - 2].clone(), k.shape[k.shape.len() - 2].clone()]);
        let mut full: Vec<String> = (0..r - 2).map(|k| format!("o{k}")).collect();
        full.extend(["i".to_string(), "j".to_string()]);
        let m = sh.load("mask", &ctx.offset(&full, &scores, &mask.shape));
        score = format!("{score} + {m}");
    }
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
    let mut rows = batch.to_vec();
    rows.push(q.shape[q.shape.len() - 2].clone());
    let (status, workgroup_bytes) = (sh.status, sh.workgroup_bytes());
    Ok(Generated {
        source: sh.finish(ctx),
        workgroup_size: WG,
        workgroups: Count::elements(&rows),
        names,
        status,
        workgroup_bytes,
    })
}
