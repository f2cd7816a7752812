//! Why a command failed, and its exit status.

use std::fmt;

/// A failure: what went wrong, in one message that names the file, node or pass.
#[derive(Debug)]
pub enum Fail {
    /// The user's input or options (exit 1).
    User(String),
    /// A bug in Rustral (exit 2).
    Internal(String),
    /// `--check` found outputs beyond tolerance (exit 3).
    Check(String),
}

impl Fail {
    pub fn code(&self) -> u8 {
        match self {
            Fail::User(_) => 1,
            Fail::Internal(_) => 2,
            Fail::Check(_) => 3,
        }
    }

    pub fn user(message: impl Into<String>) -> Fail {
        Fail::User(message.into())
    }
}

impl fmt::Display for Fail {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Fail::User(m) => write!(f, "error: {m}"),
            Fail::Internal(m) => write!(f, "internal error (a bug in rustral-compile; please report it): {m}"),
            Fail::Check(m) => write!(f, "check failed: {m}"),
        }
    }
}

/// Library errors: a pass that broke the graph, a lowering that failed or a kernel that
/// produced the wrong shape are Rustral's bugs; the rest are about the input.
impl From<rustral::Error> for Fail {
    fn from(e: rustral::Error) -> Fail {
        use rustral::Error as E;
        use rustral::passes::PassError;
        let message = e.to_string();
        match &e {
            E::Passes(PassError::BrokenByPass { .. }) | E::Lower(_) => Fail::Internal(message),
            #[cfg(feature = "wgsl")]
            E::Wgsl(rustral::lowering::wgsl::WgslError::Invalid { .. }) => Fail::Internal(message),
            _ if message.contains("internal error") => Fail::Internal(message),
            _ => Fail::User(message),
        }
    }
}

macro_rules! user_error_from {
    ($($t:ty),*) => {$(
        impl From<$t> for Fail {
            fn from(e: $t) -> Fail {
                rustral::Error::from(e).into()
            }
        }
    )*};
}
user_error_from!(
    rustral::frontend::Error,
    rustral::ir::IrError,
    rustral::passes::PassError,
    rustral::runtime::reference::EvalError,
    rustral::runtime::cpu::CpuError
);
