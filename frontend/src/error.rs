//! The frontend's errors. Shape errors at trace time come from the IR builder and already name
//! the op, the operand types and the module path.

use rustral_ir::IrError;
use thiserror::Error;

/// Anything that can go wrong while tracing a model or handling its parameters.
#[derive(Debug, Error)]
pub enum Error {
    /// An op that does not type (names op, shapes and module path), or another IR error.
    #[error("{0}")]
    Ir(#[from] IrError),
    /// A tensor used in a trace other than the one that made it.
    #[error("tensor from another trace used in `{op}`{}", at(.path))]
    ForeignTensor {
        /// Op being traced.
        op: String,
        /// Module path.
        path: String,
    },
    /// A bad argument to a tensor method (an axis out of range, a bad split).
    #[error("`{op}`{}: {message}", at(.path))]
    Argument {
        /// Op being traced.
        op: String,
        /// Module path.
        path: String,
        /// What is wrong.
        message: String,
    },
    /// A parameter that is missing, unexpected, mis-shaped or of the wrong dtype in a store.
    #[error("parameter {name:?}: {message}")]
    Param {
        /// Parameter name.
        name: String,
        /// What is wrong.
        message: String,
    },
    /// A weights file that cannot be read or written.
    #[error("{path}: {message}")]
    File {
        /// The file.
        path: String,
        /// Why.
        message: String,
    },
}

/// ` at {path}`, or nothing at the top level.
fn at(path: &str) -> String {
    if path.is_empty() { String::new() } else { format!(" at {path}") }
}

/// The frontend's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;
