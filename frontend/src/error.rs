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
    /// An error while tracing, with the model source line of the tensor call that caused it
    /// (`#[track_caller]` through the tensor API and the layers).
    #[error("{file}:{line}:{column}: {error}")]
    At {
        /// Source file of the call, as the compiler saw it.
        file: String,
        /// Line.
        line: u32,
        /// Column.
        column: u32,
        /// What went wrong there.
        error: Box<Error>,
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

impl Error {
    /// `error` located at `caller`. An error already located in the model's code keeps its
    /// place (the innermost model line); one located inside this crate (a layer's own tensor
    /// calls) moves out to `caller`, so a layer's error names the line that called the layer.
    pub fn at(caller: &std::panic::Location<'_>, error: Error) -> Error {
        match error {
            Error::At { ref file, .. } if !in_this_crate(file) => error,
            Error::At { error, .. } => Error::at(caller, *error),
            error => Error::At {
                file: caller.file().to_string(),
                line: caller.line(),
                column: caller.column(),
                error: Box::new(error),
            },
        }
    }

    /// The error without its source location.
    pub fn unlocated(&self) -> &Error {
        match self {
            Error::At { error, .. } => error.unlocated(),
            e => e,
        }
    }
}

/// Whether `file` (as `Location::file` gives it) is one of this crate's sources.
pub(crate) fn in_this_crate(file: &str) -> bool {
    let own = file!();
    let dir = own.strip_suffix("error.rs").unwrap_or(own);
    file.starts_with(dir)
}

/// ` at {path}`, or nothing at the top level.
fn at(path: &str) -> String {
    if path.is_empty() { String::new() } else { format!(" at {path}") }
}

/// The frontend's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;
