//! LLaMA-family models from GGUF files: the config from the `llama.*` metadata and the weights
//! under their Hugging Face names, quantized tensors kept in their blocks (or dequantized to
//! f32 on request).
//!
//! llama.cpp's converter reorders the rows of each head's query and key projections from
//! Hugging Face's rotate-half layout to GGML's interleaved one (`permute` in
//! `convert_hf_to_gguf.py`); the loader puts them back, whole rows at a time (a row is a run of
//! blocks, so quantized rows move unchanged), and the model keeps its rotate-half RoPE.

use crate::llama::LlamaConfig;
use rustral_frontend::QuantFormat;
use rustral_frontend::gguf::{GgmlType, Gguf, GgufError, GgufTensor};
use rustral_frontend::{DType, ParamStore, ParamValue};
use std::collections::BTreeMap;

/// A LLaMA checkpoint read from GGUF.
#[derive(Clone, Debug)]
pub struct GgufLlama {
    /// The config its metadata describes.
    pub config: LlamaConfig,
    /// The weights under Hugging Face names (`model.layers.0.self_attn.q_proj.weight`).
    pub params: ParamStore,
    /// The parameters kept in block formats (`u8 [rows, row_bytes]`), for
    /// `TraceOptions::quantized`; empty when dequantized.
    pub quantized: BTreeMap<String, QuantFormat>,
}

fn err(g: &Gguf, message: String) -> GgufError {
    GgufError { file: g.file().to_string(), offset: None, message }
}

/// The config of a `general.architecture = llama` file.
pub fn llama_config(g: &Gguf) -> Result<LlamaConfig, GgufError> {
    let arch = g.str("general.architecture")?;
    if arch != "llama" {
        return Err(err(g, format!("architecture {arch:?} is not supported (Rustral reads llama GGUF files)")));
    }
    let key = |k: &str| format!("llama.{k}");
    let hidden = g.usize(&key("embedding_length"))?;
    let heads = g.usize(&key("attention.head_count"))?;
    let kv_heads = if g.get(&key("attention.head_count_kv")).is_some() {
        g.usize(&key("attention.head_count_kv"))?
    } else {
        heads
    };
    if heads == 0 || kv_heads == 0 || !heads.is_multiple_of(kv_heads) || !hidden.is_multiple_of(heads) {
        return Err(err(g, format!("{heads} heads over {kv_heads} key/value heads and width {hidden} do not divide")));
    }
    let embed = g.tensor("token_embd.weight")?;
    let vocab = match g.get(&key("vocab_size")) {
        Some(_) => g.usize(&key("vocab_size"))?,
        None => embed.shape.first().copied().unwrap_or(0),
    };
    let head_dim = match g.get(&key("attention.key_length")) {
        Some(_) => Some(g.usize(&key("attention.key_length"))?),
        None => None,
    };
    let theta = if g.get(&key("rope.freq_base")).is_some() { g.f64(&key("rope.freq_base"))? } else { 10000.0 };
    let config = LlamaConfig {
        vocab_size: vocab,
        hidden_size: hidden,
        intermediate_size: g.usize(&key("feed_forward_length"))?,
        num_hidden_layers: g.usize(&key("block_count"))?,
        num_attention_heads: heads,
        num_key_value_heads: kv_heads,
        head_dim,
        rms_norm_eps: g.f64(&key("attention.layer_norm_rms_epsilon"))?,
        rope_theta: Some(theta),
        rope_parameters: None,
        tie_word_embeddings: g.tensor("output.weight").is_err(),
        max_position_embeddings: g.get(&key("context_length")).and_then(|v| v.as_u64()).map(|v| v as usize),
    };
    // The limits a config.json must keep hold here too: a block count of 2^24 would otherwise
    // list 150 million tensor names before the first lookup failed.
    config.validate().map_err(|message| err(g, message))?;
    Ok(config)
}

/// The GGUF tensor name of each Hugging Face parameter name, with the heads its rows are
/// permuted over (queries and keys).
fn names(c: &LlamaConfig) -> Vec<(String, String, Option<usize>)> {
    let mut out = vec![
        ("model.embed_tokens.weight".to_string(), "token_embd.weight".to_string(), None),
        ("model.norm.weight".to_string(), "output_norm.weight".to_string(), None),
    ];
    if !c.tie_word_embeddings {
        out.push(("lm_head.weight".into(), "output.weight".into(), None));
    }
    for i in 0..c.num_hidden_layers {
        let hf = |s: &str| format!("model.layers.{i}.{s}.weight");
        let gg = |s: &str| format!("blk.{i}.{s}.weight");
        out.extend([
            (hf("input_layernorm"), gg("attn_norm"), None),
            (hf("post_attention_layernorm"), gg("ffn_norm"), None),
            (hf("self_attn.q_proj"), gg("attn_q"), Some(c.num_attention_heads)),
            (hf("self_attn.k_proj"), gg("attn_k"), Some(c.num_key_value_heads)),
            (hf("self_attn.v_proj"), gg("attn_v"), None),
            (hf("self_attn.o_proj"), gg("attn_output"), None),
            (hf("mlp.gate_proj"), gg("ffn_gate"), None),
            (hf("mlp.up_proj"), gg("ffn_up"), None),
            (hf("mlp.down_proj"), gg("ffn_down"), None),
        ]);
    }
    out
}

/// Hugging Face row `r` of a projection over `heads` heads comes from GGUF row `source(r)`:
/// within a head, HF's row `j * half + i` is GGUF's `2 * i + j`.
fn unpermute<T: Copy>(rows: &[T], width: usize, heads: usize) -> Option<Vec<T>> {
    // An empty row (a tensor with a zero dim) has no heads to split.
    let n = rows.len().checked_div(width)?;
    if heads == 0 || !n.is_multiple_of(heads) || !(n / heads).is_multiple_of(2) {
        return None;
    }
    let (hd, half) = (n / heads, n / heads / 2);
    let mut out = Vec::with_capacity(rows.len());
    for r in 0..n {
        let (h, within) = (r / hd, r % hd);
        let (j, i) = (within / half, within % half);
        let src = h * hd + 2 * i + j;
        out.extend_from_slice(&rows[src * width..(src + 1) * width]);
    }
    Some(out)
}

/// Read a LLaMA GGUF: config, weights (quantized tensors kept in their blocks unless
/// `dequantize`), and which parameters are quantized.
pub fn load_llama(g: &Gguf, dequantize: bool) -> Result<GgufLlama, GgufError> {
    let config = llama_config(g)?;
    let mut params = ParamStore::default();
    let mut quantized = BTreeMap::new();
    for (hf, name, heads) in names(&config) {
        let t: &GgufTensor = g.tensor(&name)?;
        let (rows, width) = t.rows_and_width();
        let bad_heads = || err(g, format!("tensor {name:?} of shape {:?} does not split into its heads", t.shape));
        let value = match t.ggml_type {
            GgmlType::Quant(format) if !dequantize && t.shape.len() == 2 => {
                let bytes = g.data(t);
                let row_bytes = bytes.len() / rows.max(1);
                let bytes = match heads {
                    Some(h) => unpermute(bytes, row_bytes, h).ok_or_else(bad_heads)?,
                    None => bytes.to_vec(),
                };
                quantized.insert(hf.clone(), format);
                ParamValue {
                    dtype: DType::U8,
                    shape: vec![rows, row_bytes],
                    data: bytes.into_iter().map(f64::from).collect(),
                }
            }
            _ => {
                let values = g.to_f32(t)?;
                let values = match heads {
                    Some(h) => unpermute(&values, width, h).ok_or_else(bad_heads)?,
                    None => values,
                };
                ParamValue {
                    dtype: DType::F32,
                    shape: t.shape.clone(),
                    data: values.into_iter().map(f64::from).collect(),
                }
            }
        };
        params.insert(&hf, value);
    }
    Ok(GgufLlama { config, params, quantized })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The converter's permute (reshape(heads, 2, half, k).swapaxes(1, 2)) undone.
    #[test]
    fn unpermute_inverts_the_converters_permute() {
        let (heads, hd, k) = (3, 4, 2);
        let hf: Vec<usize> = (0..heads * hd * k).collect();
        // convert_hf_to_gguf: gguf row h*hd + 2*i + j holds HF row h*hd + j*half + i.
        let half = hd / 2;
        let mut gguf = Vec::new();
        for h in 0..heads {
            for i in 0..half {
                for j in 0..2 {
                    let r = h * hd + j * half + i;
                    gguf.extend_from_slice(&hf[r * k..(r + 1) * k]);
                }
            }
        }
        assert_eq!(unpermute(&gguf, k, heads).unwrap(), hf);
        assert!(unpermute(&gguf, k, 5).is_none());
    }
}
