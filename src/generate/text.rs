//! Text in and out of a language model: Hugging Face `tokenizer.json` files through the
//! `tokenizers` crate, chat templates from `tokenizer_config.json` rendered by `minijinja`, and
//! incremental detokenisation for streaming that never prints half a UTF-8 character.

use crate::Error;
use std::path::{Path, PathBuf};

/// A tokenizer with the chat template and special tokens of its `tokenizer_config.json`.
pub struct TextTokenizer {
    inner: tokenizers::Tokenizer,
    chat_template: Option<String>,
    bos_token: Option<String>,
    eos_token: Option<String>,
    path: PathBuf,
}

/// One chat message.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Message {
    /// `system`, `user` or `assistant`.
    pub role: String,
    /// Its text.
    pub content: String,
}

fn tok_error(path: &Path, what: &str, e: impl std::fmt::Display) -> Error {
    Error::Usage(format!("{}: {what}: {e}", path.display()))
}

impl TextTokenizer {
    /// Read `tokenizer.json`, and beside it `tokenizer_config.json` (special tokens, the chat
    /// template) and `chat_template.jinja` (where newer checkpoints keep the template) when
    /// they are there.
    pub fn from_file(path: &Path) -> Result<TextTokenizer, Error> {
        let inner =
            tokenizers::Tokenizer::from_file(path).map_err(|e| tok_error(path, "cannot read the tokenizer", e))?;
        let config_path = path.with_file_name("tokenizer_config.json");
        let (mut chat_template, mut bos_token, mut eos_token) = (None, None, None);
        if config_path.exists() {
            let text = std::fs::read_to_string(&config_path).map_err(|e| tok_error(&config_path, "cannot read", e))?;
            let config: serde_json::Value =
                serde_json::from_str(&text).map_err(|e| tok_error(&config_path, "not JSON", e))?;
            chat_template = config.get("chat_template").and_then(|t| t.as_str()).map(str::to_string);
            let token = |key: &str| -> Option<String> {
                match config.get(key)? {
                    serde_json::Value::String(s) => Some(s.clone()),
                    v => v.get("content").and_then(|c| c.as_str()).map(str::to_string),
                }
            };
            bos_token = token("bos_token");
            eos_token = token("eos_token");
        }
        // transformers 5 writes the template to its own file.
        let jinja = path.with_file_name("chat_template.jinja");
        if chat_template.is_none() && jinja.exists() {
            chat_template = Some(std::fs::read_to_string(&jinja).map_err(|e| tok_error(&jinja, "cannot read", e))?);
        }
        Ok(TextTokenizer { inner, chat_template, bos_token, eos_token, path: path.to_path_buf() })
    }

    /// The tokenizer a GGUF file describes (`tokenizer.ggml.model = gpt2`: byte-level BPE from
    /// `tokens` and `merges`, control tokens special), built as Hugging Face transformers
    /// builds it from the same file, with `tokenizer.chat_template` and the BOS/EOS ids.
    pub fn from_gguf(g: &rustral_frontend::gguf::Gguf, path: &Path) -> Result<TextTokenizer, Error> {
        let bad = |e: rustral_frontend::gguf::GgufError| Error::Usage(e.to_string());
        let model = g.str("tokenizer.ggml.model").map_err(bad)?;
        if model != "gpt2" {
            return Err(tok_error(
                path,
                "tokenizer",
                format!("tokenizer.ggml.model {model:?} is not supported (byte-level BPE, \"gpt2\", is)"),
            ));
        }
        let tokens = g.strings("tokenizer.ggml.tokens").map_err(bad)?;
        let merges = g.strings("tokenizer.ggml.merges").map_err(bad)?;
        let types: Vec<u64> = match g.get("tokenizer.ggml.token_type") {
            Some(rustral_frontend::gguf::GgufValue::Array(v)) => v.iter().map(|t| t.as_u64().unwrap_or(1)).collect(),
            _ => vec![1; tokens.len()],
        };
        let mut vocab = serde_json::Map::new();
        for (id, t) in tokens.iter().enumerate() {
            if vocab.insert((*t).to_string(), serde_json::Value::from(id)).is_some() {
                return Err(tok_error(
                    path,
                    "tokenizer",
                    format!("token {t:?} appears twice in tokenizer.ggml.tokens"),
                ));
            }
        }
        let pairs: Vec<serde_json::Value> = merges
            .iter()
            .map(|m| match m.split_once(' ') {
                Some((a, b)) if !b.contains(' ') => Ok(serde_json::json!([a, b])),
                _ => Err(tok_error(path, "tokenizer", format!("merge {m:?} is not two tokens"))),
            })
            .collect::<Result<_, _>>()?;
        // GGML token types: 3 control (special), 4 user-defined (added, not special).
        let added: Vec<serde_json::Value> = types
            .iter()
            .enumerate()
            .filter(|(_, t)| matches!(t, 3 | 4))
            .map(|(id, t)| {
                serde_json::json!({"id": id, "content": tokens[id], "single_word": false, "lstrip": false,
                    "rstrip": false, "normalized": false, "special": *t == 3})
            })
            .collect();
        let byte_level = serde_json::json!({"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true});
        let json = serde_json::json!({
            "version": "1.0", "truncation": null, "padding": null, "added_tokens": added,
            "normalizer": null, "pre_tokenizer": byte_level, "post_processor": null, "decoder": byte_level,
            "model": {"type": "BPE", "dropout": null, "unk_token": null, "continuing_subword_prefix": null,
                "end_of_word_suffix": null, "fuse_unk": false, "byte_fallback": false, "ignore_merges": false,
                "vocab": vocab, "merges": pairs},
        });
        let inner: tokenizers::Tokenizer = json
            .to_string()
            .parse()
            .map_err(|e| tok_error(path, "cannot build the tokenizer from the file's vocabulary", e))?;
        let token = |key: &str| -> Option<String> {
            let id = g.get(key)?.as_u64()?;
            tokens.get(usize::try_from(id).ok()?).map(|t| (*t).to_string())
        };
        Ok(TextTokenizer {
            inner,
            chat_template: g.get("tokenizer.chat_template").and_then(|v| v.as_str()).map(str::to_string),
            bos_token: token("tokenizer.ggml.bos_token_id"),
            eos_token: token("tokenizer.ggml.eos_token_id"),
            path: path.to_path_buf(),
        })
    }

    /// Token ids of `text` (special tokens written in it are recognised; none are added).
    pub fn encode(&self, text: &str) -> Result<Vec<i64>, Error> {
        let enc = self.inner.encode(text, false).map_err(|e| tok_error(&self.path, "cannot encode the prompt", e))?;
        Ok(enc.get_ids().iter().map(|&i| i64::from(i)).collect())
    }

    /// The text of `ids`, special tokens skipped.
    pub fn decode(&self, ids: &[i64]) -> Result<String, Error> {
        let ids: Vec<u32> = ids.iter().map(|&i| u32::try_from(i).unwrap_or(u32::MAX)).collect();
        self.inner.decode(&ids, true).map_err(|e| tok_error(&self.path, "cannot decode", e))
    }

    /// The id of the config's end-of-sequence token, when it names one the vocabulary has.
    pub fn eos_id(&self) -> Option<i64> {
        self.eos_token.as_deref().and_then(|t| self.inner.token_to_id(t)).map(i64::from)
    }

    /// `messages` rendered by the chat template, ending with the assistant's turn opened
    /// (`add_generation_prompt`), as `apply_chat_template(..., tokenize=False)` renders them.
    pub fn render_chat(&self, messages: &[Message]) -> Result<String, Error> {
        let template = self.chat_template.as_deref().ok_or_else(|| {
            Error::Usage(format!(
                "{}: --chat needs a chat template (chat_template in tokenizer_config.json, or chat_template.jinja) beside the tokenizer, and there is none",
                self.path.display()
            ))
        })?;
        let mut env = minijinja::Environment::new();
        env.add_function("raise_exception", |message: String| -> Result<String, minijinja::Error> {
            Err(minijinja::Error::new(minijinja::ErrorKind::InvalidOperation, message))
        });
        let explain = |e: minijinja::Error| {
            Error::Usage(format!("the chat template of {} cannot be rendered: {e:#}", self.path.display()))
        };
        env.add_template("chat", template).map_err(explain)?;
        let context = minijinja::context! {
            messages => messages,
            add_generation_prompt => true,
            bos_token => self.bos_token.clone().unwrap_or_default(),
            eos_token => self.eos_token.clone().unwrap_or_default(),
        };
        env.get_template("chat").and_then(|t| t.render(context)).map_err(explain)
    }
}

/// Turns generated ids into text as they arrive: each `push` returns the new text that is
/// complete, holding back a character whose UTF-8 bytes are split across tokens (byte-level
/// BPE) until its last byte arrives.
pub struct StreamDecoder<'a> {
    tokenizer: &'a TextTokenizer,
    ids: Vec<i64>,
    printed: usize,
}

impl<'a> StreamDecoder<'a> {
    /// A decoder with nothing generated yet.
    pub fn new(tokenizer: &'a TextTokenizer) -> StreamDecoder<'a> {
        StreamDecoder { tokenizer, ids: Vec::new(), printed: 0 }
    }

    /// Add a token; the text it completes (empty when it ends mid-character).
    pub fn push(&mut self, id: i64) -> Result<String, Error> {
        self.ids.push(id);
        let text = self.tokenizer.decode(&self.ids)?;
        if text.ends_with('\u{FFFD}') || text.len() < self.printed || !text.is_char_boundary(self.printed) {
            return Ok(String::new());
        }
        let new = text[self.printed..].to_string();
        self.printed = text.len();
        Ok(new)
    }

    /// All text so far.
    pub fn text(&self) -> Result<String, Error> {
        self.tokenizer.decode(&self.ids)
    }
}
