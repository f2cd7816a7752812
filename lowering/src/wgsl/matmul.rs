//! `matmul` and `matmul_epilogue`: a 64x64 output tile per workgroup of 16x16 invocations,
//! each computing a 4x4 block from 16-deep slices of A and B staged in workgroup memory;
//! batch dims broadcast by strides; the bias and activation are applied while the tile is in
//! registers.

use super::emit::{Ctx, Head, Shader};
use super::helpers;
use super::{Count, Generated, Operand};
use rustral_ir::Activation;

const TILE: u32 = 64;
const DEPTH: u32 = 16;
const WG: u32 = 256;

pub(crate) fn matmul(ctx: &Ctx, head: &Head, act: Activation, ops: &[Operand], out: &Operand) -> Generated {
    let names: Vec<String> = ["a", "b", "bias"].iter().take(ops.len()).map(|s| s.to_string()).collect();
    let inputs: Vec<(&str, &Operand)> = names.iter().map(String::as_str).zip(ops).collect();
    let mut sh = Shader::new(head, &inputs, out, WG);
    sh.shared("a_tile", TILE * DEPTH);
    sh.shared("b_tile", TILE * DEPTH);
    let (a, b) = (&ops[0], &ops[1]);
    let r = out.shape.len();
    let batch = &out.shape[..r - 2];
    let (m, n, k) = (ctx.dim(&out.shape[r - 2]), ctx.dim(&out.shape[r - 1]), ctx.dim(&a.shape[a.shape.len() - 1]));
    sh.line(1, &format!("let m = {m};"));
    sh.line(1, &format!("let n = {n};"));
    sh.line(1, &format!("let k = {k};"));
    sh.line(1, &format!("let tiles_m = (m + {}u) / {TILE}u;", TILE - 1));
    sh.line(1, &format!("let tiles_n = (n + {}u) / {TILE}u;", TILE - 1));
    sh.line(1, &format!("if (group >= {} * tiles_m * tiles_n) {{ return; }}", ctx.prod(batch)));
    sh.line(1, "let tn = group % tiles_n;");
    sh.line(1, "let tm = (group / tiles_n) % tiles_m;");
    sh.line(1, "let bi = group / (tiles_n * tiles_m);");
    sh.push(&ctx.unravel("bi", "o", batch, |_| true));
    let mut idx: Vec<String> = (0..r - 2).map(|k| format!("o{k}")).collect();
    idx.extend(["0u".to_string(), "0u".to_string()]);
    sh.line(1, &format!("let a_base = {};", ctx.offset(&idx, &out.shape, &a.shape)));
    sh.line(1, &format!("let b_base = {};", ctx.offset(&idx, &out.shape, &b.shape)));
    sh.line(1, &format!("let row0 = tm * {TILE}u;"));
    sh.line(1, &format!("let col0 = tn * {TILE}u;"));
    sh.line(1, "let tx = lid % 16u;");
    sh.line(1, "let ty = lid / 16u;");
    sh.line(1, "var acc: array<vec4<f32>, 4>;");
    sh.line(1, &format!("for (var k0 = 0u; k0 < k; k0 = k0 + {DEPTH}u) {{"));
    sh.line(2, "// Stage a 64x16 slice of A and a 16x64 slice of B, zero-padded at the edges.");
    sh.line(2, &format!("for (var q = 0u; q < {}u; q = q + 1u) {{", TILE * DEPTH / WG));
    sh.line(3, &format!("let e = lid + q * {WG}u;"));
    sh.line(3, &format!("let ar = row0 + e / {DEPTH}u;"));
    sh.line(3, &format!("let ak = k0 + e % {DEPTH}u;"));
    sh.line(3, "var av = 0.0;");
    sh.line(3, &format!("if (ar < m && ak < k) {{ av = {}; }}", sh.load("a", "a_base + ar * k + ak")));
    sh.line(3, &format!("a_tile[(e % {DEPTH}u) * {TILE}u + e / {DEPTH}u] = av;"));
    sh.line(3, &format!("let bk = k0 + e / {TILE}u;"));
    sh.line(3, &format!("let bc = col0 + e % {TILE}u;"));
    sh.line(3, "var bv = 0.0;");
    sh.line(3, &format!("if (bk < k && bc < n) {{ bv = {}; }}", sh.load("b", "b_base + bk * n + bc")));
    sh.line(3, "b_tile[e] = bv;");
    sh.line(2, "}");
    sh.line(2, "workgroupBarrier();");
    sh.line(2, &format!("for (var kk = 0u; kk < {DEPTH}u; kk = kk + 1u) {{"));
    sh.line(3, &format!("let s = kk * {TILE}u;"));
    sh.line(3, "let av = vec4<f32>(a_tile[s + ty], a_tile[s + ty + 16u], a_tile[s + ty + 32u], a_tile[s + ty + 48u]);");
    sh.line(3, "let bv = vec4<f32>(b_tile[s + tx], b_tile[s + tx + 16u], b_tile[s + tx + 32u], b_tile[s + tx + 48u]);");
    for (i, c) in ["x", "y", "z", "w"].iter().enumerate() {
        sh.line(3, &format!("acc[{i}] = acc[{i}] + av.{c} * bv;"));
    }
    sh.line(2, "}");
    sh.line(2, "workgroupBarrier();");
    sh.line(1, "}");
    sh.line(1, "let o_base = bi * m * n;");
    sh.line(1, "for (var i = 0u; i < 4u; i = i + 1u) {");
    sh.line(2, "for (var j = 0u; j < 4u; j = j + 1u) {");
    sh.line(3, "let row = row0 + ty + 16u * i;");
    sh.line(3, "let col = col0 + tx + 16u * j;");
    sh.line(3, "if (row < m && col < n) {");
    let mut v = "acc[i][j]".to_string();
    if let Some(bias) = ops.get(2) {
        let mut full = idx.clone();
        full[r - 2] = "row".into();
        full[r - 1] = "col".into();
        v = format!("{v} + {}", sh.load("bias", &ctx.offset(&full, &out.shape, &bias.shape)));
    }
    let v = helpers::round(&mut sh, out.dtype, &v);
    sh.line(4, &format!("let v = {v};"));
    let v = helpers::activation(&mut sh, act, "v");
    let v = helpers::round(&mut sh, out.dtype, &v);
    let store = sh.store("o_base + row * n + col", &v);
    sh.line(4, &store);
    sh.line(3, "}");
    sh.line(2, "}");
    sh.line(1, "}");
    let workgroups = Count::elements(batch)
        .times(Count::ceil_div(&out.shape[r - 2..r - 1], TILE as u64))
        .times(Count::ceil_div(&out.shape[r - 1..], TILE as u64));
    let (status, workgroup_bytes) = (sh.status.clone(), sh.workgroup_bytes());
    Generated { source: sh.finish(ctx), workgroup_size: WG, workgroups, names, status, workgroup_bytes }
}
