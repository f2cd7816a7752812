//! Reading numpy `.npy` files as a tensor's values, for `rustral-compile --input` and the
//! fuzz target `npy`. The header is read and checked against the file's length before any
//! data, so that a 144-byte file whose header claims 2^40 elements is an error, never an
//! allocation; the data is then read by `ndarray-npy` (byte order and Fortran order handled).

use ndarray::ArrayD;
use ndarray_npy::ReadNpyExt;
use ndarray_npy::npy::header::Header;
use py_literal::Value as PyValue;
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

/// The most opening brackets a header may hold: a plain array's holds 2, and a structured
/// dtype's few fields (refused later, with their own message) up to 4.
const MAX_BRACKETS: usize = 4;

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
    // Magic, version, length and dictionary, read once: counted here, parsed below.
    let mut prefix = vec![0u8; data_at as usize];
    f.seek(SeekFrom::Start(0)).map_err(|e| e.to_string())?;
    f.read_exact(&mut prefix).map_err(|e| e.to_string())?;
    let text = &prefix[(8 + size_bytes) as usize..];
    // The parser below (py_literal's grammar) backtracks: its time grows 3-fold with each
    // level of nested braces, and the fuzz target found a 306-byte header that ran for
    // minutes. A plain array's header holds two brackets, `{` and the shape's `(`; counting
    // every bracket, in strings too, bounds the nesting however the header hides it.
    let brackets = text.iter().filter(|b| matches!(b, b'{' | b'[' | b'(')).count();
    if brackets > MAX_BRACKETS {
        return Err(format!(
            "a .npy header with {brackets} opening brackets; a plain float or integer array's has 2 \
             (structured dtypes are not read)"
        ));
    }
    // The dictionary is read by ndarray-npy's own parser, the one that reads the data after
    // it, so that the shape checked here is the shape read there (a header that names a key
    // twice means its last value, to numpy and to ndarray-npy alike).
    let parsed =
        Header::from_reader(&mut prefix.as_slice()).map_err(|e| format!("a .npy header that cannot be read: {e}"))?;
    let descr = match parsed.type_descriptor {
        PyValue::String(descr) => descr,
        other => return Err(format!("a structured dtype {other}: give a plain float or integer array")),
    };
    let item = descr.trim_start_matches(|c: char| !c.is_ascii_digit()).parse().ok().filter(|&n: &u64| n > 0);
    let item = item.ok_or_else(|| format!("a dtype {descr:?} without an element size"))?;
    let header = NpyHeader { descr, shape: parsed.shape.iter().map(|&d| d as u64).collect(), item };
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
    use std::io::Cursor;

    /// A version 1.0 .npy file as numpy lays it out: magic, version, header length, the
    /// dictionary padded with spaces to a 64-byte boundary and ended by a newline, the data.
    fn npy(dict: &str, data: &[u8]) -> Vec<u8> {
        let mut text = dict.to_string();
        while !(10 + text.len() + 1).is_multiple_of(64) {
            text.push(' ');
        }
        text.push('\n');
        let mut file = b"\x93NUMPY\x01\x00".to_vec();
        file.extend((text.len() as u16).to_le_bytes());
        file.extend(text.as_bytes());
        file.extend(data);
        file
    }

    fn f32s(values: &[f32]) -> Vec<u8> {
        values.iter().flat_map(|v| v.to_le_bytes()).collect()
    }

    #[test]
    fn headers_and_values_are_read_as_numpy_writes_them() {
        let file = npy("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", &f32s(&[1., 2., 3., 4., 5., 6.]));
        let h = header(&mut Cursor::new(&file)).unwrap();
        assert_eq!(h, NpyHeader { descr: "<f4".into(), shape: vec![2, 3], item: 4 });
        let read = values(Cursor::new(&file), &h, DType::F32).unwrap();
        assert_eq!(read, (vec![2, 3], vec![1., 2., 3., 4., 5., 6.]));
        // Fortran order: the same bytes are the transpose, and values come out row-major.
        let file = npy("{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3), }", &f32s(&[1., 2., 3., 4., 5., 6.]));
        let h = header(&mut Cursor::new(&file)).unwrap();
        assert_eq!(values(Cursor::new(&file), &h, DType::F32).unwrap().1, [1., 3., 5., 2., 4., 6.]);
        let scalar = npy("{'descr': '<f8', 'fortran_order': False, 'shape': (), }", &2.5f64.to_le_bytes());
        assert_eq!(header(&mut Cursor::new(&scalar)).unwrap().shape, [0u64; 0]);
    }

    /// Found by the fuzz target: a header naming 'shape' twice was read with its first value
    /// here and its last by the data reader. Both now read the last, as numpy does.
    #[test]
    fn a_key_given_twice_means_its_last_value_in_the_header_and_the_data() {
        let file = npy("{'descr': '<f4', 'fortran_order': False, 'shape': (),'shape': (1,), }", &f32s(&[1.5]));
        let h = header(&mut Cursor::new(&file)).unwrap();
        assert_eq!(h.shape, [1]);
        assert_eq!(values(Cursor::new(&file), &h, DType::F32).unwrap(), (vec![1], vec![1.5]));
    }

    #[test]
    fn bad_headers_are_errors_that_say_what_is_wrong() {
        let bad = |dict: &str, data: &[u8]| header(&mut Cursor::new(npy(dict, data))).unwrap_err();
        assert!(bad("{'descr': '<f4', 'fortran_order': False, 'shape': (2, -3), }", &[]).contains("shape"));
        assert!(bad("{'descr': '<f4', 'fortran_order': False, 'shape': (4,), }", &f32s(&[1.])).contains("truncated"));
        assert!(
            bad("{'descr': '<f4', 'fortran_order': False, 'shape': (1,), }", &f32s(&[1., 2.]))
                .contains("8 bytes of data")
        );
        let huge = bad("{'descr': '<f4', 'fortran_order': False, 'shape': (4294967296, 4294967296), }", &[]);
        assert!(huge.contains("2^64"), "{huge}");
        assert!(
            bad("{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (1,), }", &[0; 4]).contains("structured")
        );
        // Nested braces, which the dictionary's parser would take minutes over (fuzz/seeds/npy/
        // regression-nested-brackets.npy is the input the fuzzer found).
        let deep =
            bad(&format!("{{'descr': {}'<f4', 'fortran_order': False, 'shape': (1,), }}", "{".repeat(14)), &[0; 4]);
        assert!(deep.contains("16 opening brackets"), "{deep}");
        assert!(header(&mut Cursor::new(b"\x93NUMPY\x01\x00\xff\xff{".to_vec())).unwrap_err().contains("truncated"));
    }
}
