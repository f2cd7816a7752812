//! The binary decoder on arbitrary bytes (with and without the magic header): an error or a
//! graph, never a panic or an unbounded allocation (libFuzzer's -rss_limit_mb catches those).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut framed = b"RIR\x01".to_vec();
    framed.extend_from_slice(data);
    for bytes in [data, framed.as_slice()] {
        if let Ok(g) = rustral_ir::from_binary(bytes) {
            let _ = rustral_ir::verify(&g);
            let _ = rustral_ir::print(&g);
        }
    }
});
