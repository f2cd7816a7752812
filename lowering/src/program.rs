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
    /// Cross-rank sums of outputs in data-parallel training (empty otherwise): host steps in
    /// the schedule, each started once its last buffer is computed.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub collectives: Vec<Collective>,
}

/// A cross-rank sum of some of a program's outputs (a bucket of gradients): every rank adds
/// its values times its share of the global batch, so the sum is the global batch's mean.
/// It starts as soon as the kernel that computes the last of its buffers has run (`after`;
/// None when each is a parameter or a constant), so it overlaps the rest of the schedule, and
/// the run waits for it before returning its outputs.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Collective {
    /// `all_reduce.{i}`, in the order they start.
    pub name: String,
    /// The outputs it sums, by name.
    pub outputs: Vec<String>,
    /// Their buffers, each once (outputs may share one).
    pub buffers: Vec<usize>,
    /// Start after this kernel.
    pub after: Option<usize>,
    /// Bytes moved per rank (static dims; symbolic dims count as 1).
    pub bytes: usize,
}

/// Why a collective schedule cannot be made.
#[derive(Debug, Error)]
#[error("cannot all-reduce `{output}`: {reason}")]
pub struct ScheduleError {
    /// The output asked for.
    pub output: String,
    /// Why not.
    pub reason: String,
}

impl Program {
    /// Schedule cross-rank sums of `outputs` in buckets of about `bucket_bytes` each (a bucket
    /// closes once it reaches that size), filled in the order the schedule computes them, as
    /// PyTorch's DistributedDataParallel does: the first gradients of the backward pass (the
    /// last layers') go first, while the earlier layers' are still being computed. Replaces
    /// any earlier schedule.
    pub fn schedule_collectives(&mut self, outputs: &[String], bucket_bytes: usize) -> Result<(), ScheduleError> {
        let mut producer = vec![None; self.buffers.len()];
        for (k, kernel) in self.kernels.iter().enumerate() {
            producer[kernel.output] = Some(k);
        }
        // Per distinct buffer: its producer, the outputs that read it, the buffer. Outputs
        // that CSE merged into one buffer (the zero gradients of two unused parameters of one
        // shape) are summed once.
        let mut members: Vec<(Option<usize>, Vec<String>, usize)> = Vec::with_capacity(outputs.len());
        for name in outputs {
            let fail = |reason: &str| ScheduleError { output: name.clone(), reason: reason.into() };
            let &(_, b) = self.outputs.iter().find(|(n, _)| n == name).ok_or_else(|| fail("no such output"))?;
            if !self.buffers[b].ty.dtype.is_float() {
                return Err(fail("only float outputs are summed"));
            }
            match members.iter_mut().find(|(_, _, m)| *m == b) {
                Some((_, names, _)) if names.contains(name) => return Err(fail("it is asked for twice")),
                Some((_, names, _)) => names.push(name.clone()),
                None => members.push((producer[b], vec![name.clone()], b)),
            }
        }
        // Schedule order; values that no kernel computes first. Stable, so ties keep the
        // caller's order.
        members.sort_by_key(|&(k, ..)| k.map_or(0, |k| k + 1));
        let mut collectives: Vec<Collective> = Vec::new();
        for (after, names, b) in members {
            let ty = &self.buffers[b].ty;
            let numel: usize = ty.shape.0.iter().map(|d| d.as_static().unwrap_or(1)).product();
            let bytes = numel * ty.dtype.size_bytes();
            match collectives.last_mut() {
                Some(c) if c.bytes < bucket_bytes => {
                    c.outputs.extend(names);
                    c.buffers.push(b);
                    c.after = c.after.max(after);
                    c.bytes += bytes;
                }
                _ => collectives.push(Collective {
                    name: format!("all_reduce.{}", collectives.len()),
                    outputs: names,
                    buffers: vec![b],
                    after,
                    bytes,
                }),
            }
        }
        self.collectives = collectives;
        Ok(())
    }
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
    Ok(Program { buffers, kernels, outputs, plan, collectives: Vec::new() })
}
