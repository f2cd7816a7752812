//! A GGUF file's LLaMA metadata keeps the limits a config.json keeps (found by the `gguf`
//! fuzz target: a block count of 16 million made the loader list 150 million tensor names and
//! run out of memory before its first lookup failed).

use rustral_frontend::gguf::{Gguf, GgufValue, write_gguf};

fn llama(block_count: u32) -> Gguf {
    let embed: Vec<u8> = vec![0; 4 * 8 * 4];
    let bytes = write_gguf(
        &[
            ("general.architecture", GgufValue::String("llama".into())),
            ("llama.block_count", GgufValue::U32(block_count)),
            ("llama.context_length", GgufValue::U32(16)),
            ("llama.embedding_length", GgufValue::U32(8)),
            ("llama.feed_forward_length", GgufValue::U32(16)),
            ("llama.attention.head_count", GgufValue::U32(2)),
            ("llama.attention.layer_norm_rms_epsilon", GgufValue::F32(1e-5)),
        ],
        &[("token_embd.weight", &[8, 4], 0, &embed)],
    );
    Gguf::parse(bytes, "test.gguf").unwrap()
}

#[test]
fn a_block_count_past_the_limit_is_an_error_naming_it() {
    let err = rustral_models::gguf::load_llama(&llama(16_646_145), false).unwrap_err();
    assert!(err.message.contains("num_hidden_layers is 16646145"), "{err}");
    assert_eq!(err.file, "test.gguf");
    // Within the limit, the config reads; the loader then names the first missing tensor.
    let config = rustral_models::gguf::llama_config(&llama(2)).unwrap();
    assert_eq!(config.num_hidden_layers, 2);
    let err = rustral_models::gguf::load_llama(&llama(2), false).unwrap_err();
    assert!(err.message.contains("output_norm.weight"), "{err}");
}
