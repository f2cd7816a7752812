//! The verifier. It checks, collecting every failure with the node it concerns:
//!
//! 1. the graph is acyclic;
//! 2. each node's operand positions are exactly `0..n` (no gaps, no duplicates, none dangling);
//! 3. each op has an allowed number of operands;
//! 4. each node's declared type equals the type inferred from its operands (symbolically:
//!    symbolic dims match only by name), and source ops' declarations are well-formed;
//! 5. input and param names are non-empty and unique across both;
//! 6. outputs name existing nodes and have unique names.
//!
//! Passes run it after every step in tests and debug builds.

use crate::error::{VerifyError, VerifyErrors};
use crate::graph::Graph;
use crate::infer::infer;
use crate::op::Op;
use std::collections::{BTreeMap, BTreeSet};

/// Check every invariant; Err lists all that fail.
pub fn verify(g: &Graph) -> Result<(), VerifyErrors> {
    let numbering = g.numbering();
    let mut errors = Vec::new();
    let mut push = |id, message: String| {
        let node = g.node(id).expect("verify only names live nodes");
        errors.push(VerifyError {
            node: Some(numbering[&id]),
            op: node.op.name().to_string(),
            provenance: node.provenance.clone(),
            message,
        });
    };
    if let Err(n) = g.topo_order() {
        push(n, "is on a cycle".to_string());
    }
    let mut names: BTreeMap<&str, usize> = BTreeMap::new();
    let mut order: Vec<_> = g.node_ids().collect();
    order.sort_by_key(|id| numbering[id]);
    for id in order {
        let node = g.node(id).expect("listed node exists");
        let positions = g.operand_positions(id);
        if positions.iter().enumerate().any(|(i, &p)| i != p) {
            push(id, format!("operand positions {positions:?} are not 0..{}", positions.len()));
            continue;
        }
        let operands = g.operands(id);
        let args: Vec<_> = operands.iter().map(|&o| &g.node(o).expect("edge ends exist").ty).collect();
        match infer(&node.op, &args, &node.ty) {
            Ok(t) if t == node.ty => {}
            Ok(t) => push(id, format!("declared type {} but the op gives {t}", node.ty)),
            Err(reason) => {
                let tys: Vec<String> = args.iter().map(|t| t.to_string()).collect();
                let operands = if tys.is_empty() { String::new() } else { format!(" (operands: {})", tys.join(", ")) };
                push(id, format!("{reason}{operands}"));
            }
        }
        if let Op::Input { name } | Op::Param { name } = &node.op
            && let Some(first) = names.insert(name, numbering[&id])
        {
            push(id, format!("name {name:?} is already used by %{first}"));
        }
    }
    let mut out_names = BTreeSet::new();
    for o in g.outputs() {
        let problem = if !g.contains(o.node) {
            Some(format!("output {:?} names a node that does not exist", o.name))
        } else if !out_names.insert(o.name.as_str()) {
            Some(format!("output name {:?} is used twice", o.name))
        } else {
            None
        };
        if let Some(message) = problem {
            errors.push(VerifyError { node: None, op: "output".into(), provenance: String::new(), message });
        }
    }
    if errors.is_empty() { Ok(()) } else { Err(VerifyErrors(errors)) }
}
