//! JSON and binary forms. Both serialize `GraphRepr`, the canonical node list (nodes in
//! printed order, operands by position), documented by `schemas/ir.schema.json`.
//!
//! Decoding hostile input returns an error: sizes are capped before decoding, serde's
//! collection visitors never pre-allocate more than a small bound from a claimed length, and
//! the decoded list is checked (operands must name earlier nodes) before a graph is built.

use crate::error::IrError;
use crate::graph::{Graph, NodeId};
use crate::loc::SourceLoc;
use crate::op::Op;
use crate::shape::TensorType;
use serde::{Deserialize, Serialize};

/// The format version written into every serialized graph. Version 2 added each node's
/// `loc`; JSON of version 1 (no locations) is still read.
pub const FORMAT_VERSION: u32 = 2;

/// The oldest version `from_json` reads.
const OLDEST_JSON_VERSION: u32 = 1;

/// Inputs larger than this are rejected before decoding (1 GiB).
pub const MAX_ENCODED_BYTES: usize = 1 << 30;

/// A graph as a list: node `i` is the node printed as `%i`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GraphRepr {
    /// Always `FORMAT_VERSION` when written.
    pub format_version: u32,
    /// The graph's name.
    pub name: String,
    /// Nodes in topological order.
    pub nodes: Vec<NodeRepr>,
    /// Named outputs.
    pub outputs: Vec<OutputRepr>,
}

/// One node.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeRepr {
    /// The op and its attributes.
    pub op: Op,
    /// Positions of earlier nodes in `nodes`.
    pub operands: Vec<usize>,
    /// The node's type.
    #[serde(rename = "type")]
    pub ty: TensorType,
    /// Module path.
    pub provenance: String,
    /// Model source locations, `file:line:col` each (absent in files written before they
    /// were recorded).
    #[serde(default)]
    pub loc: Vec<SourceLoc>,
}

/// One output.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OutputRepr {
    /// Output name.
    pub name: String,
    /// Position of its node in `nodes`.
    pub node: usize,
}

impl GraphRepr {
    /// The canonical list form of a graph.
    pub fn from_graph(g: &Graph) -> GraphRepr {
        let numbering = g.numbering();
        let order = g.topo_order().unwrap_or_else(|_| g.node_ids().collect());
        let nodes = order
            .iter()
            .map(|&id| {
                let n = g.node(id).expect("ordered node exists");
                NodeRepr {
                    op: n.op.clone(),
                    operands: g.operands(id).iter().map(|o| numbering[o]).collect(),
                    ty: n.ty.clone(),
                    provenance: n.provenance.clone(),
                    loc: n.loc.clone(),
                }
            })
            .collect();
        let outputs = g
            .outputs()
            .iter()
            .map(|o| OutputRepr { name: o.name.clone(), node: numbering.get(&o.node).copied().unwrap_or(usize::MAX) })
            .collect();
        GraphRepr { format_version: FORMAT_VERSION, name: g.name().to_string(), nodes, outputs }
    }

    /// Build the graph (not verified). Operands must name earlier nodes.
    pub fn into_graph(self, format: &'static str) -> Result<Graph, IrError> {
        let oldest = if format == "json" { OLDEST_JSON_VERSION } else { FORMAT_VERSION };
        if !(oldest..=FORMAT_VERSION).contains(&self.format_version) {
            return Err(IrError::Version { found: self.format_version, supported: FORMAT_VERSION });
        }
        let mut g = Graph::new(self.name);
        let mut ids: Vec<NodeId> = Vec::with_capacity(self.nodes.len());
        for (i, n) in self.nodes.into_iter().enumerate() {
            let mut operands = Vec::with_capacity(n.operands.len());
            for o in n.operands {
                let id = ids.get(o).copied().ok_or_else(|| IrError::Decode {
                    format,
                    message: format!("node {i} uses operand {o}, which is not an earlier node"),
                })?;
                operands.push(id);
            }
            let id = g.add_unchecked(n.op, &operands, n.ty, &n.provenance);
            g.set_loc(id, n.loc);
            ids.push(id);
        }
        for o in self.outputs {
            let id = ids.get(o.node).copied().ok_or_else(|| IrError::Decode {
                format,
                message: format!("output {:?} names node {}, which does not exist", o.name, o.node),
            })?;
            g.set_output(&o.name, id)?;
        }
        Ok(g)
    }
}

/// Pretty JSON, deterministic (struct fields in declaration order, no maps).
pub fn to_json(g: &Graph) -> String {
    serde_json::to_string_pretty(&GraphRepr::from_graph(g)).expect("graph reprs always serialize")
}

/// Decode JSON (not verified).
pub fn from_json(s: &str) -> Result<Graph, IrError> {
    check_size(s.len(), "json")?;
    let repr: GraphRepr =
        serde_json::from_str(s).map_err(|e| IrError::Decode { format: "json", message: e.to_string() })?;
    repr.into_graph("json")
}

/// Magic bytes that open the binary form, so a wrong file is recognised at once.
const MAGIC: &[u8; 4] = b"RIR\x01";

/// Compact binary (postcard) after 4 magic bytes.
pub fn to_binary(g: &Graph) -> Vec<u8> {
    let mut out = MAGIC.to_vec();
    postcard::to_io(&GraphRepr::from_graph(g), &mut out).expect("writing to a Vec cannot fail");
    out
}

/// Decode the binary form (not verified).
pub fn from_binary(bytes: &[u8]) -> Result<Graph, IrError> {
    check_size(bytes.len(), "binary")?;
    let body = bytes
        .strip_prefix(MAGIC.as_slice())
        .ok_or_else(|| IrError::Decode { format: "binary", message: "missing the RIR\\x01 header".into() })?;
    // The version leads the encoding: another version's layout is refused by its number
    // rather than misread field by field.
    if let Ok((version, _)) = postcard::take_from_bytes::<u32>(body)
        && version != FORMAT_VERSION
    {
        return Err(IrError::Version { found: version, supported: FORMAT_VERSION });
    }
    let (repr, rest): (GraphRepr, &[u8]) =
        postcard::take_from_bytes(body).map_err(|e| IrError::Decode { format: "binary", message: e.to_string() })?;
    if !rest.is_empty() {
        return Err(IrError::Decode { format: "binary", message: format!("{} trailing bytes", rest.len()) });
    }
    repr.into_graph("binary")
}

fn check_size(n: usize, format: &'static str) -> Result<(), IrError> {
    if n > MAX_ENCODED_BYTES {
        return Err(IrError::Decode {
            format,
            message: format!("{n} bytes is over the {MAX_ENCODED_BYTES}-byte limit"),
        });
    }
    Ok(())
}
