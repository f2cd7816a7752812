//! Reading Hugging Face `config.json` files, and the limits a config must keep: a config that
//! would divide by zero, give NaN logits or change the maths in a way the model does not
//! implement is an error naming the key, never a panic or a silent wrong answer.

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

/// A key whose other values change the maths in ways the model does not implement (HF
/// defaults are what the model computes): `supported` says whether the file's value is one.
pub(crate) struct Key {
    pub name: &'static str,
    pub supported: fn(&serde_json::Value) -> bool,
    pub expected: &'static str,
}

/// Read a JSON config file (see `parse`).
pub(crate) fn read<T: DeserializeOwned>(
    path: &Path,
    keys: &[Key],
    validate: impl Fn(&T) -> Result<(), String>,
) -> Result<T, ConfigError> {
    let source = path.display().to_string();
    let text =
        std::fs::read_to_string(path).map_err(|e| ConfigError { path: source.clone(), message: e.to_string() })?;
    parse(&text, &source, keys, validate)
}

/// Parse JSON config text from `source` (named in errors) into `T` (unknown fields are
/// ignored, as HF configs carry many), refusing values of `keys` the model does not implement
/// and configs `validate` refuses.
pub(crate) fn parse<T: DeserializeOwned>(
    text: &str,
    source: &str,
    keys: &[Key],
    validate: impl Fn(&T) -> Result<(), String>,
) -> Result<T, ConfigError> {
    let err = |message: String| ConfigError { path: source.to_string(), message };
    let value: serde_json::Value = serde_json::from_str(text).map_err(|e| err(e.to_string()))?;
    for key in keys {
        if let Some(v) = value.get(key.name)
            && !(key.supported)(v)
        {
            return Err(err(format!("{} is {v}: not supported (this model implements {})", key.name, key.expected)));
        }
    }
    let config: T = serde_json::from_value(value).map_err(|e| err(e.to_string()))?;
    validate(&config).map_err(err)?;
    Ok(config)
}

/// Absent-or-null, false or true, as a key's supported values.
pub(crate) fn null_or_false(v: &serde_json::Value) -> bool {
    v.is_null() || v == &serde_json::Value::Bool(false)
}
pub(crate) fn null_or_true(v: &serde_json::Value) -> bool {
    v.is_null() || v == &serde_json::Value::Bool(true)
}

/// The largest width, vocabulary or table a config may give: beyond it the element counts of
/// its weights overflow what any target indexes (and no real model comes near).
pub const MAX_SIZE: usize = 1 << 24;
/// The most blocks a config may give.
pub const MAX_LAYERS: usize = 1 << 14;

/// `key` is a size in 1..=MAX_SIZE.
pub(crate) fn size(key: &str, v: usize) -> Result<(), String> {
    if v == 0 || v > MAX_SIZE {
        return Err(format!("{key} is {v}: give 1 to {MAX_SIZE}"));
    }
    Ok(())
}

/// `key` is a layer count in 0..=MAX_LAYERS.
pub(crate) fn layers(key: &str, v: usize) -> Result<(), String> {
    if v > MAX_LAYERS {
        return Err(format!("{key} is {v}: give at most {MAX_LAYERS}"));
    }
    Ok(())
}

/// `heads` heads of `width`: at least one, dividing it.
pub(crate) fn heads(width_key: &str, width: usize, heads_key: &str, heads: usize) -> Result<(), String> {
    size(heads_key, heads)?;
    if !width.is_multiple_of(heads) {
        return Err(format!("{width_key} {width} is not a multiple of {heads_key} {heads}"));
    }
    Ok(())
}

/// A normalisation epsilon: finite and not negative (a negative one gives NaN).
pub(crate) fn eps(key: &str, v: f64) -> Result<(), String> {
    if !(v.is_finite() && v >= 0.0) {
        return Err(format!("{key} is {v}: give a finite value >= 0"));
    }
    Ok(())
}

/// A dropout probability in [0, 1).
pub(crate) fn probability(key: &str, v: f64) -> Result<(), String> {
    if !(0.0..1.0).contains(&v) {
        return Err(format!("{key} is {v}: give a probability in [0, 1)"));
    }
    Ok(())
}

/// A config problem found when a model is traced from a config built in code.
pub(crate) fn invalid(model: &str, message: String) -> rustral_frontend::Error {
    rustral_frontend::Error::Argument { op: model.into(), path: String::new(), message: format!("config: {message}") }
}
