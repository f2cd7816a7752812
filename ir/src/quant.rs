//! Block-quantized weight formats (GGML's, as GGUF files store them) and their exact
//! dequantization: the meaning of the `dequantize` and `quant_matmul` ops, which every target
//! shares. A quantized matrix is a `u8` tensor `[rows, row_bytes]`: each row is its own run of
//! blocks over the reduction axis, so rows can be gathered (embeddings) and permuted (GGUF's
//! Q/K rows) without touching the blocks.
//!
//! The arithmetic follows the `gguf` Python package (and ggml's reference C) operation by
//! operation in f32, so dequantized values are bit-identical to what Hugging Face transformers
//! loads from the same file.

use half::f16;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// A block format.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum QuantFormat {
    /// 32 weights: an f16 scale and 32 signed bytes. `x = d * q`.
    Q8_0,
    /// 32 weights: an f16 scale and 32 nibbles. `x = d * (q - 8)`.
    Q4_0,
    /// 32 weights: f16 scale and minimum, 32 nibbles. `x = d * q + m`.
    Q4_1,
    /// 256 weights in 8 sub-blocks of 32 with 6-bit scales and minima under two f16 factors.
    Q4K,
    /// Q4_K with a fifth bit per weight.
    Q5K,
    /// 256 weights: 6-bit values in 16 sub-blocks of 16 with signed 8-bit scales, one f16 factor.
    Q6K,
}

/// Where a row of blocks does not fit its format.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{format}: {message}")]
pub struct QuantError {
    /// The format.
    pub format: QuantFormat,
    /// What was wrong.
    pub message: String,
}

impl QuantFormat {
    /// Every format, in declaration order.
    pub const ALL: [QuantFormat; 6] =
        [QuantFormat::Q8_0, QuantFormat::Q4_0, QuantFormat::Q4_1, QuantFormat::Q4K, QuantFormat::Q5K, QuantFormat::Q6K];

    /// The name in the text IR (GGML's, lower case).
    pub fn name(self) -> &'static str {
        match self {
            QuantFormat::Q8_0 => "q8_0",
            QuantFormat::Q4_0 => "q4_0",
            QuantFormat::Q4_1 => "q4_1",
            QuantFormat::Q4K => "q4_k",
            QuantFormat::Q5K => "q5_k",
            QuantFormat::Q6K => "q6_k",
        }
    }

    /// Weights per block.
    pub fn block_size(self) -> usize {
        match self {
            QuantFormat::Q8_0 | QuantFormat::Q4_0 | QuantFormat::Q4_1 => 32,
            QuantFormat::Q4K | QuantFormat::Q5K | QuantFormat::Q6K => 256,
        }
    }

    /// Bytes per block.
    pub fn block_bytes(self) -> usize {
        match self {
            QuantFormat::Q8_0 => 34,
            QuantFormat::Q4_0 => 18,
            QuantFormat::Q4_1 => 20,
            QuantFormat::Q4K => 144,
            QuantFormat::Q5K => 176,
            QuantFormat::Q6K => 210,
        }
    }

    /// Bytes of a row of `k` weights; an error when `k` is not a whole number of blocks.
    pub fn row_bytes(self, k: usize) -> Result<usize, QuantError> {
        if k == 0 || !k.is_multiple_of(self.block_size()) {
            return Err(
                self.error(format!("{k} weights are not a whole number of {}-weight blocks", self.block_size()))
            );
        }
        (k / self.block_size())
            .checked_mul(self.block_bytes())
            .ok_or_else(|| self.error(format!("a row of {k} weights has more bytes than memory can address")))
    }

    /// Weights in a row of `bytes` bytes; an error when `bytes` is not a whole number of blocks.
    pub fn row_weights(self, bytes: usize) -> Result<usize, QuantError> {
        if bytes == 0 || !bytes.is_multiple_of(self.block_bytes()) {
            return Err(
                self.error(format!("{bytes} bytes are not a whole number of {}-byte blocks", self.block_bytes()))
            );
        }
        Ok(bytes / self.block_bytes() * self.block_size())
    }

    fn error(self, message: String) -> QuantError {
        QuantError { format: self, message }
    }

    /// Dequantize whole blocks: `out.len()` weights from `bytes` (which must hold exactly
    /// their blocks).
    pub fn dequantize(self, bytes: &[u8], out: &mut [f32]) -> Result<(), QuantError> {
        let blocks = out.len() / self.block_size();
        if !out.len().is_multiple_of(self.block_size()) || bytes.len() != blocks * self.block_bytes() {
            return Err(self.error(format!("{} bytes do not hold {} weights", bytes.len(), out.len())));
        }
        for (block, y) in bytes.chunks_exact(self.block_bytes()).zip(out.chunks_exact_mut(self.block_size())) {
            match self {
                QuantFormat::Q8_0 => q8_0(block, y),
                QuantFormat::Q4_0 => q4_0(block, y),
                QuantFormat::Q4_1 => q4_1(block, y),
                QuantFormat::Q4K => q4_k(block, y),
                QuantFormat::Q5K => q5_k(block, y),
                QuantFormat::Q6K => q6_k(block, y),
            }
        }
        Ok(())
    }
}

impl fmt::Display for QuantFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for QuantFormat {
    type Err = ();
    fn from_str(s: &str) -> Result<Self, ()> {
        QuantFormat::ALL.into_iter().find(|q| q.name() == s).ok_or(())
    }
}

/// The f16 at `b[i..i + 2]` (little-endian), as f32.
pub fn f16_at(b: &[u8], i: usize) -> f32 {
    f16::from_le_bytes([b[i], b[i + 1]]).to_f32()
}

fn q8_0(b: &[u8], y: &mut [f32]) {
    let d = f16_at(b, 0);
    for (y, &q) in y.iter_mut().zip(&b[2..34]) {
        *y = d * f32::from(q as i8);
    }
}

fn q4_0(b: &[u8], y: &mut [f32]) {
    let d = f16_at(b, 0);
    for (j, &q) in b[2..18].iter().enumerate() {
        y[j] = d * f32::from((q & 0x0F) as i8 - 8);
        y[j + 16] = d * f32::from((q >> 4) as i8 - 8);
    }
}

fn q4_1(b: &[u8], y: &mut [f32]) {
    let (d, m) = (f16_at(b, 0), f16_at(b, 2));
    for (j, &q) in b[4..20].iter().enumerate() {
        y[j] = d * f32::from(q & 0x0F) + m;
        y[j + 16] = d * f32::from(q >> 4) + m;
    }
}

/// Sub-block `j`'s 6-bit scale and minimum from K-quants' packed 12 bytes.
pub fn k_scale_min(j: usize, s: &[u8]) -> (u8, u8) {
    if j < 4 {
        (s[j] & 63, s[j + 4] & 63)
    } else {
        ((s[j + 4] & 0x0F) | ((s[j - 4] >> 6) << 4), (s[j + 4] >> 4) | ((s[j] >> 6) << 4))
    }
}

fn q4_k(b: &[u8], y: &mut [f32]) {
    let (d, dmin) = (f16_at(b, 0), f16_at(b, 2));
    let (scales, qs) = (&b[4..16], &b[16..144]);
    for chunk in 0..4 {
        let q = &qs[chunk * 32..chunk * 32 + 32];
        for half in 0..2 {
            let (sc, m) = k_scale_min(2 * chunk + half, scales);
            let (d1, m1) = (d * f32::from(sc), dmin * f32::from(m));
            let out = &mut y[chunk * 64 + half * 32..chunk * 64 + half * 32 + 32];
            for (o, &q) in out.iter_mut().zip(q) {
                *o = d1 * f32::from((q >> (4 * half)) & 0x0F) - m1;
            }
        }
    }
}

fn q5_k(b: &[u8], y: &mut [f32]) {
    let (d, dmin) = (f16_at(b, 0), f16_at(b, 2));
    let (scales, qh, qs) = (&b[4..16], &b[16..48], &b[48..176]);
    for chunk in 0..4 {
        let q = &qs[chunk * 32..chunk * 32 + 32];
        for half in 0..2 {
            let sub = 2 * chunk + half;
            let (sc, m) = k_scale_min(sub, scales);
            let (d1, m1) = (d * f32::from(sc), dmin * f32::from(m));
            let out = &mut y[sub * 32..sub * 32 + 32];
            for l in 0..32 {
                let v = ((q[l] >> (4 * half)) & 0x0F) | (((qh[l] >> sub) & 1) << 4);
                out[l] = d1 * f32::from(v) - m1;
            }
        }
    }
}

fn q6_k(b: &[u8], y: &mut [f32]) {
    let (ql, qh, scales) = (&b[0..128], &b[128..192], &b[192..208]);
    let d = f16_at(b, 208);
    for n in 0..2 {
        let (ql, qh, sc, y) = (&ql[n * 64..], &qh[n * 32..], &scales[n * 8..], &mut y[n * 128..]);
        for l in 0..32 {
            let is = l / 16;
            let q = [
                (ql[l] & 0x0F) | ((qh[l] & 3) << 4),
                (ql[l + 32] & 0x0F) | (((qh[l] >> 2) & 3) << 4),
                (ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4),
                (ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4),
            ];
            for (i, q) in q.into_iter().enumerate() {
                let scale = d * f32::from(sc[is + 2 * i] as i8);
                y[l + 32 * i] = scale * f32::from(q as i8 - 32);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn row_sizes_are_whole_blocks() {
        assert_eq!(QuantFormat::Q4_1.row_bytes(576).unwrap(), 360);
        assert_eq!(QuantFormat::Q8_0.row_weights(612).unwrap(), 576);
        assert!(QuantFormat::Q4K.row_bytes(576).is_err());
        assert!(QuantFormat::Q6K.row_weights(211).is_err());
        assert!(QuantFormat::Q4_0.row_bytes(0).is_err());
        // Found by the gguf fuzz target: the byte count overflowed (and wrapped in release).
        assert!(QuantFormat::Q8_0.row_bytes(usize::MAX / 32 * 32).is_err());
    }

    #[test]
    fn q8_0_is_scale_times_byte() {
        let mut b = vec![0u8; 34];
        b[..2].copy_from_slice(&f16::from_f32(0.5).to_le_bytes());
        b[2] = 0xFF; // -1
        b[3] = 4;
        let mut y = [0f32; 32];
        QuantFormat::Q8_0.dequantize(&b, &mut y).unwrap();
        assert_eq!(&y[..3], &[-0.5, 2.0, 0.0]);
        assert!(QuantFormat::Q8_0.dequantize(&b[..33], &mut y).is_err());
    }

    #[test]
    fn names_round_trip() {
        for q in QuantFormat::ALL {
            assert_eq!(q.name().parse::<QuantFormat>(), Ok(q));
        }
    }
}
