//! `dequantize` and `quant_matmul` on GGML block formats, with the blocks unpacked in the
//! shader: the weights stay in their file's bytes (`bytes` storage, four to a word) and are
//! never widened in device memory.
//!
//! Every format splits into groups of 32 consecutive weights that share their scales (a whole
//! block of Q8_0, Q4_0 and Q4_1; one of the 8 sub-blocks of Q4_K, Q5_K and Q6_K's 256). The
//! generator writes the unpacking of group `j` of the block at byte `base` of the `w` binding
//! as straight-line code that leaves the 32 weights in eight `vec4<f32>` values `v0..v7`
//! (registers on every host: no private array indexed at run time), following
//! `rustral_ir::quant` operation by operation in f32. Quants are read a word at a time (two
//! words and a funnel shift where a format's blocks are not word-aligned); f16 scales are
//! decoded from their bits, subnormals included, so no host's `unpack2x16float` matters.
//!
//! `quant_matmul` gives each invocation one output column and a tile of up to 4 rows of `x`:
//! it walks its column's groups, unpacks each once for the tile's rows and keeps one register
//! accumulator per row, so no workgroup memory or barrier is needed. On lavapipe (a CPU
//! running invocations as SIMD lanes) this is 3.5x faster than 8 lanes per column joined in
//! workgroup memory: neighbouring invocations then read the same `x`.

use super::emit::{Ctx, Head, Shader};
use super::{Count, Generated, Operand};
use rustral_ir::QuantFormat;

/// Invocations per workgroup, one output column each.
const WG: u32 = 64;
/// Rows of `x` per invocation (fewer when `x` has fewer, as in decode): a group is unpacked
/// once for this many rows. On lavapipe 4 rows run prefill 10% faster than 1, and 8 no faster
/// than 4; unrolled rows a one-row `x` does not have would halve decode's speed.
const ROWS: u64 = 4;

/// Reading `w`: byte `i`, the word at any byte offset (`W(j)` stands for word `j` of `w`, see
/// [`words`]), an f16 from its 16 bits.
const WORDS: &str = "fn byte_at(i: u32) -> u32 {
    return (W(i >> 2u) >> ((i & 3u) * 8u)) & 255u;
}

fn word_at(i: u32) -> u32 {
    let s = (i & 3u) * 8u;
    let lo = W(i >> 2u);
    if (s == 0u) { return lo; }
    return (lo >> s) | (W((i >> 2u) + 1u) << (32u - s));
}

fn f16_bits(h: u32) -> f32 {
    let sign = (h & 32768u) << 16u;
    let e = (h >> 10u) & 31u;
    let m = h & 1023u;
    if (e == 0u) {
        return bitcast<f32>(sign | bitcast<u32>(ldexp(f32(m), -24)));
    }
    return bitcast<f32>(sign | (select(e + 112u, 255u, e == 31u) << 23u) | (m << 13u));
}

fn nibbles(q: u32, shift: u32) -> vec4<f32> {
    return vec4<f32>((vec4<u32>(q) >> (vec4<u32>(0u, 8u, 16u, 24u) + vec4<u32>(shift))) & vec4<u32>(15u));
}
";

/// [`WORDS`] reading this shader's `w` (whole or split).
fn words(sh: &Shader) -> String {
    WORDS.replace("W(i >> 2u)", &sh.at("w", "i >> 2u")).replace("W((i >> 2u) + 1u)", &sh.at("w", "(i >> 2u) + 1u"))
}

/// K-quants' 6-bit scale and minimum of sub-block `j` from the 12 bytes at `s`.
const K_SCALES: &str = "fn k_scale(s: u32, j: u32) -> u32 {
    if (j < 4u) { return byte_at(s + j) & 63u; }
    return (byte_at(s + j + 4u) & 15u) | ((byte_at(s + j - 4u) >> 6u) << 4u);
}

fn k_min(s: u32, j: u32) -> u32 {
    if (j < 4u) { return byte_at(s + j + 4u) & 63u; }
    return (byte_at(s + j + 4u) >> 4u) | ((byte_at(s + j) >> 6u) << 4u);
}
";

/// Lines (at `indent`) unpacking group `j` of the block at byte `base` into `v0..v7`, each
/// four consecutive weights. `aligned`: every block starts on a word, so quants load whole.
fn unpack(sh: &mut Shader, indent: usize, format: QuantFormat, aligned: bool) {
    sh.item(words(sh));
    // Word `#` of `w`, as this shader reads it.
    let at = sh.at("w", "#");
    let word = |off: &str| {
        if aligned { at.replace('#', &format!("(base + {off}) >> 2u")) } else { format!("word_at(base + {off})") }
    };
    let mut lines: Vec<String> = Vec::new();
    match format {
        QuantFormat::Q8_0 | QuantFormat::Q4_0 => {
            lines.push(format!("let d = f16_bits({} & 65535u);", word("0u")));
            if format == QuantFormat::Q8_0 {
                for c in 0..8 {
                    lines.push(format!("let q{c} = {};", word(&format!("{}u", 2 + 4 * c))));
                    lines.push(format!(
                        "let v{c} = d * vec4<f32>(bitcast<vec4<i32>>(vec4<u32>(q{c}) << vec4<u32>(24u, 16u, 8u, 0u)) >> vec4<u32>(24u));"
                    ));
                }
            } else {
                for c in 0..4 {
                    lines.push(format!("let q{c} = {};", word(&format!("{}u", 2 + 4 * c))));
                    lines.push(format!("let v{c} = d * (nibbles(q{c}, 0u) - vec4<f32>(8.0));"));
                    lines.push(format!("let v{} = d * (nibbles(q{c}, 4u) - vec4<f32>(8.0));", c + 4));
                }
            }
        }
        QuantFormat::Q4_1 => {
            lines.push(format!("let dm = {};", word("0u")));
            lines.push("let d = f16_bits(dm & 65535u);".into());
            lines.push("let m = f16_bits(dm >> 16u);".into());
            for c in 0..4 {
                lines.push(format!("let q{c} = {};", word(&format!("{}u", 4 + 4 * c))));
                lines.push(format!("let v{c} = d * nibbles(q{c}, 0u) + vec4<f32>(m);"));
                lines.push(format!("let v{} = d * nibbles(q{c}, 4u) + vec4<f32>(m);", c + 4));
            }
        }
        QuantFormat::Q4K | QuantFormat::Q5K => {
            sh.item(K_SCALES.to_string());
            lines.push(format!("let dm = {};", word("0u")));
            lines.push("let d1 = f16_bits(dm & 65535u) * f32(k_scale(base + 4u, j));".into());
            lines.push("let m1 = f16_bits(dm >> 16u) * f32(k_min(base + 4u, j));".into());
            let qs = if format == QuantFormat::Q4K { 16 } else { 48 };
            lines.push(format!("let qs = {qs}u + (j / 2u) * 32u;"));
            lines.push("let shift = 4u * (j % 2u);".into());
            for c in 0..8 {
                lines.push(format!("let q{c} = {};", word(&format!("qs + {}u", 4 * c))));
                if format == QuantFormat::Q4K {
                    lines.push(format!("let v{c} = d1 * nibbles(q{c}, shift) - vec4<f32>(m1);"));
                } else {
                    lines.push(format!("let h{c} = {};", word(&format!("{}u", 16 + 4 * c))));
                    lines.push(format!(
                        "let v{c} = d1 * (nibbles(q{c}, shift) + 16.0 * vec4<f32>((vec4<u32>(h{c}) >> (vec4<u32>(0u, 8u, 16u, 24u) + vec4<u32>(j))) & vec4<u32>(1u))) - vec4<f32>(m1);"
                    ));
                }
            }
        }
        QuantFormat::Q6K => {
            // The scale is the block's last 2 bytes: read the word ending there, not one
            // reaching past the end of the buffer.
            lines.push(format!("let d = f16_bits({} >> 16u);", word("206u")));
            lines.push("let i = j % 4u;".into());
            lines.push("let ql = (j / 4u) * 64u + (i % 2u) * 32u;".into());
            lines.push("let qh = 128u + (j / 4u) * 32u;".into());
            lines.push("let sc = 192u + (j / 4u) * 8u + 2u * i;".into());
            lines.push("let d0 = d * f32(bitcast<i32>(byte_at(base + sc) << 24u) >> 24u);".into());
            lines.push("let d1 = d * f32(bitcast<i32>(byte_at(base + sc + 1u) << 24u) >> 24u);".into());
            for c in 0..8 {
                lines.push(format!("let q{c} = {};", word(&format!("ql + {}u", 4 * c))));
                lines.push(format!("let h{c} = {};", word(&format!("qh + {}u", 4 * c))));
                let scale = if c < 4 { "d0" } else { "d1" };
                lines.push(format!(
                    "let v{c} = {scale} * (nibbles(q{c}, (i / 2u) * 4u) + 16.0 * vec4<f32>((vec4<u32>(h{c}) >> (vec4<u32>(0u, 8u, 16u, 24u) + vec4<u32>(2u * i))) & vec4<u32>(3u)) - vec4<f32>(32.0));"
                ));
            }
        }
    }
    for l in lines {
        sh.line(indent, &l);
    }
}

/// Static facts about a row of blocks: groups per block, bytes per block, bytes per row,
/// groups per row, and whether every block starts on a word.
fn layout(format: QuantFormat, w: &Operand) -> Result<(u64, u64, u64, u64, bool), String> {
    let rb = match w.shape.last().and_then(|d| d.as_static()) {
        Some(n) => n as u64,
        None => return Err("a row of quantized blocks needs a static width".into()),
    };
    let per_block = format.block_size() as u64 / 32;
    let bb = format.block_bytes() as u64;
    Ok((per_block, bb, rb, rb / bb * per_block, rb.is_multiple_of(4) && bb.is_multiple_of(4)))
}

/// `dequantize`: one invocation per group of 32 weights.
pub(crate) fn dequantize(
    ctx: &Ctx,
    head: &Head,
    format: QuantFormat,
    ops: &[Operand],
    out: &Operand,
) -> Result<Generated, String> {
    let w = &ops[0];
    let (per_block, bb, rb, groups, aligned) = layout(format, w)?;
    let mut sh = Shader::new(head, &[("w", w)], out, WG);
    let rows = &w.shape[..w.shape.len() - 1];
    sh.line(1, &format!("let gi = group * {WG}u + lid;"));
    sh.line(1, &format!("if (gi >= {} * {groups}u) {{ return; }}", ctx.prod(rows)));
    sh.line(1, &format!("let row = gi / {groups}u;"));
    sh.line(1, &format!("let g = gi % {groups}u;"));
    sh.line(1, &format!("let base = row * {rb}u + (g / {per_block}u) * {bb}u;"));
    sh.line(1, &format!("let j = g % {per_block}u;"));
    unpack(&mut sh, 1, format, aligned);
    sh.line(1, "let o = gi * 32u;");
    for c in 0..8 {
        for (e, lane) in ["x", "y", "z", "w"].iter().enumerate() {
            let put = sh.put(&format!("o + {}u", 4 * c + e), &format!("v{c}.{lane}"));
            sh.line(1, &put);
        }
    }
    // ceil(rows * groups / WG): one term, the groups folded into its static factor.
    let mut workgroups = Count::ceil_div(rows, WG as u64);
    workgroups.0[0].factor *= groups;
    let (status, workgroup_bytes) = (sh.status.clone(), sh.workgroup_bytes());
    Ok(Generated {
        source: sh.finish(ctx),
        workgroup_size: WG,
        workgroups,
        names: vec!["w".into()],
        status,
        workgroup_bytes,
    })
}

/// `quant_matmul`: `x[..., k] @ dequantize(w[n, row_bytes])^T`.
pub(crate) fn quant_matmul(
    ctx: &Ctx,
    head: &Head,
    format: QuantFormat,
    ops: &[Operand],
    out: &Operand,
) -> Result<Generated, String> {
    let (x, w) = (&ops[0], &ops[1]);
    let (per_block, bb, rb, groups, aligned) = layout(format, w)?;
    let names = vec!["x".to_string(), "w".to_string()];
    let mut sh = Shader::new(head, &[("x", x), ("w", w)], out, WG);
    let rows = &x.shape[..x.shape.len() - 1];
    let static_rows: Option<u64> = rows.iter().map(|d| d.as_static().map(|n| n as u64)).product();
    let tile = static_rows.map_or(ROWS, |m| m.clamp(1, ROWS));
    let k = groups * 32;
    sh.line(1, &format!("let m = {};", ctx.prod(rows)));
    sh.line(1, &format!("let n = {};", ctx.dim(&w.shape[0])));
    sh.line(1, &format!("let tiles_n = (n + {}u) / {WG}u;", WG - 1));
    sh.line(1, &format!("if (group >= tiles_n * ((m + {}u) / {tile}u)) {{ return; }}", tile - 1));
    sh.line(1, &format!("let col = (group % tiles_n) * {WG}u + lid;"));
    sh.line(1, &format!("let row0 = (group / tiles_n) * {tile}u;"));
    sh.line(1, &format!("let rows = min({tile}u, m - row0);"));
    sh.line(1, "if (col >= n) { return; }");
    for r in 0..tile {
        sh.line(1, &format!("var acc{r} = 0.0;"));
    }
    sh.line(1, &format!("for (var g = 0u; g < {groups}u; g = g + 1u) {{"));
    sh.line(2, &format!("let base = col * {rb}u + (g / {per_block}u) * {bb}u;"));
    sh.line(2, &format!("let j = g % {per_block}u;"));
    unpack(&mut sh, 2, format, aligned);
    sh.line(2, &format!("let x0 = row0 * {k}u + g * 32u;"));
    // Rows unrolled, so the accumulators stay registers.
    for r in 0..tile {
        sh.line(2, &format!("if ({r}u < rows) {{"));
        sh.line(3, &format!("let xo = x0 + {}u;", r * k));
        let terms: Vec<String> = (0..8)
            .map(|c| {
                let e = 4 * c;
                let x: Vec<String> = (e..e + 4).map(|i| sh.at("x", &format!("xo + {i}u"))).collect();
                format!("dot(v{c}, vec4<f32>({}))", x.join(", "))
            })
            .collect();
        sh.line(
            3,
            &format!(
                "acc{r} = acc{r} + ((({} + {}) + ({} + {})) + (({} + {}) + ({} + {})));",
                terms[0], terms[1], terms[2], terms[3], terms[4], terms[5], terms[6], terms[7]
            ),
        );
        sh.line(2, "}");
    }
    sh.line(1, "}");
    for r in 0..tile {
        let put = sh.put(&format!("(row0 + {r}u) * n + col"), &format!("acc{r}"));
        sh.line(1, &format!("if ({r}u < rows) {{ {put} }}"));
    }
    let workgroups = Count::ceil_div(&w.shape[..1], WG as u64).times(Count::ceil_div(rows, tile));
    let (status, workgroup_bytes) = (sh.status.clone(), sh.workgroup_bytes());
    Ok(Generated { source: sh.finish(ctx), workgroup_size: WG, workgroups, names, status, workgroup_bytes })
}
