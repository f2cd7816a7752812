//! Reading Hugging Face `config.json` files.

use serde::de::DeserializeOwned;
use std::path::Path;
use thiserror::Error;

/// A config file that cannot be read or does not describe a supported model.
#[derive(Debug, Error)]
#[error("{path}: {message}")]
pub struct ConfigError {
    /// The file.
    pub path: String,
    /// What is wrong.
    pub message: String,
}

/// Parse a JSON config file into `T` (unknown fields are ignored, as HF configs carry many).
pub(crate) fn read_json<T: DeserializeOwned>(path: &Path) -> Result<T, ConfigError> {
    let err = |message: String| ConfigError { path: path.display().to_string(), message };
    let text = std::fs::read_to_string(path).map_err(|e| err(e.to_string()))?;
    serde_json::from_str(&text).map_err(|e| err(e.to_string()))
}
