//! A chat model from one GGUF file: the LLaMA config from its metadata, the weights (kept in
//! their block formats unless dequantized), the tokenizer from `tokenizer.ggml.*` and the
//! chat template from `tokenizer.chat_template`.

use super::CausalLm;
use super::text::TextTokenizer;
use crate::{Error, Result};
use rustral_frontend::gguf::Gguf;
use rustral_frontend::{ParamStore, QuantFormat};
use std::collections::BTreeMap;
use std::path::Path;

/// Everything a GGUF file holds for generation.
pub struct GgufModel {
    /// The architecture and its config.
    pub model: CausalLm,
    /// The weights under Hugging Face names.
    pub params: ParamStore,
    /// The parameters kept in block formats (for `GeneratorOptions::quantized`).
    pub quantized: BTreeMap<String, QuantFormat>,
    /// The tokenizer and chat template.
    pub tokenizer: TextTokenizer,
    /// Bytes of weights a decode step reads, every parameter once (exact where the embedding
    /// is also the output head, as in SmolLM2): the numerator of the memory-bandwidth bound
    /// on tokens per second.
    pub weight_bytes: usize,
}

fn gguf_error(e: rustral_frontend::gguf::GgufError) -> Error {
    Error::Usage(e.to_string())
}

/// Read a LLaMA-family GGUF file. `dequantize` turns every block-quantized tensor into f32 at
/// load (what Hugging Face transformers does): every target has quantized kernels, so this is
/// for comparing with f32 checkpoints.
pub fn load_gguf(path: &Path, dequantize: bool) -> Result<GgufModel> {
    let g = Gguf::read(path).map_err(gguf_error)?;
    let loaded = rustral_models::gguf::load_llama(&g, dequantize).map_err(gguf_error)?;
    let tokenizer = TextTokenizer::from_gguf(&g, path)?;
    let model = CausalLm::Llama(loaded.config);
    let specs = model.trace_quantized(None, &loaded.quantized)?.params;
    loaded.params.check(&specs).map_err(|e| Error::Usage(format!("{}: {e}", path.display())))?;
    let weight_bytes = loaded.params.iter().map(|(_, v)| v.data.len() * v.dtype.size_bytes()).sum::<usize>();
    Ok(GgufModel { model, params: loaded.params, quantized: loaded.quantized, tokenizer, weight_bytes })
}
