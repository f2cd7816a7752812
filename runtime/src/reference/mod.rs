//! The reference interpreter: evaluates any verified graph on ndarray, in f64, rounding each
//! result to its node's dtype. It is written for clarity, not speed (matmul uses ndarray's f64
//! `dot`, reductions sum in f64), and it is the oracle every pass and target is checked against.
//!
//! Symbolic dims are bound from the shapes of the fed inputs and params, so one graph runs at
//! any batch size or sequence length.

mod kernels;
mod window;

pub(crate) use kernels::{pcg, scalar_index, stream_key};

pub(crate) use kernels::eval_op;

/// Materialise a source op (constant, iota, random stream) of the given type.
pub(crate) fn eval_source(op: &Op, dtype: rustral_ir::DType, shape: &[usize]) -> Result<HostTensor, String> {
    eval_op(op, &[], dtype, shape)
}

use crate::tensor::HostTensor;
use rustral_ir::{Dim, Graph, NodeId, Op, VerifyErrors, verify};
use std::collections::{BTreeMap, HashMap};
use thiserror::Error;

/// Where in the graph an evaluation failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Place {
    /// Printed node number (`%n`).
    pub node: usize,
    /// Op name.
    pub op: String,
    /// Module path.
    pub provenance: String,
}

impl std::fmt::Display for Place {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "%{} ({})", self.node, self.op)?;
        if !self.provenance.is_empty() {
            write!(f, " at {}", self.provenance)?;
        }
        Ok(())
    }
}

/// Why evaluation failed.
#[derive(Debug, Error)]
pub enum EvalError {
    /// A cross-rank collective of a data-parallel run failed (timed out, mismatched).
    #[error("{0}")]
    Collective(#[from] crate::collective::CollectiveError),
    /// The graph breaks an IR invariant.
    #[error("graph does not verify:\n{0}")]
    Verify(#[from] VerifyErrors),
    /// An input or param has no fed value.
    #[error("no value fed for {kind} {name:?}")]
    MissingFeed {
        /// `input` or `param`.
        kind: &'static str,
        /// Its name.
        name: String,
    },
    /// A fed value is not of the declared type.
    #[error("value fed for {name:?} is {found}, but the graph declares {expected}")]
    FeedMismatch {
        /// Input or param name.
        name: String,
        /// Declared type.
        expected: String,
        /// What was fed.
        found: String,
    },
    /// A fed name that the graph does not have.
    #[error("fed value {name:?} is not an input or param of the graph (it has: {known})")]
    UnknownFeed {
        /// The name.
        name: String,
        /// Names the graph has.
        known: String,
    },
    /// Two feeds bind one symbol to different sizes.
    #[error("symbol {sym} is {first} from an earlier feed but {second} from {name:?}")]
    SymbolConflict {
        /// Symbol.
        sym: String,
        /// First binding.
        first: usize,
        /// Conflicting size.
        second: usize,
        /// Feed that conflicts.
        name: String,
    },
    /// A symbol used by an op is bound by no feed.
    #[error("{place}: symbol {sym} is not bound by any input or param")]
    UnboundSymbol {
        /// Where.
        place: Place,
        /// Symbol.
        sym: String,
    },
    /// A data-dependent failure (index out of range, integer division by zero, a slice past
    /// the end once symbols are bound).
    #[error("{place}: {message}")]
    Runtime {
        /// Where.
        place: Place,
        /// What.
        message: String,
    },
}

/// Evaluate `g` on named feeds (inputs and params together) and return the outputs in order.
pub fn evaluate(g: &Graph, feeds: &HashMap<String, HostTensor>) -> Result<Vec<(String, HostTensor)>, EvalError> {
    verify(g)?;
    let order = g.topo_order().expect("a verified graph is acyclic");
    let numbering = g.numbering();
    let place = |id: NodeId| {
        let n = g.node(id).expect("ordered node exists");
        Place { node: numbering[&id], op: n.op.name().into(), provenance: n.provenance.clone() }
    };
    let binding = bind_symbols(g, feeds)?;
    let mut values: HashMap<NodeId, HostTensor> = HashMap::with_capacity(order.len());
    for id in order {
        let node = g.node(id).expect("ordered node exists");
        let shape =
            concrete(&node.ty.shape.0, &binding).map_err(|sym| EvalError::UnboundSymbol { place: place(id), sym })?;
        let value = match &node.op {
            Op::Input { name } | Op::Param { name } => feeds[name].clone(),
            op => {
                let args: Vec<&HostTensor> = g.operands(id).iter().map(|o| &values[o]).collect();
                kernels::eval_op(op, &args, node.ty.dtype, &shape)
                    .map_err(|message| EvalError::Runtime { place: place(id), message })?
            }
        };
        if value.shape() != shape.as_slice() {
            let message = format!("internal error: computed shape {:?}, declared {:?}", value.shape(), shape);
            return Err(EvalError::Runtime { place: place(id), message });
        }
        values.insert(id, value);
    }
    Ok(g.outputs().iter().map(|o| (o.name.clone(), values[&o.node].clone())).collect())
}

/// Bind each symbol to the size the feeds give it, checking dtypes, ranks and static dims.
pub fn bind_symbols(g: &Graph, feeds: &HashMap<String, HostTensor>) -> Result<BTreeMap<String, usize>, EvalError> {
    let mut binding = BTreeMap::new();
    let mut sources = g.inputs().into_iter().map(|s| ("input", s)).collect::<Vec<_>>();
    sources.extend(g.params().into_iter().map(|s| ("param", s)));
    for name in feeds.keys() {
        if !sources.iter().any(|(_, (n, _))| n == name) {
            let mut known: Vec<&str> = sources.iter().map(|(_, (n, _))| n.as_str()).collect();
            known.sort_unstable();
            return Err(EvalError::UnknownFeed { name: name.clone(), known: known.join(", ") });
        }
    }
    for (kind, (name, id)) in sources {
        let declared = &g.node(id).expect("source exists").ty;
        let fed = feeds.get(&name).ok_or_else(|| EvalError::MissingFeed { kind, name: name.clone() })?;
        let mismatch = || EvalError::FeedMismatch {
            name: name.clone(),
            expected: declared.to_string(),
            found: format!("{}{:?}", fed.dtype, fed.shape()),
        };
        if fed.dtype != declared.dtype || fed.shape().len() != declared.rank() {
            return Err(mismatch());
        }
        for (d, &n) in declared.shape.0.iter().zip(fed.shape()) {
            match d {
                Dim::Static(s) if *s != n => return Err(mismatch()),
                Dim::Static(_) => {}
                Dim::Sym(sym) => match binding.get(sym) {
                    Some(&first) if first != n => {
                        return Err(EvalError::SymbolConflict {
                            sym: sym.clone(),
                            first,
                            second: n,
                            name: name.clone(),
                        });
                    }
                    _ => {
                        binding.insert(sym.clone(), n);
                    }
                },
            }
        }
    }
    Ok(binding)
}

/// Resolve dims under a binding; Err names the first unbound symbol.
pub(crate) fn concrete(dims: &[Dim], binding: &BTreeMap<String, usize>) -> Result<Vec<usize>, String> {
    dims.iter()
        .map(|d| match d {
            Dim::Static(n) => Ok(*n),
            Dim::Sym(s) => binding.get(s).copied().ok_or_else(|| s.clone()),
        })
        .collect()
}
