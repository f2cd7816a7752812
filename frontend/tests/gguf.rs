//! The GGUF reader: dequantization against the `gguf` Python package on random blocks
//! (fixtures/gguf/blocks.json, made by make_blocks.py), and hostile or truncated files.

use rustral_frontend::gguf::{Gguf, GgufValue, write_gguf};

fn hex(s: &str) -> Vec<u8> {
    (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect()
}

const TYPE_IDS: [(&str, u32); 9] = [
    ("F32", 0),
    ("F16", 1),
    ("BF16", 30),
    ("Q8_0", 8),
    ("Q4_0", 2),
    ("Q4_1", 3),
    ("Q4_K", 12),
    ("Q5_K", 13),
    ("Q6_K", 14),
];

/// Every type's blocks, written into a GGUF file as a one-row tensor and read back as f32,
/// equal bit for bit to `gguf.quants.dequantize` (both compute in f32, in the same order).
#[test]
fn dequantization_matches_the_gguf_package() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../fixtures/gguf/blocks.json");
    let fixture: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    for (name, id) in TYPE_IDS {
        let t = &fixture["types"][name];
        let bytes = hex(t["bytes"].as_str().unwrap());
        let want: Vec<f32> = t["values"].as_array().unwrap().iter().map(|v| v.as_f64().unwrap() as f32).collect();
        let file = write_gguf(&[], &[("w", &[1, want.len()], id, &bytes)]);
        let g = Gguf::parse(file, name).unwrap();
        let got = g.to_f32(g.tensor("w").unwrap()).unwrap();
        assert_eq!(got.len(), want.len(), "{name}");
        for (i, (a, b)) in got.iter().zip(&want).enumerate() {
            assert_eq!(a.to_bits(), b.to_bits(), "{name} weight {i}: {a} vs {b}");
        }
    }
}

fn small_file() -> Vec<u8> {
    let data: Vec<u8> = (0..64).collect();
    write_gguf(
        &[
            ("general.architecture", GgufValue::String("llama".into())),
            ("llama.block_count", GgufValue::U32(2)),
            (
                "tokenizer.ggml.tokens",
                GgufValue::Array(vec![GgufValue::String("a".into()), GgufValue::String("b".into())]),
            ),
        ],
        &[("t", &[4, 4], 0, &data)],
    )
}

#[test]
fn reads_metadata_and_tensors() {
    let g = Gguf::parse(small_file(), "small").unwrap();
    assert_eq!(g.version, 3);
    assert_eq!(g.str("general.architecture").unwrap(), "llama");
    assert_eq!(g.usize("llama.block_count").unwrap(), 2);
    assert_eq!(g.strings("tokenizer.ggml.tokens").unwrap(), ["a", "b"]);
    let t = g.tensor("t").unwrap();
    assert_eq!(t.shape, [4, 4]);
    assert_eq!(g.data(t).len(), 64);
    assert!(g.usize("general.architecture").is_err());
    assert!(g.tensor("missing").unwrap_err().to_string().contains("no tensor \"missing\""));
}

/// Every truncation of a valid file is an error naming a byte offset, never a panic.
#[test]
fn truncated_files_are_errors() {
    let file = small_file();
    for n in 0..file.len() - 32 {
        let e = Gguf::parse(file[..n].to_vec(), "cut").unwrap_err();
        assert!(e.offset.is_some() || e.message.contains("past the end"), "{n}: {e}");
    }
}

/// Hostile counts and lengths are refused before anything is allocated for them.
#[test]
fn hostile_headers_are_errors() {
    let file = small_file();
    let mut huge_tensors = file.clone();
    huge_tensors[8..16].copy_from_slice(&u64::MAX.to_le_bytes());
    let e = Gguf::parse(huge_tensors, "x").unwrap_err();
    assert!(e.message.contains("tensor count"), "{e}");

    let mut huge_kv = file.clone();
    huge_kv[16..24].copy_from_slice(&(1u64 << 40).to_le_bytes());
    assert!(Gguf::parse(huge_kv, "x").unwrap_err().message.contains("metadata count"));

    // The first key's length.
    let mut huge_key = file.clone();
    huge_key[24..32].copy_from_slice(&(u64::MAX - 3).to_le_bytes());
    assert!(Gguf::parse(huge_key, "x").unwrap_err().message.contains("key length"));

    let mut magic = file.clone();
    magic[0] = b'X';
    assert!(Gguf::parse(magic, "x").unwrap_err().message.contains("not a GGUF file"));

    let mut version = file.clone();
    version[4] = 9;
    assert!(Gguf::parse(version, "x").unwrap_err().message.contains("version 9"));

    // A tensor whose extent runs past the end, and an unknown type.
    let data = [0u8; 16];
    let past = write_gguf(&[], &[("t", &[1, 1 << 20], 0, &data)]);
    assert!(Gguf::parse(past, "x").unwrap_err().message.contains("past the end"));
    let unknown = write_gguf(&[], &[("t", &[1, 4], 99, &data)]);
    assert!(Gguf::parse(unknown, "x").unwrap_err().message.contains("GGML type 99"));
    // A quantized tensor whose row is not whole blocks.
    let partial = write_gguf(&[], &[("t", &[1, 31], 8, &data)]);
    assert!(Gguf::parse(partial, "x").unwrap_err().message.contains("not whole Q8_0 rows"));
    // Dims whose product overflows.
    let overflow = write_gguf(&[], &[("t", &[1 << 40, 1 << 40, 4], 0, &data)]);
    assert!(Gguf::parse(overflow, "x").is_err());
}

/// Random bytes never panic the reader.
#[test]
fn random_bytes_are_errors_not_panics() {
    let mut s = 1u64;
    let file = small_file();
    for trial in 0..2000 {
        let mut f = file.clone();
        for _ in 0..1 + trial % 4 {
            s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            let at = (s >> 33) as usize % f.len();
            f[at] = (s >> 20) as u8;
        }
        let _ = Gguf::parse(f, "fuzz");
    }
}
