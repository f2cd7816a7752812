//! The bridge between graph nodes and egg's `SymbolLang`: each op is a symbol, its text IR
//! spelling without spaces and with axes counted from the end so that one rule serves every
//! rank (`Op::symbol`), and every value the region does not compute (inputs, params,
//! constants, other regions) is a childless leaf. Rules build fused ops in the same spelling,
//! their scalar attributes (eps, scale) taken from constant children; `decode` turns any
//! symbol back into an IR op through the op declarations, so this file names no op.

use egg::{Id, Symbol, SymbolLang};
use rustral_ir::{BinaryOp, Dim, F64, Graph, Literal, NodeId, Op, TensorType};
use std::cell::RefCell;
use std::collections::HashMap;

/// What a leaf symbol stands for.
#[derive(Clone, Debug)]
pub struct Leaf {
    /// The graph node it reads.
    pub node: NodeId,
    /// Its type.
    pub ty: TensorType,
    /// Its value, when it is a splat constant.
    pub splat: Option<f64>,
    /// The iota axis, when it is an iota (the causal-mask rule looks for them).
    pub iota_axis: Option<usize>,
    /// True when it is a causal visibility mask computed elsewhere (`cols <= rows` of iotas,
    /// shared between layers by CSE).
    pub causal: bool,
}

/// Leaves by symbol, and the ops already decoded from symbols.
#[derive(Clone, Debug, Default)]
pub struct Table {
    /// Symbol to leaf.
    pub leaves: HashMap<Symbol, Leaf>,
    /// The op each (symbol, first operand rank) spells: decoding parses the attributes, and
    /// saturation and extraction ask for the same few symbols many times over.
    decoded: RefCell<HashMap<(Symbol, usize), Option<Op>>>,
}

impl Table {
    /// The leaf symbol of graph node `id`: splat constants and iotas are named by value and
    /// type (so equal ones share an e-class), anything else by node.
    pub fn leaf(&mut self, g: &Graph, id: NodeId) -> Symbol {
        let node = g.node(id).expect("leaf node exists");
        let ty = compact(&node.ty.to_string());
        let (name, splat, iota_axis) = match &node.op {
            Op::Constant { value: Literal::Splat(v) } => (format!("const[{ty}]{v}"), Some(v.0), None),
            Op::Iota { axis } => (format!("iota[{ty}]{axis}"), None, Some(*axis)),
            _ => (format!("leaf%{}", id.index()), None, None),
        };
        let sym = Symbol::from(name);
        let causal = is_causal_visibility(g, id);
        self.leaves.entry(sym).or_insert(Leaf { node: id, ty: node.ty.clone(), splat, iota_axis, causal });
        sym
    }
}

/// `le(cols, rows)` with `cols` an iota along axis 1 of shape `[1, s]` and `rows` an iota
/// along axis 0 of shape `[s, 1]`: true where key `j` <= query `i`.
pub fn is_causal_visibility(g: &Graph, id: NodeId) -> bool {
    let Some(node) = g.node(id) else { return false };
    if node.op != Op::Binary(BinaryOp::Le) {
        return false;
    }
    let ops = g.operands(id);
    let iota = |n: NodeId, axis: usize, unit: usize| {
        g.node(n).is_some_and(|x| x.op == Op::Iota { axis } && x.ty.rank() == 2 && x.ty.shape.0[unit] == Dim::Static(1))
    };
    ops.len() == 2 && iota(ops[0], 1, 0) && iota(ops[1], 0, 1)
}

/// Text without spaces, so it can sit inside an s-expression symbol.
fn compact(s: &str) -> String {
    s.replace(' ', "")
}

/// The symbol of a non-source op whose first operand has rank `rank` (the op's text
/// spelling, axes from the end: `reduce_mean{axes=[-1],keepdim=true}`); None for ops the
/// fusion rules treat as opaque (sources, fused elementwise bodies).
pub fn encode(op: &Op, rank: usize) -> Option<String> {
    if op.is_source() || matches!(op, Op::FusedElementwise { .. }) {
        return None;
    }
    Some(op.symbol(rank))
}

/// The IR op of an e-node and how many of its children are operands; None for a leaf.
///
/// Rules write the ops they build in the same spelling, with one convention: an attribute
/// computed from a matched constant (an eps, an attention scale) is written `$`, or `1/$` for
/// its reciprocal, and the constant is the e-node's last child, which is not an operand
/// (`(layer_norm{eps=$} ?x ?eps)`). `rank(i)` and `splat(i)` give child `i`'s rank and value.
pub fn decode(
    table: &Table,
    node: &SymbolLang,
    rank: &dyn Fn(Id) -> Option<usize>,
    splat: &dyn Fn(Id) -> Option<f64>,
) -> Option<(Op, usize)> {
    decode_with(table, node, rank, splat, |op, operands| (op.clone(), operands))
}

/// `f` of what [`decode`] gives, without copying the op out of the table's cache (the
/// analysis and the cost model ask for every e-node's op many times).
pub fn decode_with<R>(
    table: &Table,
    node: &SymbolLang,
    rank: &dyn Fn(Id) -> Option<usize>,
    splat: &dyn Fn(Id) -> Option<f64>,
    f: impl FnOnce(&Op, usize) -> R,
) -> Option<R> {
    let s = node.op.as_str();
    let n = node.children.len();
    let rank = node.children.first().and_then(|&c| rank(c)).unwrap_or(0);
    if s.contains('$') {
        let c = splat(*node.children.last()?)?;
        let text = s.replace("1/$", &F64(1.0 / c).to_string()).replace('$', &F64(c).to_string());
        return Some(f(&Op::from_symbol(&text, rank)?, n - 1));
    }
    let mut decoded = table.decoded.borrow_mut();
    let op = decoded.entry((node.op, rank)).or_insert_with(|| Op::from_symbol(s, rank)).as_ref()?;
    Some(f(op, n))
}
