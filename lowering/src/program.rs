//! The Program and its construction from a graph.

use crate::plan::MemoryPlan;
use rustral_ir::{Graph, Op, SourceLoc, TensorType, VerifyErrors, verify};
use serde::Serialize;
use std::collections::HashMap;
use thiserror::Error;

/// What a buffer holds.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub enum BufferKind {
    /// A graph input, fed per run.
    Input(String),
    /// A parameter, bound once.
    Param(String),
    /// A value computed once when parameters are bound (constants, iotas, random streams):
    /// the node's op, kept so any target can materialise it.
    Constant(#[serde(skip)] Op),
    /// A kernel's result.
    Intermediate,
}

/// A typed buffer.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Buffer {
    /// Its type (symbolic dims are bound at run time).
    pub ty: TensorType,
    /// What it holds.
    pub kind: BufferKind,
    /// The module path of the node that produced it.
    pub provenance: String,
    /// The model source locations of that node (a constant's kernel names them too).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub loc: Vec<SourceLoc>,
}

/// One kernel: an op over input buffers into one output buffer.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Kernel {
    /// The op computed (primitive or fused).
    #[serde(skip)]
    pub op: Op,
    /// The op's name, for reports.
    pub name: String,
    /// Input buffers, in operand order.
    pub inputs: Vec<usize>,
    /// Output buffer.
    pub output: usize,
    /// Module path of the node.
    pub provenance: String,
    /// The model source locations it computes (`file:line:col`; a fused kernel's are the
    /// union of the nodes it replaced).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub loc: Vec<SourceLoc>,
}

/// A lowered graph.
#[derive(Clone, Debug, Serialize)]
pub struct Program {
    /// Buffers by id.
    pub buffers: Vec<Buffer>,
    /// Kernels in schedule order.
    pub kernels: Vec<Kernel>,
    /// Named outputs.
    pub outputs: Vec<(String, usize)>,
    /// Storage sharing among intermediates.
    pub plan: MemoryPlan,
}

/// Why lowering failed.
#[derive(Debug, Error)]
pub enum LowerError {
    /// The graph does not verify.
    #[error("graph does not verify:\n{0}")]
    Verify(#[from] VerifyErrors),
}

/// Lower a graph: one buffer per node, one kernel per non-source node in topological order
/// (a source op with operands, a `random_uniform` with its step, is a kernel too).
pub fn lower(g: &Graph) -> Result<Program, LowerError> {
    verify(g)?;
    let order = g.topo_order().expect("a verified graph is acyclic");
    let mut buffer_of = HashMap::new();
    let mut buffers = Vec::with_capacity(order.len());
    let mut kernels = Vec::new();
    for id in order {
        let node = g.node(id).expect("ordered node exists");
        let kind = match &node.op {
            Op::Input { name } => BufferKind::Input(name.clone()),
            Op::Param { name } => BufferKind::Param(name.clone()),
            op if op.is_source() && g.operands(id).is_empty() => BufferKind::Constant(op.clone()),
            _ => BufferKind::Intermediate,
        };
        let b = buffers.len();
        buffers.push(Buffer {
            ty: node.ty.clone(),
            kind: kind.clone(),
            provenance: node.provenance.clone(),
            loc: node.loc.clone(),
        });
        buffer_of.insert(id, b);
        if kind == BufferKind::Intermediate {
            let inputs = g.operands(id).iter().map(|o| buffer_of[o]).collect();
            kernels.push(Kernel {
                op: node.op.clone(),
                name: node.op.name().to_string(),
                inputs,
                output: b,
                provenance: node.provenance.clone(),
                loc: node.loc.clone(),
            });
        }
    }
    let outputs: Vec<(String, usize)> = g.outputs().iter().map(|o| (o.name.clone(), buffer_of[&o.node])).collect();
    let plan = MemoryPlan::new(&buffers, &kernels, &outputs);
    Ok(Program { buffers, kernels, outputs, plan })
}
