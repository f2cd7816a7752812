//! Benchmarks. For now: graphs of real model shapes for the compile-time bench of the passes
//! (`cargo bench -p rustral-bench --bench compile_time`). Target benches and the pass-ablation
//! harness arrive with their issues.

#![deny(missing_docs)]

use rustral_frontend::{TraceOptions, trace};
use rustral_ir::Graph;
use rustral_models::{Gpt2, Gpt2Config};

/// GPT-2 small's shape (width 768, 12 heads, vocab 50257, 1024 positions) with `layers`
/// blocks, traced for inference with symbolic batch and sequence.
pub fn gpt2_small_graph(layers: usize) -> Graph {
    let config = Gpt2Config {
        vocab_size: 50257,
        n_embd: 768,
        n_layer: layers,
        n_head: 12,
        n_positions: 1024,
        n_inner: None,
        layer_norm_epsilon: 1e-5,
        activation_function: "gelu_new".into(),
        resid_pdrop: 0.0,
        embd_pdrop: 0.0,
        attn_pdrop: 0.0,
    };
    let model = Gpt2 { config };
    let traced = trace(TraceOptions { name: format!("gpt2-small-{layers}"), ..TraceOptions::default() }, |ctx| {
        let ids = model.input(ctx)?;
        Ok(vec![model.forward(ctx, &ids)?])
    });
    traced.expect("GPT-2 small traces").graph
}
