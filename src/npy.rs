//! Reading numpy `.npy` files as a tensor's values, for `rustral-compile --input` and the
//! fuzz target `npy`. The header is read and checked against the file's length before any
//! data, so that a 144-byte file whose header claims 2^40 elements is an error, never an
//! allocation; the data is then read by `ndarray-npy` (byte order and Fortran order handled).

use ndarray::ArrayD;
use ndarray_npy::ReadNpyExt;
use rustral_ir::DType;
use std::io::{Read, Seek, SeekFrom};

/// What a .npy header says: the element type, the shape and the bytes per element.
#[derive(Clone, Debug, PartialEq)]
pub struct NpyHeader {
    /// numpy's type string (`<f4`, `>i8`).
    pub descr: String,
    /// The shape.
    pub shape: Vec<u64>,
    /// Bytes per element.
    pub item: u64,
}

/// The most header bytes read: numpy's own headers are far below this (format 2.0 exists for
/// headers past 64 KiB).
const MAX_HEADER: u64 = 1 << 24;

/// The header of a .npy file, checked against its length (the stream's, from its start).
pub fn header<R: Read + Seek>(f: &mut R) -> Result<NpyHeader, String> {
    let len = f.seek(SeekFrom::End(0)).map_err(|e| e.to_string())?;
    f.seek(SeekFrom::Start(0)).map_err(|e| e.to_string())?;
    let mut head = [0u8; 12];
    let got = f.by_ref().take(12).read(&mut head).map_err(|e| e.to_string())?;
    if got < 10 || &head[..6] != b"\x93NUMPY" {
        return Err("not a .npy file (no \\x93NUMPY magic)".into());
    }
    let (size_bytes, header_len) = match head[6] {
        1 => (2, u16::from_le_bytes([head[8], head[9]]) as u64),
        2 | 3 if got == 12 => (4, u32::from_le_bytes([head[8], head[9], head[10], head[11]]) as u64),
        v => return Err(format!(".npy format version {v} is not one of 1, 2, 3")),
    };
    let data_at = 8 + size_bytes + header_len;
    if data_at > len {
        return Err(format!("truncated: the header claims {header_len} bytes, the file holds {len}"));
    }
    if header_len > MAX_HEADER {
        return Err(format!("a header of {header_len} bytes, more than a .npy header needs (16 MiB)"));
    }
    let mut text = vec![0u8; header_len as usize];
    f.seek(SeekFrom::Start(8 + size_bytes)).map_err(|e| e.to_string())?;
    f.read_exact(&mut text).map_err(|e| e.to_string())?;
    let text = String::from_utf8_lossy(&text);
    let header = parse_dict(&text).ok_or_else(|| format!("a .npy header that cannot be read: {}", text.trim()))?;
    let data = header.shape.iter().try_fold(header.item, |n, &d| n.checked_mul(d));
    match data {
        Some(n) if n == len - data_at => Ok(header),
        Some(n) if n > len - data_at => Err(format!(
            "truncated: the header says {} {:?} ({n} bytes of data), the file holds {}",
            header.descr,
            header.shape,
            len - data_at
        )),
        Some(n) => Err(format!(
            "{} bytes of data where the header's {} {:?} holds {n}",
            len - data_at,
            header.descr,
            header.shape
        )),
        None => Err(format!("the header's shape {:?} has more than 2^64 bytes", header.shape)),
    }
}

/// `{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }` as numpy writes it.
fn parse_dict(text: &str) -> Option<NpyHeader> {
    let after =
        |key: &str| text.find(key).map(|i| text[i + key.len()..].trim_start().trim_start_matches(':').trim_start());
    let descr = after("'descr'")?;
    let quote = descr.chars().next().filter(|q| *q == '\'' || *q == '"')?;
    let descr = descr[1..].split(quote).next()?.to_string();
    // Fortran order is read as it is (ndarray-npy lays it out; values come out row-major).
    after("'fortran_order'")?;
    let shape = after("'shape'")?.strip_prefix('(')?;
    let shape: Vec<u64> = shape[..shape.find(')')?]
        .split(',')
        .map(str::trim)
        .filter(|d| !d.is_empty())
        .map(|d| d.parse().ok())
        .collect::<Option<_>>()?;
    let item = descr.trim_start_matches(|c: char| !c.is_ascii_digit()).parse().ok().filter(|&n| n > 0)?;
    Some(NpyHeader { descr, shape, item })
}

/// The values of a .npy file whose `header` was read (and its size checked against memory
/// by the caller), as the shape and row-major f64 values of a `dtype` tensor: floats from
/// `f4`/`f8`, integers from `i4`/`i8` (those beyond 2^53, which f64 would round, refused).
pub fn values<R: Read + Seek>(mut f: R, header: &NpyHeader, dtype: DType) -> Result<(Vec<usize>, Vec<f64>), String> {
    let float = matches!(dtype, DType::F32 | DType::F16 | DType::BF16 | DType::F64);
    // Byte order aside (ndarray-npy swaps big-endian data), the kind and width.
    let kind = header.descr.trim_start_matches(['<', '>', '|', '=']);
    let fits = if float { kind == "f4" || kind == "f8" } else { kind == "i4" || kind == "i8" };
    if !fits {
        let wanted = if float { "float32 or float64" } else { "int32 or int64" };
        return Err(format!("holds {} values; the input is {dtype}: give {wanted}", header.descr));
    }
    f.seek(SeekFrom::Start(0)).map_err(|e| e.to_string())?;
    let values: ArrayD<f64> = match kind {
        "f4" => ArrayD::<f32>::read_npy(f).map_err(|e| e.to_string())?.mapv(f64::from),
        "f8" => ArrayD::<f64>::read_npy(f).map_err(|e| e.to_string())?,
        "i4" => ArrayD::<i32>::read_npy(f).map_err(|e| e.to_string())?.mapv(f64::from),
        _ => {
            let ints = ArrayD::<i64>::read_npy(f).map_err(|e| e.to_string())?;
            // Values are held as f64: beyond 2^53 an id would be rounded to another one.
            if let Some(v) = ints.iter().find(|v| v.unsigned_abs() > 1 << 53) {
                return Err(format!("holds {v}, beyond 2^53, the largest integer held exactly"));
            }
            ints.mapv(|v| v as f64)
        }
    };
    let shape = values.shape().to_vec();
    Ok((shape, values.into_iter().collect()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_are_read_as_numpy_writes_them() {
        let h = parse_dict("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }").unwrap();
        assert_eq!(h, NpyHeader { descr: "<f4".into(), shape: vec![2, 3], item: 4 });
        assert_eq!(parse_dict("{'descr': '<i8', 'fortran_order': False, 'shape': (5,), }").unwrap().shape, [5]);
        assert_eq!(parse_dict("{'descr': '<f8', 'fortran_order': False, 'shape': (), }").unwrap().shape, [0u64; 0]);
        assert_eq!(parse_dict("{'descr': '>f4', 'fortran_order': True, 'shape': (2, 3), }").unwrap().shape, [2, 3]);
        assert!(parse_dict("{'descr': '<f4', 'fortran_order': False, 'shape': (2, -3), }").is_none());
    }
}
