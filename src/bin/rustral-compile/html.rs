//! `--emit html`: one self-contained page (no network, no build step) that explains a compile:
//! the IR after every pass with the diff from the pass before, the optimised graph drawn with
//! its fused nodes, and every kernel with the model lines it computes, its code (the WGSL
//! shader, or the CPU kernel's op), its profiled time and its check against the primitives it
//! replaced; searchable by module path. The data is embedded as JSON, the picture as SVG, the
//! page's script and style come from `explorer.html` beside this file.

use crate::inspect::{ProfileRow, finite};
use rustral::Session;
use rustral::check_kernels::KernelCheck;
use rustral::ir::{Graph, NodeId, Op, loc_summary, op_text};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::fmt::Write;

/// The page's markup, style and script, with `<!--TITLE-->`, `<!--GRAPH-->` and `<!--DATA-->`
/// filled in.
const TEMPLATE: &str = include_str!("explorer.html");

/// Graphs with more computing nodes than this are listed, not drawn (the picture would be
/// too large to read or to render quickly).
const MAX_DRAWN: usize = 2_000;

/// What a run measured, when it ran.
pub struct Measured<'a> {
    pub profile: Option<&'a [ProfileRow]>,
    pub checks: Option<&'a [KernelCheck]>,
    pub tolerance: f64,
}

/// The page for `session`, compiled from `traced` (the graph before any pass).
pub fn page(traced: &Graph, session: &Session, target: &str, measured: &Measured) -> String {
    let mut stages = vec![json!({"pass": "traced", "ir": rustral::ir::print(traced), "diff": Value::Null})];
    let mut before = rustral::ir::print(traced);
    let stats = &session.stats().passes;
    for (i, (pass, ir)) in session.dumps().iter().enumerate() {
        let diff = similar::TextDiff::from_lines(&before, ir);
        let changed = diff.ops().iter().any(|op| op.tag() != similar::DiffTag::Equal);
        let text = if changed {
            diff.unified_diff().context_radius(2).header("before", "after").to_string()
        } else {
            String::new()
        };
        // What the pass's rules did (a fusion pass's family rules; the clean-up's rewrites).
        let rules = stats.get(i).filter(|p| p.pass == *pass).map_or_else(Default::default, |p| p.rules.clone());
        stages.push(json!({"pass": pass, "ir": ir, "diff": text, "rules": rules}));
        before = ir.clone();
    }
    let data = json!({
        "name": session.graph().name(),
        "target": target,
        "tolerance": measured.tolerance,
        "stages": stages,
        "kernels": kernels(session, measured),
        "measured": {"profile": measured.profile.is_some(), "checks": measured.checks.is_some()},
    });
    // Markup inside a script element can end it (`</script>`, `<!--`): JSON strings may write
    // every `<` as `\u003c`, which no HTML parser reads as markup.
    let data = serde_json::to_string(&data).expect("json values serialize").replace('<', "\\u003c");
    let title = escape(&format!("{} - Rustral explorer", session.graph().name()));
    TEMPLATE
        .replace("<!--TITLE-->", &title)
        .replace("<!--GRAPH-->", &svg(session.graph()))
        .replace("<!--DATA-->", &data)
}

/// Every kernel of the program the target runs, in schedule order, with what was measured.
fn kernels(session: &Session, measured: &Measured) -> Vec<Value> {
    let g = session.graph();
    let numbering = g.numbering();
    let by_number: HashMap<usize, NodeId> = numbering.iter().map(|(&id, &n)| (n, id)).collect();
    // (kernel name, op, module, node number, code)
    let mut rows: Vec<(String, String, String, Option<usize>, String)> = Vec::new();
    #[cfg(feature = "wgsl")]
    if let Some((wgsl, _)) = session.wgsl() {
        for k in &wgsl.kernels {
            // `out`, or `out_0`, `out_1`, ... for an output bound in ranges: one buffer.
            let out = k.bindings.iter().find(|b| b.name == "out" || b.name.starts_with("out_")).map(|b| b.buffer);
            rows.push((k.name.clone(), k.op.clone(), k.provenance.clone(), out, k.source.clone()));
        }
    }
    if rows.is_empty()
        && let Some(program) = session.program()
    {
        for (i, k) in program.kernels.iter().enumerate() {
            // A program has one buffer per node in the graph's printed order: the output
            // buffer's id is the node's number.
            let code = format!("CPU kernel: {}", op_text(&k.op));
            rows.push((format!("k{i:03}_{}", k.name), k.name.clone(), k.provenance.clone(), Some(k.output), code));
        }
    }
    // Profile rows name their kernel by its index in the program, as the rows here are.
    let profile: HashMap<usize, f64> = measured.profile.unwrap_or_default().iter().map(|p| (p.kernel, p.ms)).collect();
    rows.into_iter()
        .enumerate()
        .map(|(k, (name, op, module, node, code))| {
            let graph_node = node.and_then(|n| by_number.get(&n)).and_then(|id| g.node(*id));
            let locs = graph_node.map(|n| n.loc.clone()).unwrap_or_default();
            let source = loc_summary(&locs, usize::MAX);
            let fused = graph_node.is_some_and(|n| n.op.is_fused());
            let ms = profile.get(&k);
            let check = node.and_then(|n| measured.checks?.iter().find(|c| c.node == n)).map(|c| {
                let rules: Vec<String> = c.rules.iter().map(|r| format!("{} ({})", r.rule, r.pass)).collect();
                json!({"max_abs": finite(c.max_abs), "max_rel": finite(c.max_rel), "rules": rules, "ok": c.ok(measured.tolerance)})
            });
            json!({"name": name, "op": op, "module": module, "node": node, "source": source, "lines": lines(&locs),
                   "fused": fused, "code": code, "ms": ms, "check": check})
        })
        .collect()
}

/// The optimised graph as SVG: computing nodes (and inputs) by depth, one row per depth,
/// fused nodes highlighted; parameters and constants are left out (their users' operands).
fn svg(g: &Graph) -> String {
    let Ok(order) = g.topo_order() else { return String::new() };
    let numbering = g.numbering();
    let shown = |id: NodeId| g.node(id).is_some_and(|n| !n.op.is_source() || matches!(n.op, Op::Input { .. }));
    let drawn: Vec<NodeId> = order.iter().copied().filter(|&id| shown(id)).collect();
    if drawn.len() > MAX_DRAWN {
        return format!("<p class=\"note\">{} nodes: too many to draw (over {MAX_DRAWN}).</p>", drawn.len());
    }
    let mut depth: HashMap<NodeId, usize> = HashMap::new();
    let mut rows: Vec<Vec<NodeId>> = Vec::new();
    for &id in &drawn {
        let d = g.operands(id).iter().filter_map(|o| depth.get(o)).map(|d| d + 1).max().unwrap_or(0);
        depth.insert(id, d);
        if rows.len() <= d {
            rows.resize(d + 1, Vec::new());
        }
        rows[d].push(id);
    }
    let (w, h, gap_x, gap_y) = (150.0, 30.0, 20.0, 34.0);
    let widest = rows.iter().map(Vec::len).max().unwrap_or(1) as f64;
    let width = widest * (w + gap_x) + gap_x;
    let height = rows.len() as f64 * (h + gap_y) + gap_y;
    let mut at: HashMap<NodeId, (f64, f64)> = HashMap::new();
    for (r, row) in rows.iter().enumerate() {
        let offset = (width - row.len() as f64 * (w + gap_x) + gap_x) / 2.0;
        for (i, &id) in row.iter().enumerate() {
            at.insert(id, (offset + i as f64 * (w + gap_x), gap_y + r as f64 * (h + gap_y)));
        }
    }
    let mut out = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" id=\"graph\" width=\"{width:.0}\" height=\"{height:.0}\" viewBox=\"0 0 {width:.0} {height:.0}\">\n"
    );
    for &id in &drawn {
        let (x, y) = at[&id];
        for o in g.operands(id) {
            if let Some(&(ox, oy)) = at.get(&o) {
                writeln!(
                    out,
                    "<line x1=\"{:.1}\" y1=\"{:.1}\" x2=\"{:.1}\" y2=\"{y:.1}\"/>",
                    ox + w / 2.0,
                    oy + h,
                    x + w / 2.0
                )
                .expect("write to String");
            }
        }
    }
    for &id in &drawn {
        let n = g.node(id).expect("drawn nodes exist");
        let (x, y) = at[&id];
        let class = if n.op.is_fused() { "node fused" } else { "node" };
        let label = match &n.op {
            Op::Input { name } => format!("input {name}"),
            op => op.name().to_string(),
        };
        let tip =
            format!("%{} {}\n{}\n{}\n{}", numbering[&id], op_text(&n.op), n.ty, n.provenance, loc_summary(&n.loc, 8));
        writeln!(
            out,
            "<g class=\"{class}\" data-node=\"{}\" data-module=\"{}\" data-lines=\"{}\"><title>{}</title><rect x=\"{x:.1}\" y=\"{y:.1}\" width=\"{w}\" height=\"{h}\" rx=\"5\"/><text x=\"{:.1}\" y=\"{:.1}\">{}</text></g>",
            numbering[&id],
            escape(&n.provenance),
            escape(&lines(&n.loc).join("\n")),
            escape(&tip),
            x + w / 2.0,
            y + h / 2.0 + 4.0,
            escape(&clip(&label, 20))
        )
        .expect("write to String");
    }
    out.push_str("</svg>");
    out
}

/// Every `file:line` the locations name, once each: what the filter matches exactly.
fn lines(locs: &[rustral::ir::SourceLoc]) -> Vec<String> {
    let mut out: Vec<String> = locs.iter().map(|l| format!("{}:{}", l.file, l.line)).collect();
    out.dedup();
    out
}

fn clip(s: &str, n: usize) -> String {
    if s.chars().count() <= n { s.to_string() } else { format!("{}…", s.chars().take(n - 1).collect::<String>()) }
}

/// Text as HTML character data or an attribute value.
fn escape(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}
