//! GGUF files (llama.cpp's checkpoint format): metadata, tensor directory, and tensor data in
//! f32, f16, bf16 or GGML's block formats (`rustral_ir::QuantFormat`).
//!
//! The reader is written for files from anywhere: every count and length is checked against
//! the bytes that remain before anything is allocated for it, nesting is bounded, tensor
//! extents must lie inside the file and be aligned, and each failure names the byte offset
//! and what was being read. Nothing here panics on a hostile or truncated file.

use rustral_ir::QuantFormat;
use std::collections::BTreeMap;
use std::path::Path;

/// GGUF's magic number, "GGUF" read little-endian.
const MAGIC: u32 = 0x4655_4747;
/// Arrays of arrays deeper than this are refused (real files nest at most once).
const MAX_DEPTH: usize = 4;
/// Tensors of more dims than this are refused (GGML has at most 4).
const MAX_DIMS: usize = 8;

/// What went wrong reading a GGUF file, and where.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{file}: {}", match .offset { Some(o) => format!("at byte {o}: {}", .message), None => .message.clone() })]
pub struct GgufError {
    /// The file (or `<bytes>`).
    pub file: String,
    /// The byte offset being read, when the error is about the bytes.
    pub offset: Option<usize>,
    /// What was wrong.
    pub message: String,
}

/// A metadata value.
#[derive(Debug, Clone, PartialEq)]
pub enum GgufValue {
    /// `uint8`.
    U8(u8),
    /// `int8`.
    I8(i8),
    /// `uint16`.
    U16(u16),
    /// `int16`.
    I16(i16),
    /// `uint32`.
    U32(u32),
    /// `int32`.
    I32(i32),
    /// `float32`.
    F32(f32),
    /// `bool`.
    Bool(bool),
    /// UTF-8 `string`.
    String(String),
    /// `array` of one item type.
    Array(Vec<GgufValue>),
    /// `uint64`.
    U64(u64),
    /// `int64`.
    I64(i64),
    /// `float64`.
    F64(f64),
}

impl GgufValue {
    /// The value as a non-negative integer, whatever its integer type.
    pub fn as_u64(&self) -> Option<u64> {
        match *self {
            GgufValue::U8(v) => Some(v.into()),
            GgufValue::U16(v) => Some(v.into()),
            GgufValue::U32(v) => Some(v.into()),
            GgufValue::U64(v) => Some(v),
            GgufValue::I8(v) => u64::try_from(v).ok(),
            GgufValue::I16(v) => u64::try_from(v).ok(),
            GgufValue::I32(v) => u64::try_from(v).ok(),
            GgufValue::I64(v) => u64::try_from(v).ok(),
            _ => None,
        }
    }

    /// The value as a float, whatever its numeric type.
    pub fn as_f64(&self) -> Option<f64> {
        match *self {
            GgufValue::F32(v) => Some(v.into()),
            GgufValue::F64(v) => Some(v),
            _ => self.as_u64().map(|v| v as f64),
        }
    }

    /// The string, if this is one.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            GgufValue::String(s) => Some(s),
            _ => None,
        }
    }
}

/// How a tensor's elements are stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GgmlType {
    /// f32.
    F32,
    /// IEEE half.
    F16,
    /// bfloat16.
    BF16,
    /// A block format.
    Quant(QuantFormat),
}

impl GgmlType {
    /// From GGML's type id; None for a type Rustral does not read.
    pub fn from_id(id: u32) -> Option<GgmlType> {
        Some(match id {
            0 => GgmlType::F32,
            1 => GgmlType::F16,
            2 => GgmlType::Quant(QuantFormat::Q4_0),
            3 => GgmlType::Quant(QuantFormat::Q4_1),
            8 => GgmlType::Quant(QuantFormat::Q8_0),
            12 => GgmlType::Quant(QuantFormat::Q4K),
            13 => GgmlType::Quant(QuantFormat::Q5K),
            14 => GgmlType::Quant(QuantFormat::Q6K),
            30 => GgmlType::BF16,
            _ => return None,
        })
    }

    /// GGML's name for it.
    pub fn name(self) -> &'static str {
        match self {
            GgmlType::F32 => "F32",
            GgmlType::F16 => "F16",
            GgmlType::BF16 => "BF16",
            GgmlType::Quant(QuantFormat::Q8_0) => "Q8_0",
            GgmlType::Quant(QuantFormat::Q4_0) => "Q4_0",
            GgmlType::Quant(QuantFormat::Q4_1) => "Q4_1",
            GgmlType::Quant(QuantFormat::Q4K) => "Q4_K",
            GgmlType::Quant(QuantFormat::Q5K) => "Q5_K",
            GgmlType::Quant(QuantFormat::Q6K) => "Q6_K",
        }
    }

    /// Bytes of a row of `k` elements.
    fn row_bytes(self, k: usize) -> Option<usize> {
        match self {
            GgmlType::F32 => k.checked_mul(4),
            GgmlType::F16 | GgmlType::BF16 => k.checked_mul(2),
            GgmlType::Quant(q) => q.row_bytes(k).ok(),
        }
    }
}

/// One entry of the tensor directory.
#[derive(Debug, Clone, PartialEq)]
pub struct GgufTensor {
    /// Its name (`blk.0.attn_q.weight`).
    pub name: String,
    /// Its shape, row-major (GGUF lists dims innermost first; this is the reverse).
    pub shape: Vec<usize>,
    /// Element storage.
    pub ggml_type: GgmlType,
    /// Byte range in the file.
    range: std::ops::Range<usize>,
}

impl GgufTensor {
    /// Elements.
    pub fn elements(&self) -> usize {
        self.shape.iter().product()
    }

    /// Rows (every dim but the last) and the width of a row.
    pub fn rows_and_width(&self) -> (usize, usize) {
        match self.shape.split_last() {
            Some((w, rest)) => (rest.iter().product(), *w),
            None => (1, 1),
        }
    }
}

/// A GGUF file in memory.
#[derive(Debug, Clone)]
pub struct Gguf {
    /// The format version (2 or 3).
    pub version: u32,
    /// Metadata by key.
    pub metadata: BTreeMap<String, GgufValue>,
    /// The tensor directory, in file order.
    pub tensors: Vec<GgufTensor>,
    file: String,
    bytes: Vec<u8>,
}

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
    file: &'a str,
}

impl<'a> Reader<'a> {
    fn error(&self, message: impl Into<String>) -> GgufError {
        GgufError { file: self.file.to_string(), offset: Some(self.at), message: message.into() }
    }

    fn remaining(&self) -> usize {
        self.bytes.len() - self.at
    }

    fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8], GgufError> {
        if n > self.remaining() {
            return Err(self.error(format!("truncated: {what} needs {n} bytes, {} remain", self.remaining())));
        }
        let s = &self.bytes[self.at..self.at + n];
        self.at += n;
        Ok(s)
    }

    fn array<const N: usize>(&mut self, what: &str) -> Result<[u8; N], GgufError> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(N, what)?);
        Ok(out)
    }

    fn u32(&mut self, what: &str) -> Result<u32, GgufError> {
        Ok(u32::from_le_bytes(self.array(what)?))
    }

    fn u64(&mut self, what: &str) -> Result<u64, GgufError> {
        Ok(u64::from_le_bytes(self.array(what)?))
    }

    /// A count of items each at least `min_size` bytes: refused when they cannot fit in what
    /// remains, so a hostile count never becomes a huge allocation.
    fn count(&mut self, what: &str, min_size: usize) -> Result<usize, GgufError> {
        let start = self.at;
        let n = self.u64(what)?;
        let fits = usize::try_from(n).ok().filter(|&n| n.saturating_mul(min_size.max(1)) <= self.remaining());
        fits.ok_or_else(|| GgufError {
            file: self.file.to_string(),
            offset: Some(start),
            message: format!("{what} {n} cannot fit in the {} bytes that remain", self.remaining()),
        })
    }

    fn string(&mut self, what: &str) -> Result<String, GgufError> {
        let n = self.count(what, 1)?;
        let start = self.at;
        let b = self.take(n, what)?;
        String::from_utf8(b.to_vec()).map_err(|_| GgufError {
            file: self.file.to_string(),
            offset: Some(start),
            message: format!("{what} is not UTF-8"),
        })
    }

    fn value(&mut self, ty: u32, depth: usize) -> Result<GgufValue, GgufError> {
        Ok(match ty {
            0 => GgufValue::U8(self.array::<1>("u8")?[0]),
            1 => GgufValue::I8(self.array::<1>("i8")?[0] as i8),
            2 => GgufValue::U16(u16::from_le_bytes(self.array("u16")?)),
            3 => GgufValue::I16(i16::from_le_bytes(self.array("i16")?)),
            4 => GgufValue::U32(self.u32("u32")?),
            5 => GgufValue::I32(i32::from_le_bytes(self.array("i32")?)),
            6 => GgufValue::F32(f32::from_le_bytes(self.array("f32")?)),
            7 => match self.array::<1>("bool")?[0] {
                0 => GgufValue::Bool(false),
                1 => GgufValue::Bool(true),
                b => return Err(self.error(format!("bool must be 0 or 1, found {b}"))),
            },
            8 => GgufValue::String(self.string("string length")?),
            9 => {
                if depth >= MAX_DEPTH {
                    return Err(self.error(format!("arrays nested deeper than {MAX_DEPTH}")));
                }
                let item = self.u32("array item type")?;
                let n = self.count("array length", min_value_size(item))?;
                let mut items = Vec::with_capacity(n);
                for _ in 0..n {
                    items.push(self.value(item, depth + 1)?);
                }
                GgufValue::Array(items)
            }
            10 => GgufValue::U64(self.u64("u64")?),
            11 => GgufValue::I64(i64::from_le_bytes(self.array("i64")?)),
            12 => GgufValue::F64(f64::from_le_bytes(self.array("f64")?)),
            other => return Err(self.error(format!("unknown metadata value type {other}"))),
        })
    }
}

/// The fewest bytes a value of type `ty` takes (a string: its length; an array: its header).
fn min_value_size(ty: u32) -> usize {
    match ty {
        0 | 1 | 7 => 1,
        2 | 3 => 2,
        4..=6 => 4,
        8 | 10..=12 => 8,
        9 => 12,
        _ => 1,
    }
}

impl Gguf {
    /// Read and check a file.
    pub fn read(path: &Path) -> Result<Gguf, GgufError> {
        let file = path.display().to_string();
        let bytes = std::fs::read(path).map_err(|e| GgufError {
            file: file.clone(),
            offset: None,
            message: format!("cannot read: {e}"),
        })?;
        Gguf::parse(bytes, &file)
    }

    /// Check and index a file's bytes (`file` names it in errors).
    pub fn parse(bytes: Vec<u8>, file: &str) -> Result<Gguf, GgufError> {
        let mut r = Reader { bytes: &bytes, at: 0, file };
        if r.u32("magic")? != MAGIC {
            r.at = 0;
            return Err(r.error("not a GGUF file (the magic number is not \"GGUF\")"));
        }
        let version = r.u32("version")?;
        if !(2..=3).contains(&version) {
            return Err(r.error(format!("GGUF version {version} is not supported (2 and 3 are)")));
        }
        // A tensor entry takes at least 8 + 4 + 4 + 8 bytes; a metadata entry 8 + 4 + 1.
        let tensor_count = r.count("tensor count", 24)?;
        let kv_count = r.count("metadata count", 13)?;
        let mut metadata = BTreeMap::new();
        for _ in 0..kv_count {
            let key = r.string("metadata key length")?;
            let ty = r.u32("metadata value type")?;
            let value = r.value(ty, 0)?;
            if metadata.insert(key.clone(), value).is_some() {
                return Err(r.error(format!("metadata key {key:?} appears twice")));
            }
        }
        let alignment = match metadata.get("general.alignment") {
            None => 32,
            Some(v) => match v.as_u64() {
                Some(a) if a > 0 && a.is_power_of_two() && a <= 1 << 20 => a as usize,
                _ => return Err(r.error(format!("general.alignment must be a power of two, found {v:?}"))),
            },
        };
        let mut entries = Vec::with_capacity(tensor_count);
        for _ in 0..tensor_count {
            let name = r.string("tensor name length")?;
            let n_dims = r.u32("tensor dims")? as usize;
            if n_dims > MAX_DIMS {
                return Err(r.error(format!("tensor {name:?} has {n_dims} dims (at most {MAX_DIMS})")));
            }
            let mut shape = Vec::with_capacity(n_dims);
            for _ in 0..n_dims {
                let d = r.u64("tensor dim")?;
                shape.push(usize::try_from(d).map_err(|_| r.error(format!("tensor {name:?}: dim {d} too large")))?);
            }
            shape.reverse();
            let id = r.u32("tensor type")?;
            let ggml_type = GgmlType::from_id(id).ok_or_else(|| {
                r.error(format!("tensor {name:?} has GGML type {id}, which Rustral does not read (it reads F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q4_K, Q5_K, Q6_K)"))
            })?;
            let offset = r.u64("tensor offset")?;
            entries.push((name, shape, ggml_type, offset, r.at));
        }
        let data_start = r.at.div_ceil(alignment) * alignment;
        let mut tensors = Vec::with_capacity(entries.len());
        let mut seen = std::collections::BTreeSet::new();
        for (name, shape, ggml_type, offset, at) in entries {
            let fail = |message: String| GgufError { file: file.to_string(), offset: Some(at), message };
            if !seen.insert(name.clone()) {
                return Err(fail(format!("tensor {name:?} appears twice")));
            }
            let elements = shape.iter().try_fold(1usize, |a, &d| a.checked_mul(d));
            let width = shape.last().copied().unwrap_or(1);
            let len = elements.and_then(|e| {
                let rows = e.checked_div(width).unwrap_or(0);
                ggml_type.row_bytes(width).and_then(|b| b.checked_mul(rows))
            });
            let Some(len) = len else {
                return Err(fail(format!(
                    "tensor {name:?} of shape {shape:?} is not whole {} rows (or is too large)",
                    ggml_type.name()
                )));
            };
            let start = usize::try_from(offset).ok().and_then(|o| o.checked_add(data_start));
            let range = match start {
                Some(s)
                    if offset.is_multiple_of(alignment as u64)
                        && s.checked_add(len).is_some_and(|e| e <= bytes.len()) =>
                {
                    s..s + len
                }
                _ => {
                    return Err(fail(format!(
                        "tensor {name:?} ({len} bytes at data offset {offset}) is misaligned or past the end of the {}-byte file",
                        bytes.len()
                    )));
                }
            };
            tensors.push(GgufTensor { name, shape, ggml_type, range });
        }
        Ok(Gguf { version, metadata, tensors, file: file.to_string(), bytes })
    }

    /// The file this was read from.
    pub fn file(&self) -> &str {
        &self.file
    }

    fn error(&self, message: String) -> GgufError {
        GgufError { file: self.file.clone(), offset: None, message }
    }

    /// A tensor by name.
    pub fn tensor(&self, name: &str) -> Result<&GgufTensor, GgufError> {
        self.tensors.iter().find(|t| t.name == name).ok_or_else(|| self.error(format!("no tensor {name:?}")))
    }

    /// A tensor's bytes, as stored.
    pub fn data(&self, t: &GgufTensor) -> &[u8] {
        &self.bytes[t.range.clone()]
    }

    /// A tensor's values as f32 (dequantized when it is in a block format).
    pub fn to_f32(&self, t: &GgufTensor) -> Result<Vec<f32>, GgufError> {
        let data = self.data(t);
        Ok(match t.ggml_type {
            GgmlType::F32 => data.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect(),
            GgmlType::F16 => data.chunks_exact(2).map(|c| rustral_ir::f16_at(c, 0)).collect(),
            GgmlType::BF16 => data
                .chunks_exact(2)
                .map(|c| f32::from_bits(u32::from(u16::from_le_bytes([c[0], c[1]])) << 16))
                .collect(),
            GgmlType::Quant(q) => {
                let mut out = vec![0.0f32; t.elements()];
                q.dequantize(data, &mut out).map_err(|e| self.error(format!("tensor {:?}: {e}", t.name)))?;
                out
            }
        })
    }

    /// A metadata value by key.
    pub fn get(&self, key: &str) -> Option<&GgufValue> {
        self.metadata.get(key)
    }

    /// A required non-negative integer.
    pub fn usize(&self, key: &str) -> Result<usize, GgufError> {
        self.get(key)
            .and_then(GgufValue::as_u64)
            .and_then(|v| usize::try_from(v).ok())
            .ok_or_else(|| self.error(format!("metadata {key:?} is missing or not a non-negative integer")))
    }

    /// A required number.
    pub fn f64(&self, key: &str) -> Result<f64, GgufError> {
        self.get(key)
            .and_then(GgufValue::as_f64)
            .ok_or_else(|| self.error(format!("metadata {key:?} is missing or not a number")))
    }

    /// A required string.
    pub fn str(&self, key: &str) -> Result<&str, GgufError> {
        self.get(key)
            .and_then(GgufValue::as_str)
            .ok_or_else(|| self.error(format!("metadata {key:?} is missing or not a string")))
    }

    /// A required array of strings.
    pub fn strings(&self, key: &str) -> Result<Vec<&str>, GgufError> {
        let bad = || self.error(format!("metadata {key:?} is missing or not an array of strings"));
        match self.get(key) {
            Some(GgufValue::Array(items)) => items.iter().map(|v| v.as_str().ok_or_else(bad)).collect(),
            _ => Err(bad()),
        }
    }
}

/// Build GGUF bytes (version 3, alignment 32): for tests and fixtures written from Rust.
pub fn write_gguf(metadata: &[(&str, GgufValue)], tensors: &[(&str, &[usize], u32, &[u8])]) -> Vec<u8> {
    fn string(out: &mut Vec<u8>, s: &str) {
        out.extend((s.len() as u64).to_le_bytes());
        out.extend(s.as_bytes());
    }
    fn value(out: &mut Vec<u8>, v: &GgufValue, with_type: bool) {
        let (ty, body): (u32, Vec<u8>) = match v {
            GgufValue::U8(x) => (0, vec![*x]),
            GgufValue::I8(x) => (1, vec![*x as u8]),
            GgufValue::U16(x) => (2, x.to_le_bytes().to_vec()),
            GgufValue::I16(x) => (3, x.to_le_bytes().to_vec()),
            GgufValue::U32(x) => (4, x.to_le_bytes().to_vec()),
            GgufValue::I32(x) => (5, x.to_le_bytes().to_vec()),
            GgufValue::F32(x) => (6, x.to_le_bytes().to_vec()),
            GgufValue::Bool(x) => (7, vec![u8::from(*x)]),
            GgufValue::String(s) => {
                let mut b = Vec::new();
                string(&mut b, s);
                (8, b)
            }
            GgufValue::Array(items) => {
                let mut b = Vec::new();
                let item_ty = items.first().map_or(4, |i| {
                    let mut t = Vec::new();
                    value(&mut t, i, true);
                    u32::from_le_bytes([t[0], t[1], t[2], t[3]])
                });
                b.extend(item_ty.to_le_bytes());
                b.extend((items.len() as u64).to_le_bytes());
                for i in items {
                    value(&mut b, i, false);
                }
                (9, b)
            }
            GgufValue::U64(x) => (10, x.to_le_bytes().to_vec()),
            GgufValue::I64(x) => (11, x.to_le_bytes().to_vec()),
            GgufValue::F64(x) => (12, x.to_le_bytes().to_vec()),
        };
        if with_type {
            out.extend(ty.to_le_bytes());
        }
        out.extend(body);
    }
    let mut out = Vec::new();
    out.extend(MAGIC.to_le_bytes());
    out.extend(3u32.to_le_bytes());
    out.extend((tensors.len() as u64).to_le_bytes());
    out.extend((metadata.len() as u64).to_le_bytes());
    for (k, v) in metadata {
        string(&mut out, k);
        value(&mut out, v, true);
    }
    let mut offset = 0u64;
    for (name, shape, ty, data) in tensors {
        string(&mut out, name);
        out.extend((shape.len() as u32).to_le_bytes());
        for d in shape.iter().rev() {
            out.extend((*d as u64).to_le_bytes());
        }
        out.extend(ty.to_le_bytes());
        out.extend(offset.to_le_bytes());
        offset += (data.len() as u64).div_ceil(32) * 32;
    }
    out.resize(out.len().div_ceil(32) * 32, 0);
    for (_, _, _, data) in tensors {
        out.extend(*data);
        out.resize(out.len().div_ceil(32) * 32, 0);
    }
    out
}
