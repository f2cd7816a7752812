//! The text form, one line per node:
//!
//! ```text
//! graph "mlp" {
//!   %0: f32[batch, 8] = input "x"
//!   %1: f32[8, 4] = param "w"                      @layer0
//!   %2: f32[batch, 4] = matmul %0, %1              @layer0 loc("mlp.rs":9:15)
//!   %3: f32[batch, 1] = reduce_mean %2 {axes=[1], keepdim=true}
//!   output "y" = %3
//! }
//! ```
//!
//! Nodes are numbered in the graph's deterministic topological order, so the same graph
//! always prints the same bytes and `parse` reads back an equal graph. Attributes sit in
//! braces; a fused elementwise body is a `;`-separated list of `tN = ...` lines; provenance
//! follows `@` (quoted when it is not a plain path), then the model source lines that made
//! the node as `loc("model.rs":9:15, ...)`. `#` starts a comment.

use crate::graph::Graph;
use crate::loc::SourceLoc;
use crate::op::{ElementwiseExpr, ExprNode, Literal, Op};
use std::fmt::Write;

/// Column at which provenance is aligned (longer lines push it right).
const PROVENANCE_COLUMN: usize = 56;

/// Print a graph in the text form.
pub fn print(g: &Graph) -> String {
    let numbering = g.numbering();
    let order = g.topo_order().unwrap_or_else(|_| g.node_ids().collect());
    let mut out = format!("graph {} {{\n", quote(g.name()));
    for id in order {
        let node = g.node(id).expect("ordered node exists");
        let operands: Vec<String> = g.operands(id).iter().map(|o| format!("%{}", numbering[o])).collect();
        let mut line = format!("  %{}: {} = {}", numbering[&id], node.ty, node.op.name());
        match &node.op {
            Op::Input { name } | Op::Param { name } => write!(line, " {}", quote(name)).expect("write to String"),
            Op::Constant { value } => write!(line, " {}", literal(value)).expect("write to String"),
            _ => {}
        }
        if !operands.is_empty() {
            write!(line, " {}", operands.join(", ")).expect("write to String");
        }
        let attrs = attributes(&node.op);
        if !attrs.is_empty() {
            write!(line, " {{{attrs}}}").expect("write to String");
        }
        if !node.provenance.is_empty() || !node.loc.is_empty() {
            let pad = PROVENANCE_COLUMN.saturating_sub(line.chars().count()).max(2);
            line.push_str(&" ".repeat(pad));
        }
        if !node.provenance.is_empty() {
            line.push('@');
            line.push_str(&provenance(&node.provenance));
        }
        if !node.loc.is_empty() {
            if !node.provenance.is_empty() {
                line.push(' ');
            }
            line.push_str(&loc_text(&node.loc));
        }
        out.push_str(&line);
        out.push('\n');
    }
    for o in g.outputs() {
        let n = numbering.get(&o.node).map_or_else(|| "?".to_string(), |n| n.to_string());
        writeln!(out, "  output {} = %{n}", quote(&o.name)).expect("write to String");
    }
    out.push_str("}\n");
    out
}

/// `loc("model.rs":9:15, "model.rs":10:3)`, MLIR's spelling of source locations.
fn loc_text(locs: &[SourceLoc]) -> String {
    let items: Vec<String> = locs.iter().map(|l| format!("{}:{}:{}", quote(&l.file), l.line, l.col)).collect();
    format!("loc({})", items.join(", "))
}

fn literal(v: &Literal) -> String {
    match v {
        Literal::Splat(x) => x.to_string(),
        Literal::Dense(xs) => format!("[{}]", xs.iter().map(|x| x.to_string()).collect::<Vec<_>>().join(", ")),
    }
}

/// An op as the text form writes it, without operands: `layer_norm {eps=1e-5}`.
pub fn op_text(op: &Op) -> String {
    let attrs = attributes(op);
    if attrs.is_empty() { op.name().to_string() } else { format!("{} {{{attrs}}}", op.name()) }
}

/// The text inside an op's braces (empty when it has no attributes): the op's declared
/// attributes, or a fused body.
fn attributes(op: &Op) -> String {
    match op {
        Op::FusedElementwise { body } => body_text(body),
        _ => op.attr_text(),
    }
}

/// A fused body: `t0 = arg 0; t1 = const 1.0 f32; t2 = mul t0, t1`.
pub fn body_text(body: &ElementwiseExpr) -> String {
    let items: Vec<String> = body
        .nodes
        .iter()
        .enumerate()
        .map(|(i, n)| {
            let rhs = match n {
                ExprNode::Arg(a) => format!("arg {a}"),
                ExprNode::Const { value, dtype } => format!("const {value} {dtype}"),
                ExprNode::Unary(u, x) => format!("{} t{x}", u.name()),
                ExprNode::Binary(b, x, y) => format!("{} t{x}, t{y}", b.name()),
                ExprNode::Where(c, x, y) => format!("where t{c}, t{x}, t{y}"),
                ExprNode::Cast(to, x) => format!("cast t{x} to {to}"),
            };
            format!("t{i} = {rhs}")
        })
        .collect();
    items.join("; ")
}

/// True for characters that may appear in an unquoted provenance path.
pub(crate) fn is_path_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-' | '/' | ':')
}

fn provenance(p: &str) -> String {
    if p.chars().all(is_path_char) { p.to_string() } else { quote(p) }
}

/// A double-quoted string with `\"`, `\\`, `\n`, `\t` and `\u{..}` escapes for control chars.
pub(crate) fn quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() => write!(out, "\\u{{{:x}}}", c as u32).expect("write to String"),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}
