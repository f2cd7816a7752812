//! Adding backward nodes: typed helpers over `Graph::add` that carry the forward node's module
//! path (suffixed `.grad`, so a layer's backward nodes fuse in that layer's region).

use super::GradError;
use rustral_ir::{
    BinaryOp, DType, Dim, F64, Graph, IrError, Literal, NodeId, Op, ReduceOp, Shape, TensorType, UnaryOp,
};

pub(crate) type R<T> = Result<T, IrError>;

pub(crate) struct Builder<'g> {
    pub g: &'g mut Graph,
    prov: String,
    node: NodeId,
    /// Every node this builder made, in creation order (a topological order).
    pub created: Vec<NodeId>,
}

impl<'g> Builder<'g> {
    /// Nodes for the gradient of `node`, whose module path is `prov`. The nodes a fused op's
    /// expansion adds are already backward nodes: their gradients keep their path rather than
    /// growing `.grad.grad`.
    pub fn new(g: &'g mut Graph, prov: &str, node: NodeId) -> Builder<'g> {
        let prov = match prov {
            "" => "grad".to_string(),
            p if p == "grad" || p.ends_with(".grad") => p.to_string(),
            p => format!("{p}.grad"),
        };
        Builder { g, prov, node, created: Vec::new() }
    }

    /// An IR error while building this node's gradient.
    pub fn ir_error(&self, source: IrError) -> GradError {
        let (op, provenance) = match self.g.node(self.node) {
            Some(n) => (n.op.name().to_string(), n.provenance.clone()),
            None => (String::new(), String::new()),
        };
        GradError::Ir { node: self.node.index(), op, provenance, source }
    }

    /// Why this node's gradient cannot be written.
    pub fn unsupported(&self, message: impl Into<String>) -> GradError {
        let (op, provenance) = match self.g.node(self.node) {
            Some(n) => (n.op.name().to_string(), n.provenance.clone()),
            None => (String::new(), String::new()),
        };
        GradError::Unsupported { node: self.node.index(), op, provenance, message: message.into() }
    }

    /// The forward node whose gradient is being built.
    pub fn node(&self) -> NodeId {
        self.node
    }

    pub fn ty(&self, x: NodeId) -> TensorType {
        self.g.node(x).expect("a node of the graph").ty.clone()
    }

    pub fn op(&mut self, op: Op, xs: &[NodeId]) -> R<NodeId> {
        let id = self.g.add(op, xs, &self.prov)?;
        self.adopt(id);
        Ok(id)
    }

    /// A source node (constant, iota) of type `ty`.
    pub fn declare(&mut self, op: Op, ty: TensorType) -> R<NodeId> {
        let id = self.g.declare(op, ty, &self.prov)?;
        self.adopt(id);
        Ok(id)
    }

    /// Note a node this builder made; it takes the forward node's source lines (the backward
    /// of `model.rs:9` is located at `model.rs:9`).
    fn adopt(&mut self, id: NodeId) {
        let loc = self.g.node(self.node).map(|n| n.loc.clone()).unwrap_or_default();
        self.g.set_loc(id, loc);
        self.created.push(id);
    }

    pub fn un(&mut self, u: UnaryOp, x: NodeId) -> R<NodeId> {
        self.op(Op::Unary(u), &[x])
    }

    pub fn bin(&mut self, b: BinaryOp, x: NodeId, y: NodeId) -> R<NodeId> {
        self.op(Op::Binary(b), &[x, y])
    }

    pub fn mul(&mut self, x: NodeId, y: NodeId) -> R<NodeId> {
        self.bin(BinaryOp::Mul, x, y)
    }

    pub fn scalar(&mut self, v: f64, dtype: DType) -> R<NodeId> {
        self.declare(Op::Constant { value: Literal::Splat(F64(v)) }, TensorType::new(dtype, Shape::scalar()))
    }

    /// `x * v` with `v` a scalar of x's dtype.
    pub fn scale(&mut self, x: NodeId, v: f64) -> R<NodeId> {
        let s = self.scalar(v, self.ty(x).dtype)?;
        self.mul(x, s)
    }

    pub fn zeros(&mut self, ty: &TensorType) -> R<NodeId> {
        self.declare(Op::Constant { value: Literal::Splat(F64(0.0)) }, ty.clone())
    }

    /// A comparison as 0/1 in `dtype`.
    pub fn mask(&mut self, b: BinaryOp, x: NodeId, y: NodeId, dtype: DType) -> R<NodeId> {
        let c = self.bin(b, x, y)?;
        self.op(Op::Cast { to: dtype }, &[c])
    }

    pub fn sum(&mut self, x: NodeId, axes: Vec<usize>, keepdim: bool) -> R<NodeId> {
        if axes.is_empty() {
            return Ok(x);
        }
        self.op(Op::Reduce { op: ReduceOp::Sum, axes, keepdim }, &[x])
    }

    pub fn reshape(&mut self, x: NodeId, shape: Shape) -> R<NodeId> {
        if self.ty(x).shape == shape {
            return Ok(x);
        }
        self.op(Op::Reshape { shape }, &[x])
    }

    pub fn broadcast(&mut self, x: NodeId, shape: &Shape) -> R<NodeId> {
        if &self.ty(x).shape == shape {
            return Ok(x);
        }
        self.op(Op::BroadcastTo { shape: shape.clone() }, &[x])
    }

    /// Swap the last two axes.
    pub fn transpose(&mut self, x: NodeId) -> R<NodeId> {
        let r = self.ty(x).rank();
        let mut perm: Vec<usize> = (0..r).collect();
        perm.swap(r - 1, r - 2);
        self.op(Op::Permute { perm }, &[x])
    }

    /// Sum `dy` (shaped like a broadcast result) back to `to`, the operand's shape: over the
    /// leading axes the operand lacks and the axes where it has a static 1.
    pub fn unbroadcast(&mut self, dy: NodeId, to: &Shape) -> R<NodeId> {
        let from = self.ty(dy).shape;
        let lead = from.rank() - to.rank();
        let x = self.sum(dy, (0..lead).collect(), false)?;
        let ones: Vec<usize> = (0..to.rank()).filter(|&k| to.0[k].is_one() && !from.0[k + lead].is_one()).collect();
        let x = self.sum(x, ones, true)?;
        self.reshape(x, to.clone())
    }

    /// The shape with dim `k` replaced.
    pub fn with_dim(shape: &Shape, k: usize, d: Dim) -> Shape {
        let mut s = shape.clone();
        s.0[k] = d;
        s
    }
}
