//! Hugging Face `config.json` text for GPT-2, LLaMA and BERT: Ok or a ConfigError. A config
//! that is accepted and small enough to trace quickly must trace without a panic (validation
//! is meant to refuse everything that would divide by zero or overflow at trace time).
#![no_main]

use libfuzzer_sys::fuzz_target;
use rustral_frontend::{TraceOptions, trace};
use rustral_models::{Bert, BertConfig, Gpt2, Gpt2Config, Llama, LlamaConfig};

/// Widths, vocabularies and depths up to these are traced (larger ones take long, not wrongly).
const TRACE_WIDTH: usize = 256;
const TRACE_LAYERS: usize = 3;

fuzz_target!(|text: &str| {
    if let Ok(c) = Gpt2Config::from_json(text, "fuzz") {
        if c.n_embd <= TRACE_WIDTH
            && c.vocab_size <= TRACE_WIDTH
            && c.n_positions <= TRACE_WIDTH
            && c.n_layer <= TRACE_LAYERS
            && c.n_inner.unwrap_or(0) <= TRACE_WIDTH
        {
            let m = Gpt2 { config: c };
            let _ = trace(TraceOptions::default(), |ctx| {
                let ids = m.input(ctx)?;
                Ok(vec![m.forward(ctx, &ids)?])
            });
        }
    }
    if let Ok(c) = LlamaConfig::from_json(text, "fuzz") {
        if c.hidden_size <= TRACE_WIDTH
            && c.vocab_size <= TRACE_WIDTH
            && c.intermediate_size <= TRACE_WIDTH
            && c.num_hidden_layers <= TRACE_LAYERS
            && c.head_dim.unwrap_or(0) <= TRACE_WIDTH
        {
            let m = Llama { config: c };
            let _ = trace(TraceOptions::default(), |ctx| {
                let ids = m.input(ctx)?;
                Ok(vec![m.forward(ctx, &ids)?])
            });
        }
    }
    if let Ok(c) = BertConfig::from_json(text, "fuzz") {
        if c.hidden_size <= TRACE_WIDTH
            && c.vocab_size <= TRACE_WIDTH
            && c.intermediate_size <= TRACE_WIDTH
            && c.max_position_embeddings <= TRACE_WIDTH
            && c.type_vocab_size <= TRACE_WIDTH
            && c.num_hidden_layers <= TRACE_LAYERS
        {
            let m = Bert { config: c };
            let _ = trace(TraceOptions::default(), |ctx| {
                let (ids, types, mask) = m.inputs(ctx)?;
                Ok(vec![m.forward(ctx, &ids, &types, &mask)?])
            });
        }
    }
});
