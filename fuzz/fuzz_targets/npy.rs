//! The .npy reader on arbitrary bytes, as `rustral-compile --input` reads them: the header
//! checked against the length first, then the values for a float and an integer input. A
//! file that reads gives exactly as many values as its shape has elements.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rustral::npy;
use rustral_ir::DType;
use std::io::Cursor;

fuzz_target!(|data: &[u8]| {
    let mut file = Cursor::new(data);
    let Ok(header) = npy::header(&mut file) else { return };
    for dtype in [DType::F32, DType::I64] {
        if let Ok((shape, values)) = npy::values(Cursor::new(data), &header, dtype) {
            assert_eq!(shape.iter().product::<usize>(), values.len(), "{header:?}");
            let claimed: Vec<usize> = header.shape.iter().map(|&d| d as usize).collect();
            assert_eq!(shape, claimed, "the values have the header's shape");
        }
    }
});
