//! Memory bounds: what a run will hold (parameters, inputs, the memory plan's peak), counted
//! before anything is allocated and compared with `--max-memory` or the machine's available
//! memory, so that a shape or a config too large for the machine is one clear error instead
//! of an abort or a machine that swaps.

use crate::fail::Fail;
use rustral::ir::{DType, Shape};
use std::collections::BTreeMap;

/// The bytes a run may use, and where that figure came from.
pub struct Budget {
    bytes: u64,
    source: String,
}

impl Budget {
    /// `--max-memory`, else MemAvailable from /proc/meminfo; None where neither is known.
    pub fn new(max_memory: Option<u64>) -> Option<Budget> {
        if let Some(bytes) = max_memory {
            return Some(Budget { bytes, source: "--max-memory".into() });
        }
        let info = std::fs::read_to_string("/proc/meminfo").ok()?;
        let kib: u64 = info
            .lines()
            .find_map(|l| l.strip_prefix("MemAvailable:"))?
            .trim()
            .strip_suffix("kB")?
            .trim()
            .parse()
            .ok()?;
        Some(Budget { bytes: kib.saturating_mul(1024), source: "this machine's available memory".into() })
    }

    /// The bytes.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// An error when `need` bytes (None: more than can be counted) are beyond the budget.
    pub fn check(budget: Option<&Budget>, what: &str, need: Option<u64>) -> Result<(), Fail> {
        match (need, budget) {
            (None, _) => Err(Fail::user(format!("{what} would need more than 2^64 bytes"))),
            (Some(n), Some(b)) if n > b.bytes => Err(Fail::user(format!(
                "{what} would need {}, beyond {} ({}); give --max-memory SIZE to allow more",
                human(n),
                b.source,
                human(b.bytes)
            ))),
            _ => Ok(()),
        }
    }
}

/// Bytes of a tensor of `shape` under `binding` held as `per_element` bytes each; None when it
/// cannot be counted in 64 bits.
pub fn tensor_bytes(shape: &Shape, binding: &BTreeMap<String, usize>, per_element: u64) -> Option<u64> {
    shape.dims().iter().try_fold(per_element, |n, d| {
        let size = match d {
            rustral::ir::Dim::Static(s) => *s,
            rustral::ir::Dim::Sym(s) => binding.get(s).copied().unwrap_or(1),
        };
        n.checked_mul(size as u64)
    })
}

/// Bytes a host value of `dtype` takes here: f64 on the host, plus the target's copy.
pub fn held(dtype: DType) -> u64 {
    8 + dtype.size_bytes() as u64
}

/// `n` bytes as people read them.
pub fn human(n: u64) -> String {
    const UNITS: [&str; 5] = ["bytes", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut unit = 0;
    while v >= 1024.0 && unit < UNITS.len() - 1 {
        v /= 1024.0;
        unit += 1;
    }
    if unit == 0 { format!("{n} bytes") } else { format!("{v:.1} {}", UNITS[unit]) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_need_beyond_the_budget_is_an_error_naming_both() {
        let b = Budget { bytes: 1 << 30, source: "--max-memory".into() };
        assert!(Budget::check(Some(&b), "parameters", Some(1 << 30)).is_ok());
        let e = Budget::check(Some(&b), "parameters", Some(3 << 30)).unwrap_err().to_string();
        assert!(e.contains("parameters would need 3.0 GiB, beyond --max-memory (1.0 GiB)"), "{e}");
        let e = Budget::check(None, "inputs", None).unwrap_err().to_string();
        assert!(e.contains("inputs would need more than 2^64 bytes"), "{e}");
        assert!(Budget::check(None, "inputs", Some(u64::MAX)).is_ok(), "no budget known: only overflow fails");
    }

    #[test]
    fn overflowing_shapes_count_as_none() {
        let shape = Shape::from(vec![rustral::ir::Dim::Static(1 << 32), rustral::ir::Dim::sym("b")]);
        let small: BTreeMap<String, usize> = [("b".to_string(), 3)].into();
        assert_eq!(tensor_bytes(&shape, &small, 4), Some((3 * 4) << 32));
        let huge: BTreeMap<String, usize> = [("b".to_string(), 1 << 40)].into();
        assert_eq!(tensor_bytes(&shape, &huge, 4), None);
    }
}
