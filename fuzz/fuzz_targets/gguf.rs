//! The GGUF reader on arbitrary bytes, then the LLaMA loader on what it accepts (quantized and
//! dequantized): Ok or a GgufError, never a panic or an allocation the file cannot back.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rustral_frontend::gguf::Gguf;

fuzz_target!(|data: &[u8]| {
    let Ok(g) = Gguf::parse(data.to_vec(), "fuzz.gguf") else { return };
    for dequantize in [false, true] {
        let _ = rustral_models::gguf::load_llama(&g, dequantize);
    }
});
