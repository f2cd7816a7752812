//! The e-class analysis: each class's tensor type (so rules can check shapes and axes) and,
//! for splat constants, its value (so rules can check `0.5`, `sqrt(2)`, `eps`).

use super::lang::{Table, decode_with};
use egg::{Analysis, DidMerge, EGraph, Id, SymbolLang};
use rustral_ir::{Op, TensorType, infer};

/// Type and constant value of an e-class.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Data {
    /// The class's type; None when the node cannot be typed (rules never build such nodes
    /// on purpose, and extraction never picks them).
    pub ty: Option<TensorType>,
    /// The value, when the class is a splat constant.
    pub splat: Option<f64>,
    /// The iota axis, when the class is an iota.
    pub iota_axis: Option<usize>,
    /// True when the class is the causal visibility mask `cols <= rows` of iotas.
    pub causal: bool,
}

/// The analysis, holding the region's leaf table.
#[derive(Default)]
pub struct TensorAnalysis {
    /// Leaves of the region.
    pub table: Table,
}

/// Our e-graph.
pub type TensorGraph = EGraph<SymbolLang, TensorAnalysis>;

/// The type an e-node computes, from its children's data.
pub fn node_type(egraph: &TensorGraph, enode: &SymbolLang) -> Option<TensorType> {
    if let Some(leaf) = egraph.analysis.table.leaves.get(&enode.op) {
        return Some(leaf.ty.clone());
    }
    let splat = |id: Id| egraph[id].data.splat;
    let rank = |id: Id| egraph[id].data.ty.as_ref().map(TensorType::rank);
    decode_with(&egraph.analysis.table, enode, &rank, &splat, |op, operands| {
        let refs: Vec<&TensorType> =
            enode.children[..operands].iter().map(|&c| egraph[c].data.ty.as_ref()).collect::<Option<_>>()?;
        let placeholder = TensorType::new(rustral_ir::DType::F32, rustral_ir::Shape::scalar());
        infer(op, &refs, &placeholder).ok()
    })
    .flatten()
}

/// `le(cols, rows)` of an axis-1 iota `[1, s]` and an axis-0 iota `[s, 1]`.
fn is_causal_node(egraph: &TensorGraph, enode: &SymbolLang) -> bool {
    let iota = |id: Id, axis: usize| {
        let d = &egraph[id].data;
        let unit = if axis == 1 { 0 } else { 1 };
        d.iota_axis == Some(axis)
            && d.ty.as_ref().is_some_and(|t| t.rank() == 2 && t.shape.0[unit] == rustral_ir::Dim::Static(1))
    };
    enode.op.as_str() == "le" && enode.children.len() == 2 && iota(enode.children[0], 1) && iota(enode.children[1], 0)
}

/// The value of an e-node whose operands are all splat constants, when it is a float
/// arithmetic op (or a reshape or broadcast, which keep a splat's value): `sqrt(2 / pi)`,
/// `d ** -0.5` and `1 / 2` are constants to the rules, however the model spelled them.
fn folded(egraph: &TensorGraph, enode: &SymbolLang, ty: Option<&TensorType>) -> Option<f64> {
    if !ty?.dtype.is_float() {
        return None;
    }
    let splats: Vec<f64> = enode.children.iter().map(|&c| egraph[c].data.splat).collect::<Option<_>>()?;
    let splat = |id: Id| egraph[id].data.splat;
    let rank = |id: Id| egraph[id].data.ty.as_ref().map(TensorType::rank);
    let value = decode_with(&egraph.analysis.table, enode, &rank, &splat, |op, operands| match (op, &splats[..]) {
        _ if operands != splats.len() => None,
        (Op::Unary(u), [x]) => Some(u.eval(*x)),
        (Op::Binary(b), [x, y]) if !b.is_comparison() => Some(b.eval(*x, *y)),
        (Op::Reshape { .. } | Op::BroadcastTo { .. }, [x]) => Some(*x),
        _ => None,
    })??;
    value.is_finite().then_some(value)
}

impl Analysis<SymbolLang> for TensorAnalysis {
    type Data = Data;

    fn make(egraph: &mut TensorGraph, enode: &SymbolLang, _id: Id) -> Data {
        let leaf = egraph.analysis.table.leaves.get(&enode.op);
        let causal = leaf.is_some_and(|l| l.causal) || is_causal_node(egraph, enode);
        let ty = node_type(egraph, enode);
        let splat = match leaf {
            Some(l) => l.splat,
            None => folded(egraph, enode, ty.as_ref()),
        };
        Data { ty, splat, iota_axis: leaf.and_then(|l| l.iota_axis), causal }
    }

    fn merge(&mut self, a: &mut Data, b: Data) -> DidMerge {
        let mut changed_a = false;
        if a.ty.is_none() && b.ty.is_some() {
            a.ty = b.ty.clone();
            changed_a = true;
        }
        if a.splat.is_none() && b.splat.is_some() {
            a.splat = b.splat;
            changed_a = true;
        }
        if a.iota_axis.is_none() && b.iota_axis.is_some() {
            a.iota_axis = b.iota_axis;
            changed_a = true;
        }
        if !a.causal && b.causal {
            a.causal = true;
            changed_a = true;
        }
        DidMerge(changed_a, *a != b)
    }
}
