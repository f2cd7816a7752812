//! Rustral's typed dataflow IR: the language every stage of the compiler speaks.
//!
//! A [`Graph`] holds typed nodes (an [`Op`] with its [`TensorType`] and provenance) on
//! petgraph, with ordered operands and named outputs. Every graph can be
//! - checked by [`verify`], which names each broken invariant's node and module path;
//! - printed as text ([`print`]) and parsed back ([`parse`]), byte-identically;
//! - serialized to JSON ([`to_json`], schema in `schemas/ir.schema.json`) and a compact
//!   binary form ([`to_binary`]), whose decoders reject hostile input with an error;
//! - drawn as Graphviz DOT ([`to_dot`]) or exported for Google Model Explorer
//!   ([`to_model_explorer`]).

#![deny(missing_docs)]

mod dot;
mod dtype;
mod error;
mod float;
mod graph;
mod infer;
mod loc;
mod model_explorer;
mod op;
mod parse;
mod quant;
pub mod samples;
mod serial;
mod shape;
#[cfg(feature = "proptest")]
pub mod testing;
mod text;
mod verify;

pub use dot::to_dot;
pub use dtype::DType;
pub use error::{IrError, ParseError, TypeError, VerifyError, VerifyErrors};
pub use float::F64;
pub use graph::{Graph, Node, NodeId, Output};
pub use infer::{MAX_TENSOR_BYTES, infer};
pub use loc::{SourceLoc, loc_summary};
pub use model_explorer::to_model_explorer;
pub use op::{
    Activation, AttrVisitor, AttrWriter, BinaryOp, Choice, ElementwiseExpr, ExprNode, GeluApprox,
    INTEGER_DIVISION_BY_ZERO, KernelFamily, Literal, Op, OpClass, OpDecl, Real, ReduceOp, UnaryOp, Window2d,
};
pub use parse::{MAX_NESTING, parse};
pub use quant::{QuantError, QuantFormat, f16_at, k_scale_min};
pub use serial::{FORMAT_VERSION, GraphRepr, NodeRepr, OutputRepr, from_binary, from_json, to_binary, to_json};
pub use shape::{Dim, Shape, SymProduct, TensorType, broadcast_shapes, broadcasts_to, is_identifier};
pub use text::{op_text, print};
pub use verify::verify;

/// Parse text and verify the result: the usual way to read a `.rir` file.
pub fn parse_verified(src: &str) -> Result<Graph, IrError> {
    let g = parse(src)?;
    verify(&g)?;
    Ok(g)
}
