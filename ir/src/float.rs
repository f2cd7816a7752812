//! `F64`: a float attribute with bitwise equality, so ops (and graphs) are `Eq + Hash`, which
//! CSE and egg need, and a NaN constant still equals itself after a round trip.
//!
//! In JSON, where NaN and infinities are not numbers, non-finite values are the strings
//! `"nan"`, `"inf"` and `"-inf"`; in binary forms they are plain IEEE bits.

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;
use std::hash::{Hash, Hasher};

/// An f64 compared, hashed and ordered by its bits (NaN is canonicalised on parse).
#[derive(Clone, Copy, Debug, Default)]
pub struct F64(pub f64);

impl PartialEq for F64 {
    fn eq(&self, other: &F64) -> bool {
        self.0.to_bits() == other.0.to_bits()
    }
}

impl Eq for F64 {}

impl Hash for F64 {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.0.to_bits().hash(state);
    }
}

impl PartialOrd for F64 {
    fn partial_cmp(&self, other: &F64) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for F64 {
    fn cmp(&self, other: &F64) -> std::cmp::Ordering {
        self.0.total_cmp(&other.0)
    }
}

impl From<f64> for F64 {
    fn from(v: f64) -> F64 {
        F64(v)
    }
}

impl fmt::Display for F64 {
    /// Shortest text that parses back to the same value: `0.125`, `1e-5`, `2.0`, `-inf`, `nan`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let v = self.0;
        if v.is_nan() {
            f.write_str("nan")
        } else if v.is_infinite() {
            f.write_str(if v > 0.0 { "inf" } else { "-inf" })
        } else {
            write!(f, "{v:?}")
        }
    }
}

impl F64 {
    /// Parse the text produced by `Display` (any Rust float literal is accepted too).
    pub fn parse(s: &str) -> Option<F64> {
        match s {
            "nan" => Some(F64(f64::NAN)),
            "inf" => Some(F64(f64::INFINITY)),
            "-inf" => Some(F64(f64::NEG_INFINITY)),
            _ if s.chars().any(|c| c.is_ascii_alphabetic() && c != 'e' && c != 'E') => None,
            _ => s.parse::<f64>().ok().map(F64),
        }
    }
}

impl Serialize for F64 {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        if s.is_human_readable() && !self.0.is_finite() {
            s.serialize_str(&self.to_string())
        } else {
            s.serialize_f64(self.0)
        }
    }
}

impl<'de> Deserialize<'de> for F64 {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<F64, D::Error> {
        if d.is_human_readable() {
            #[derive(Deserialize)]
            #[serde(untagged)]
            enum Repr {
                Num(f64),
                Text(String),
            }
            match Repr::deserialize(d)? {
                Repr::Num(v) => Ok(F64(v)),
                Repr::Text(t) => match t.as_str() {
                    "nan" | "inf" | "-inf" => Ok(F64::parse(&t).unwrap_or_default()),
                    _ => Err(serde::de::Error::custom(format!(
                        "expected a number, \"nan\", \"inf\" or \"-inf\", found \"{t}\""
                    ))),
                },
            }
        } else {
            f64::deserialize(d).map(F64)
        }
    }
}
