//! The dataflow graph: nodes on a petgraph `StableDiGraph` (indices stay valid while passes
//! delete nodes), with an edge from each operand to its user whose weight is the operand's
//! position, so operands are ordered without a second copy of the wiring.

use crate::error::{IrError, TypeError};
use crate::infer::infer;
use crate::loc::SourceLoc;
use crate::op::Op;
use crate::shape::TensorType;
use petgraph::Direction;
use petgraph::stable_graph::{NodeIndex, StableDiGraph};
use petgraph::visit::EdgeRef;
use std::collections::{BTreeSet, HashMap};
use std::fmt;

/// A node's handle; valid until the node is removed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NodeId(pub(crate) NodeIndex);

impl NodeId {
    /// The raw index (stable for the node's lifetime, not its printed number).
    pub fn index(self) -> usize {
        self.0.index()
    }
}

/// One operation with its result type and the module path that created it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Node {
    /// What it computes.
    pub op: Op,
    /// Its result type (declared for source ops, inferred for the rest).
    pub ty: TensorType,
    /// The module path that traced it, e.g. `encoder.layer.3.attention`; empty at top level.
    pub provenance: String,
    /// The model source lines that created it, sorted without repeats: one for a traced
    /// node, the union of theirs for a node that replaced others (a fused op), none where
    /// nobody said (a hand-written `.rir`).
    pub loc: Vec<SourceLoc>,
}

/// A named graph output.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Output {
    /// Its name, unique among outputs.
    pub name: String,
    /// The node whose value it is.
    pub node: NodeId,
}

/// A typed dataflow graph: nodes, their ordered operands, and named outputs.
#[derive(Clone, Debug, Default)]
pub struct Graph {
    name: String,
    nodes: StableDiGraph<Node, usize>,
    outputs: Vec<Output>,
    /// Input and param nodes by name, so the builder rejects a duplicate name at once.
    source_names: HashMap<String, NodeId>,
}

impl Graph {
    /// An empty graph. The name shows in the text form and in error messages.
    pub fn new(name: impl Into<String>) -> Graph {
        Graph { name: name.into(), ..Graph::default() }
    }

    /// The graph's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Add a node, inferring its type; an ill-typed op is an error naming the op, operand
    /// types and provenance. Source ops use `declare` instead.
    pub fn add(&mut self, op: Op, operands: &[NodeId], provenance: &str) -> Result<NodeId, IrError> {
        if op.is_source() {
            return Err(self.type_error(
                &op,
                operands,
                provenance,
                "source ops need a declared type: use `declare`".into(),
            ));
        }
        let placeholder = TensorType::new(crate::DType::F32, crate::Shape::scalar());
        self.add_typed(op, operands, placeholder, provenance)
    }

    /// Add a source op (`input`, `param`, `const`, `iota`) whose type is `ty`.
    pub fn declare(&mut self, op: Op, ty: TensorType, provenance: &str) -> Result<NodeId, IrError> {
        self.add_typed(op, &[], ty, provenance)
    }

    /// Add an op whose type is declared and that takes operands (a `random_uniform` with its
    /// step).
    pub fn declare_with(
        &mut self,
        op: Op,
        operands: &[NodeId],
        ty: TensorType,
        provenance: &str,
    ) -> Result<NodeId, IrError> {
        if !op.is_source() {
            return Err(self.type_error(&op, operands, provenance, "only source ops have a declared type".into()));
        }
        self.add_typed(op, operands, ty, provenance)
    }

    /// Add a graph input.
    pub fn input(&mut self, name: &str, ty: TensorType) -> Result<NodeId, IrError> {
        self.declare(Op::Input { name: name.into() }, ty, "")
    }

    /// Add a parameter.
    pub fn param(&mut self, name: &str, ty: TensorType, provenance: &str) -> Result<NodeId, IrError> {
        self.declare(Op::Param { name: name.into() }, ty, provenance)
    }

    fn add_typed(
        &mut self,
        op: Op,
        operands: &[NodeId],
        declared: TensorType,
        provenance: &str,
    ) -> Result<NodeId, IrError> {
        if let Op::Input { name } | Op::Param { name } = &op
            && self.source_names.contains_key(name)
        {
            let kind = if matches!(op, Op::Input { .. }) { "input" } else { "param" };
            return Err(IrError::DuplicateName { kind, name: name.clone() });
        }
        let mut args = Vec::with_capacity(operands.len());
        for &o in operands {
            match self.nodes.node_weight(o.0) {
                Some(n) => args.push(&n.ty),
                None => {
                    return Err(IrError::UnknownNode {
                        index: o.index(),
                        context: format!("operand of `{}`", op.name()),
                    });
                }
            }
        }
        let ty = infer(&op, &args, &declared).map_err(|r| self.type_error(&op, operands, provenance, r))?;
        Ok(self.add_unchecked(op, operands, ty, provenance))
    }

    fn type_error(&self, op: &Op, operands: &[NodeId], provenance: &str, reason: String) -> IrError {
        let operand_types = operands.iter().filter_map(|o| self.nodes.node_weight(o.0)).map(|n| n.ty.clone()).collect();
        IrError::Type(Box::new(TypeError {
            op: op.name().to_string(),
            provenance: provenance.to_string(),
            operands: operand_types,
            reason,
        }))
    }

    /// Add a node with the given type without checking it (parsers and decoders do this and
    /// then run the verifier). Operands must exist.
    pub fn add_unchecked(&mut self, op: Op, operands: &[NodeId], ty: TensorType, provenance: &str) -> NodeId {
        let name = match &op {
            Op::Input { name } | Op::Param { name } => Some(name.clone()),
            _ => None,
        };
        let id = self.nodes.add_node(Node { op, ty, provenance: provenance.to_string(), loc: Vec::new() });
        if let Some(name) = name {
            self.source_names.entry(name).or_insert(NodeId(id));
        }
        for (pos, o) in operands.iter().enumerate() {
            self.nodes.add_edge(o.0, id, pos);
        }
        NodeId(id)
    }

    /// Record where `id` came from (kept sorted and free of repeats; a missing node is ignored).
    pub fn set_loc(&mut self, id: NodeId, mut loc: Vec<SourceLoc>) {
        if let Some(n) = self.nodes.node_weight_mut(id.0) {
            loc.sort_unstable();
            loc.dedup();
            n.loc = loc;
        }
    }

    /// Add the locations of `from`'s nodes to `id`'s (a node that replaces them).
    pub fn merge_loc_from(&mut self, id: NodeId, from: impl IntoIterator<Item = NodeId>) {
        let mut merged = self.node(id).map(|n| n.loc.clone()).unwrap_or_default();
        for f in from {
            if let Some(n) = self.node(f) {
                merged.extend(n.loc.iter().cloned());
            }
        }
        self.set_loc(id, merged);
    }

    /// Forget every node's source location (for output that should not change when a
    /// model's code moves between lines, such as snapshots of its structure).
    pub fn clear_locs(&mut self) {
        for n in self.nodes.node_weights_mut() {
            n.loc.clear();
        }
    }

    /// Mark `node` as the output called `name` (outputs keep the order they were set in).
    pub fn set_output(&mut self, name: &str, node: NodeId) -> Result<(), IrError> {
        if !self.contains(node) {
            return Err(IrError::UnknownNode { index: node.index(), context: format!("output {name:?}") });
        }
        if self.outputs.iter().any(|o| o.name == name) {
            return Err(IrError::DuplicateName { kind: "output", name: name.to_string() });
        }
        self.outputs.push(Output { name: name.to_string(), node });
        Ok(())
    }

    /// Named outputs in order.
    pub fn outputs(&self) -> &[Output] {
        &self.outputs
    }

    /// Replace the outputs (for passes that rewrite them).
    pub fn outputs_mut(&mut self) -> &mut Vec<Output> {
        &mut self.outputs
    }

    /// True if the node exists.
    pub fn contains(&self, id: NodeId) -> bool {
        self.nodes.contains_node(id.0)
    }

    /// The node; None if it was removed.
    pub fn node(&self, id: NodeId) -> Option<&Node> {
        self.nodes.node_weight(id.0)
    }

    /// The node, mutably (changing `op` or `ty` is the caller's to verify).
    pub fn node_mut(&mut self, id: NodeId) -> Option<&mut Node> {
        self.nodes.node_weight_mut(id.0)
    }

    /// Give the symbolic dims in `binding` their sizes everywhere: node types and the dims
    /// ops carry (reshape and broadcast targets, slice ends). Other symbols stay symbolic.
    pub fn pin_dims(&mut self, binding: &std::collections::BTreeMap<String, usize>) {
        let pin = |d: &mut crate::shape::Dim| *d = crate::shape::Shape(vec![d.clone()]).substitute(binding).0.remove(0);
        for node in self.nodes.node_weights_mut() {
            node.ty.shape = node.ty.shape.substitute(binding);
            match &mut node.op {
                Op::Reshape { shape } | Op::BroadcastTo { shape } => *shape = shape.substitute(binding),
                Op::Slice { end, .. } => pin(end),
                _ => {}
            }
        }
    }

    /// The symbolic dims its node types name (what `--shape NAME=N` may pin).
    pub fn symbols(&self) -> std::collections::BTreeSet<String> {
        self.nodes.node_weights().flat_map(|n| n.ty.shape.symbols().map(str::to_string).collect::<Vec<_>>()).collect()
    }

    /// Number of nodes.
    pub fn len(&self) -> usize {
        self.nodes.node_count()
    }

    /// True if there are no nodes.
    pub fn is_empty(&self) -> bool {
        self.nodes.node_count() == 0
    }

    /// Node ids in index order (creation order).
    pub fn node_ids(&self) -> impl Iterator<Item = NodeId> + '_ {
        self.nodes.node_indices().map(NodeId)
    }

    /// Operands in position order. Positions are unique and dense in a verified graph.
    pub fn operands(&self, id: NodeId) -> Vec<NodeId> {
        let mut edges: Vec<(usize, NodeId)> =
            self.nodes.edges_directed(id.0, Direction::Incoming).map(|e| (*e.weight(), NodeId(e.source()))).collect();
        edges.sort();
        edges.into_iter().map(|(_, n)| n).collect()
    }

    /// Operand positions as stored on the edges, sorted (for the verifier).
    pub(crate) fn operand_positions(&self, id: NodeId) -> Vec<usize> {
        let mut p: Vec<usize> = self.nodes.edges_directed(id.0, Direction::Incoming).map(|e| *e.weight()).collect();
        p.sort_unstable();
        p
    }

    /// Distinct users of a node, in index order.
    pub fn users(&self, id: NodeId) -> Vec<NodeId> {
        let set: BTreeSet<NodeId> = self.nodes.neighbors_directed(id.0, Direction::Outgoing).map(NodeId).collect();
        set.into_iter().collect()
    }

    /// Remove a node and its edges (its users then have a missing operand until rewired).
    pub fn remove(&mut self, id: NodeId) -> Option<Node> {
        let node = self.nodes.remove_node(id.0)?;
        if let Op::Input { name } | Op::Param { name } = &node.op
            && self.source_names.get(name) == Some(&id)
        {
            self.source_names.remove(name);
        }
        Some(node)
    }

    /// Remove many nodes (a dead set: none of their users stays). Their edges go first, the
    /// newest node's first, so that each edge sits near the front of its operand's use list
    /// and unlinking it is quick (one node at a time, oldest first, walks a value's whole use
    /// list for each edge: quadratic in a value with thousands of users); then the nodes, in
    /// the order given, which is the order their indices are reused in.
    pub fn remove_nodes(&mut self, ids: &[NodeId]) {
        let mut newest_first = ids.to_vec();
        newest_first.sort_unstable_by(|a, b| b.cmp(a));
        for id in newest_first {
            let edges: Vec<petgraph::stable_graph::EdgeIndex> =
                self.nodes.edges_directed(id.0, Direction::Incoming).map(|e| e.id()).collect();
            for e in edges {
                self.nodes.remove_edge(e);
            }
        }
        for &id in ids {
            self.remove(id);
        }
    }

    /// Make every user of `old` (and every output naming it) use `new` instead.
    pub fn replace_all_uses(&mut self, old: NodeId, new: NodeId) {
        let uses: Vec<(petgraph::stable_graph::EdgeIndex, NodeIndex, usize)> =
            self.nodes.edges_directed(old.0, Direction::Outgoing).map(|e| (e.id(), e.target(), *e.weight())).collect();
        for (e, user, pos) in uses {
            self.nodes.remove_edge(e);
            self.nodes.add_edge(new.0, user, pos);
        }
        for o in &mut self.outputs {
            if o.node == old {
                o.node = new;
            }
        }
    }

    /// Nodes in a deterministic topological order: Kahn's algorithm taking the lowest index
    /// first, so a graph built in order keeps its order. Err names a node on a cycle.
    pub fn topo_order(&self) -> Result<Vec<NodeId>, NodeId> {
        let mut indegree: HashMap<NodeIndex, usize> = HashMap::new();
        let mut ready = BTreeSet::new();
        for n in self.nodes.node_indices() {
            let d = self.nodes.edges_directed(n, Direction::Incoming).count();
            indegree.insert(n, d);
            if d == 0 {
                ready.insert(n);
            }
        }
        let mut order = Vec::with_capacity(self.len());
        while let Some(n) = ready.pop_first() {
            order.push(NodeId(n));
            for e in self.nodes.edges_directed(n, Direction::Outgoing) {
                let d = indegree.get_mut(&e.target()).expect("every node has an indegree entry");
                *d -= 1;
                if *d == 0 {
                    ready.insert(e.target());
                }
            }
        }
        if order.len() < self.len() {
            let stuck = self.nodes.node_indices().find(|n| indegree[n] > 0).expect("a node is left on a cycle");
            return Err(NodeId(stuck));
        }
        Ok(order)
    }

    /// The printed number (`%n`) of every node: its position in `topo_order`, or its index
    /// when the graph has a cycle.
    pub fn numbering(&self) -> HashMap<NodeId, usize> {
        match self.topo_order() {
            Ok(order) => order.into_iter().enumerate().map(|(i, n)| (n, i)).collect(),
            Err(_) => self.node_ids().map(|n| (n, n.index())).collect(),
        }
    }

    /// Input nodes in topological order.
    pub fn inputs(&self) -> Vec<(String, NodeId)> {
        self.sources(|op| matches!(op, Op::Input { .. }))
    }

    /// Parameter nodes in topological order.
    pub fn params(&self) -> Vec<(String, NodeId)> {
        self.sources(|op| matches!(op, Op::Param { .. }))
    }

    fn sources(&self, keep: impl Fn(&Op) -> bool) -> Vec<(String, NodeId)> {
        let order = self.topo_order().unwrap_or_else(|_| self.node_ids().collect());
        order
            .into_iter()
            .filter_map(|id| {
                let n = &self.nodes[id.0];
                match &n.op {
                    Op::Input { name } | Op::Param { name } if keep(&n.op) => Some((name.clone(), id)),
                    _ => None,
                }
            })
            .collect()
    }
}

/// Graphs are equal when their canonical forms (nodes in printed order) are equal, so a graph
/// equals itself after a round trip through text, JSON or binary.
impl PartialEq for Graph {
    fn eq(&self, other: &Graph) -> bool {
        crate::serial::GraphRepr::from_graph(self) == crate::serial::GraphRepr::from_graph(other)
    }
}

impl Eq for Graph {}

impl fmt::Display for Graph {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&crate::text::print(self))
    }
}
