//! Graphviz DOT pictures. Inputs and params are ellipses, constants grey, ordinary ops white
//! boxes, and the fused ops that passes produce filled orange, so a before/after pair shows at
//! a glance what a pass did. Output is deterministic (nodes in printed order).

use crate::graph::Graph;
use crate::op::Op;
use crate::text::body_text;
use std::fmt::Write;

/// The graph as a DOT digraph; render with `dot -Tsvg`.
pub fn to_dot(g: &Graph) -> String {
    let numbering = g.numbering();
    let order = g.topo_order().unwrap_or_else(|_| g.node_ids().collect());
    let mut out = String::new();
    writeln!(out, "digraph {} {{", escape_id(g.name())).expect("write to String");
    out.push_str("  rankdir=TB;\n  node [fontname=\"Helvetica\", fontsize=10];\n");
    for &id in &order {
        let n = g.node(id).expect("ordered node exists");
        let mut label = format!("%{} {}", numbering[&id], n.op.name());
        match &n.op {
            Op::Input { name } | Op::Param { name } => write!(label, " {name:?}").expect("write to String"),
            Op::FusedElementwise { body } => {
                write!(label, "\n{}", body_text(body).replace("; ", "\n")).expect("write to String")
            }
            _ => {}
        }
        write!(label, "\n{}", n.ty).expect("write to String");
        if !n.provenance.is_empty() {
            write!(label, "\n@{}", n.provenance).expect("write to String");
        }
        if !n.loc.is_empty() {
            write!(label, "\n{}", crate::loc::loc_summary(&n.loc, 3)).expect("write to String");
        }
        let style = match &n.op {
            Op::Input { .. } => "shape=ellipse, style=filled, fillcolor=\"#cfe8ff\"",
            Op::Param { .. } => "shape=ellipse, style=filled, fillcolor=\"#e6e6e6\"",
            Op::Constant { .. } | Op::Iota { .. } | Op::RandomUniform { .. } => {
                "shape=box, style=\"rounded,filled\", fillcolor=\"#f2f2f2\""
            }
            op if op.is_fused() => "shape=box, style=\"filled,bold\", fillcolor=\"#ffb347\", penwidth=2",
            _ => "shape=box",
        };
        writeln!(out, "  n{} [label={}, {style}];", numbering[&id], escape_id(&label)).expect("write to String");
    }
    for &id in &order {
        for (pos, o) in g.operands(id).iter().enumerate() {
            writeln!(out, "  n{} -> n{} [label=\"{pos}\", fontsize=8];", numbering[o], numbering[&id])
                .expect("write to String");
        }
    }
    for (i, o) in g.outputs().iter().enumerate() {
        writeln!(
            out,
            "  out{i} [label={}, shape=doubleoctagon, style=filled, fillcolor=\"#c8f7c5\"];",
            escape_id(&o.name)
        )
        .expect("write to String");
        if let Some(n) = numbering.get(&o.node) {
            writeln!(out, "  n{n} -> out{i};").expect("write to String");
        }
    }
    out.push_str("}\n");
    out
}

/// A DOT quoted string; newlines become `\n` line breaks.
fn escape_id(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            c if c.is_control() => {}
            c => out.push(c),
        }
    }
    out.push('"');
    out
}
