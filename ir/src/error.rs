//! Typed errors of the IR layer. Each names the place: a node (`%n`) and its provenance for
//! type and verifier errors, line:col for parse errors.

use crate::shape::TensorType;
use std::fmt;
use thiserror::Error;

/// An op that cannot be typed on its operands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TypeError {
    /// Op name (`add`, `matmul`, ...).
    pub op: String,
    /// Module path of the node being built.
    pub provenance: String,
    /// Operand types.
    pub operands: Vec<TensorType>,
    /// What is wrong.
    pub reason: String,
}

impl fmt::Display for TypeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "type error in `{}`", self.op)?;
        if !self.provenance.is_empty() {
            write!(f, " at {}", self.provenance)?;
        }
        let ops: Vec<String> = self.operands.iter().map(|t| t.to_string()).collect();
        if !ops.is_empty() {
            write!(f, " (operands: {})", ops.join(", "))?;
        }
        write!(f, ": {}", self.reason)
    }
}

/// A text IR that does not parse: where, what was expected, what was found.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
#[error("{line}:{col}: expected {expected}, found {found}")]
pub struct ParseError {
    /// 1-based line.
    pub line: usize,
    /// 1-based column (in characters).
    pub col: usize,
    /// What the parser wanted.
    pub expected: String,
    /// What it saw.
    pub found: String,
}

/// One broken invariant, tied to a node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VerifyError {
    /// The node's printed number (`%n`), if the error concerns one node.
    pub node: Option<usize>,
    /// The op's name.
    pub op: String,
    /// The node's module path.
    pub provenance: String,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for VerifyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.node {
            Some(n) => write!(f, "%{n} ({})", self.op)?,
            None => f.write_str("graph")?,
        }
        if !self.provenance.is_empty() {
            write!(f, " at {}", self.provenance)?;
        }
        write!(f, ": {}", self.message)
    }
}

/// Every invariant the verifier found broken, in node order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VerifyErrors(pub Vec<VerifyError>);

impl fmt::Display for VerifyErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, e) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str("\n")?;
            }
            write!(f, "{e}")?;
        }
        Ok(())
    }
}

impl std::error::Error for VerifyErrors {}

/// Any error of the IR layer.
#[derive(Debug, Error)]
pub enum IrError {
    /// An ill-typed op at construction.
    #[error("{0}")]
    Type(Box<TypeError>),
    /// Text that does not parse.
    #[error("parse error at {0}")]
    Parse(#[from] ParseError),
    /// A graph that breaks invariants.
    #[error("graph does not verify:\n{0}")]
    Verify(#[from] VerifyErrors),
    /// A node handle or number that does not exist.
    #[error("no node {index} ({context})")]
    UnknownNode {
        /// The index or number.
        index: usize,
        /// Where it was used.
        context: String,
    },
    /// A name used twice.
    #[error("duplicate {kind} name {name:?}")]
    DuplicateName {
        /// `input`, `param` or `output`.
        kind: &'static str,
        /// The name.
        name: String,
    },
    /// JSON or binary that does not decode to a graph.
    #[error("cannot decode {format} IR: {message}")]
    Decode {
        /// `json` or `binary`.
        format: &'static str,
        /// Why.
        message: String,
    },
    /// A serialized graph of a format version this build does not read.
    #[error("unsupported IR format version {found} (this build reads version {supported})")]
    Version {
        /// Found in the input.
        found: u32,
        /// The one this build reads.
        supported: u32,
    },
}
