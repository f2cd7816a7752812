//! The text parser on arbitrary UTF-8: it must return Ok or a ParseError, never panic. A graph
//! that parses must also print, reparse to an equal graph, and go through the verifier.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|text: &str| {
    if let Ok(g) = rustral_ir::parse(text) {
        let printed = rustral_ir::print(&g);
        let again = rustral_ir::parse(&printed).expect("printed text parses");
        assert_eq!(rustral_ir::print(&again), printed, "print is a fixed point");
        let _ = rustral_ir::verify(&g);
    }
});
