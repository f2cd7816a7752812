//! Reverse-mode autodiff as an IR-to-IR transform. [`grad`] takes a graph, the name of a scalar
//! output (the loss) and the inputs or parameters to differentiate, and returns a graph that
//! computes every original output plus `grad.<name>` for each of them. The backward graph is
//! an ordinary graph: it goes through the same passes and lowers to every target.
//!
//! Every primitive op has a VJP rule written in IR ops (`rules.rs`), with broadcasting summed
//! back to each operand's shape and fan-out accumulated. A fused op (LayerNorm, RMSNorm,
//! softmax, GELU, SiLU, attention, matmul epilogues, fused elementwise bodies) is first
//! written out as the primitives it means (`expand.rs`) and the primitives are differentiated;
//! O2 then fuses forward and backward alike.

mod build;
mod expand;
mod rules;
mod window;

use build::Builder;
use rustral_ir::{Graph, IrError, NodeId};
use std::collections::{BTreeSet, HashMap};
use thiserror::Error;

/// Why differentiation failed; every message names the pass (`grad`) and, for an op, its node,
/// op and module path.
#[derive(Debug, Error)]
pub enum GradError {
    /// The loss is not an output of the graph.
    #[error("grad: the graph has no output {name:?} (it has: {known})")]
    UnknownOutput {
        /// The name asked for.
        name: String,
        /// The outputs it has.
        known: String,
    },
    /// A name to differentiate is not an input or parameter.
    #[error("grad: {name:?} is not an input or parameter of the graph")]
    UnknownSource {
        /// The name asked for.
        name: String,
    },
    /// The loss is not a float scalar.
    #[error("grad: the loss {name:?} must be a float scalar, but it is {ty}")]
    NotScalar {
        /// Output name.
        name: String,
        /// Its type.
        ty: String,
    },
    /// An op whose gradient the pass cannot write.
    #[error("grad: node %{node} ({op} at {provenance:?}): {message}")]
    Unsupported {
        /// Node index.
        node: usize,
        /// Op name.
        op: String,
        /// Module path.
        provenance: String,
        /// Why.
        message: String,
    },
    /// Building a backward node failed (a bug in a rule), with the IR's message.
    #[error("grad: building the gradient of node %{node} ({op} at {provenance:?}): {source}")]
    Ir {
        /// Node index.
        node: usize,
        /// Op name.
        op: String,
        /// Module path.
        provenance: String,
        /// The IR's error.
        source: IrError,
    },
}

/// The output name under which the gradient with respect to `name` is returned.
pub fn grad_output_name(name: &str) -> String {
    format!("grad.{name}")
}

/// Differentiate output `loss` of `g` with respect to the inputs or parameters `wrt`.
pub fn grad(g: &Graph, loss: &str, wrt: &[String]) -> Result<Graph, GradError> {
    let out_node =
        g.outputs().iter().find(|o| o.name == loss).map(|o| o.node).ok_or_else(|| GradError::UnknownOutput {
            name: loss.into(),
            known: g.outputs().iter().map(|o| o.name.as_str()).collect::<Vec<_>>().join(", "),
        })?;
    let loss_ty = g.node(out_node).expect("outputs exist").ty.clone();
    if loss_ty.rank() != 0 || !loss_ty.dtype.is_float() {
        return Err(GradError::NotScalar { name: loss.into(), ty: loss_ty.to_string() });
    }
    let sources: HashMap<String, NodeId> = g.inputs().into_iter().chain(g.params()).collect();
    let targets: Vec<NodeId> = wrt
        .iter()
        .map(|n| sources.get(n).copied().ok_or_else(|| GradError::UnknownSource { name: n.clone() }))
        .collect::<Result<_, _>>()?;

    let mut out = g.clone();
    let order = g.topo_order().expect("a verified graph is acyclic");
    let seed = {
        let mut b = Builder::new(&mut out, "", out_node);
        b.scalar(1.0, loss_ty.dtype).map_err(|e| b.ir_error(e))?
    };
    let adjoints = backprop(&mut out, &order, out_node, seed, &targets)?;
    for (name, &t) in wrt.iter().zip(&targets) {
        let node = match adjoints.get(&t) {
            Some(&a) => a,
            None => {
                // The loss does not depend on it: its gradient is zero.
                let ty = out.node(t).expect("a source").ty.clone();
                let mut b = Builder::new(&mut out, "", t);
                b.zeros(&ty).map_err(|e| b.ir_error(e))?
            }
        };
        out.set_output(&grad_output_name(name), node).map_err(|source| GradError::Ir {
            node: t.index(),
            op: "output".into(),
            provenance: String::new(),
            source,
        })?;
    }
    Ok(out)
}

/// Propagate `seed` (the adjoint of `root`) back through the nodes of `order` (a topological
/// order of a subgraph of `g`), computing adjoints only for nodes that depend on `targets`.
/// Returns the adjoint of every such node reached.
pub(crate) fn backprop(
    g: &mut Graph,
    order: &[NodeId],
    root: NodeId,
    seed: NodeId,
    targets: &[NodeId],
) -> Result<HashMap<NodeId, NodeId>, GradError> {
    // Nodes that depend on a target and are floats: the only ones that need an adjoint.
    let mut needs: BTreeSet<NodeId> = targets.iter().copied().collect();
    for &id in order {
        let node = g.node(id).expect("ordered node exists");
        if node.ty.dtype.is_float() && g.operands(id).iter().any(|o| needs.contains(o)) {
            needs.insert(id);
        }
    }
    let mut adjoint: HashMap<NodeId, NodeId> = HashMap::new();
    if !needs.contains(&root) {
        return Ok(adjoint);
    }
    adjoint.insert(root, seed);
    for &id in order.iter().rev() {
        let Some(&dy) = adjoint.get(&id) else { continue };
        let operands = g.operands(id);
        let wanted: Vec<bool> = operands.iter().map(|o| needs.contains(o)).collect();
        if !wanted.iter().any(|w| *w) {
            continue;
        }
        let op = g.node(id).expect("ordered node exists").op.clone();
        let prov = g.node(id).expect("ordered node exists").provenance.clone();
        let contributions = if op.is_fused() {
            expand::vjp(g, id, &op, &operands, dy, &wanted)?
        } else {
            let mut b = Builder::new(g, &prov, id);
            rules::vjp(&mut b, &op, &operands, dy, &wanted)?
        };
        for (k, c) in contributions.into_iter().enumerate() {
            let (Some(c), true) = (c, wanted[k]) else { continue };
            let x = operands[k];
            let total = match adjoint.get(&x) {
                Some(&prev) => {
                    let mut b = Builder::new(g, &prov, id);
                    b.bin(rustral_ir::BinaryOp::Add, prev, c).map_err(|e| b.ir_error(e))?
                }
                None => c,
            };
            adjoint.insert(x, total);
        }
    }
    Ok(adjoint)
}

/// The same graph computing in f64: float sources, casts to floats and fused bodies' float
/// constants become f64 (for finite-difference checks, which f32 rounding would swamp).
pub fn promote_f64(g: &Graph) -> Result<Graph, IrError> {
    use rustral_ir::{DType, ExprNode, Op};
    let widen = |d: DType| if d.is_float() { DType::F64 } else { d };
    let mut out = Graph::new(g.name());
    let mut map: HashMap<NodeId, NodeId> = HashMap::new();
    for id in g.topo_order().expect("a verified graph is acyclic") {
        let node = g.node(id).expect("ordered node exists");
        let operands: Vec<NodeId> = g.operands(id).iter().map(|o| map[o]).collect();
        let op = match &node.op {
            Op::Cast { to } => Op::Cast { to: widen(*to) },
            Op::FusedElementwise { body } => {
                let mut body = body.clone();
                for n in &mut body.nodes {
                    match n {
                        ExprNode::Const { dtype, .. } | ExprNode::Cast(dtype, _) => *dtype = widen(*dtype),
                        _ => {}
                    }
                }
                Op::FusedElementwise { body }
            }
            op => op.clone(),
        };
        let new = if op.is_source() {
            let mut ty = node.ty.clone();
            ty.dtype = widen(ty.dtype);
            out.declare_with(op, &operands, ty, &node.provenance)?
        } else {
            out.add(op, &operands, &node.provenance)?
        };
        out.set_loc(new, node.loc.clone());
        map.insert(id, new);
    }
    for o in g.outputs() {
        out.set_output(&o.name, map[&o.node])?;
    }
    Ok(out)
}
