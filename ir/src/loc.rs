//! Source locations: the model line that created a node.
//!
//! The frontend records `file:line:col` of the tensor call that traced each node
//! (`#[track_caller]` through the tensor API and the layers, so a layer's nodes name the line
//! that called the layer). Passes carry locations over: a node that replaces others (a fused
//! LayerNorm, a folded constant, a merged duplicate) holds the sorted set of theirs, so every
//! kernel can say which lines of the model it computes.

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;

/// `file:line:col` of a model's source.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SourceLoc {
    /// The file as the compiler named it (`Location::file`).
    pub file: String,
    /// Line, from 1.
    pub line: u32,
    /// Column, from 1.
    pub col: u32,
}

impl SourceLoc {
    /// A location.
    pub fn new(file: impl Into<String>, line: u32, col: u32) -> SourceLoc {
        SourceLoc { file: file.into(), line, col }
    }

    /// The location of a `#[track_caller]` function's caller.
    pub fn from_caller(caller: &std::panic::Location<'_>) -> SourceLoc {
        SourceLoc::new(caller.file(), caller.line(), caller.column())
    }

    /// Parse `file:line:col` (the file may itself hold colons: the last two fields are the
    /// numbers). None when it is not of that form.
    pub fn parse(s: &str) -> Option<SourceLoc> {
        let (rest, col) = s.rsplit_once(':')?;
        let (file, line) = rest.rsplit_once(':')?;
        if file.is_empty() {
            return None;
        }
        Some(SourceLoc::new(file, line.parse().ok()?, col.parse().ok()?))
    }
}

impl fmt::Display for SourceLoc {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}:{}", self.file, self.line, self.col)
    }
}

/// Serialized as the string `file:line:col`, the form editors and terminals link.
impl Serialize for SourceLoc {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for SourceLoc {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<SourceLoc, D::Error> {
        let s = String::deserialize(d)?;
        SourceLoc::parse(&s).ok_or_else(|| serde::de::Error::custom(format!("{s:?} is not file:line:col")))
    }
}

/// The lines a set of locations names as one short string, each file once with its lines
/// and runs of lines as ranges (`model.rs:6-12, 15`), at most `max` ranges and how many more;
/// "" for none. What a kernel's comment and a profile line show.
pub fn loc_summary(locs: &[SourceLoc], max: usize) -> String {
    // (file, first line, last line) runs, in order.
    let mut runs: Vec<(&str, u32, u32)> = Vec::new();
    for l in locs {
        match runs.last_mut() {
            Some((file, _, last)) if *file == l.file && (l.line == *last || last.checked_add(1) == Some(l.line)) => {
                *last = l.line
            }
            _ => runs.push((&l.file, l.line, l.line)),
        }
    }
    let mut out = String::new();
    let mut file_shown: Option<&str> = None;
    for (i, &(file, first, last)) in runs.iter().take(max).enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        if file_shown != Some(file) {
            out.push_str(file);
            out.push(':');
            file_shown = Some(file);
        }
        if first == last {
            out.push_str(&first.to_string());
        } else {
            out.push_str(&format!("{first}-{last}"));
        }
    }
    if runs.len() > max {
        out.push_str(&format!(" (+{} more)", runs.len() - max));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_what_it_prints_with_colons_in_the_file() {
        for l in [SourceLoc::new("model.rs", 9, 15), SourceLoc::new("C:\\m\\model.rs", 1, 1)] {
            assert_eq!(SourceLoc::parse(&l.to_string()), Some(l));
        }
        assert_eq!(SourceLoc::parse("model.rs:9"), None);
        assert_eq!(SourceLoc::parse(":9:1"), None);
        assert_eq!(SourceLoc::parse("m.rs:x:1"), None);
    }

    #[test]
    fn summaries_name_each_file_once_with_runs_of_lines() {
        let locs = [SourceLoc::new("a.rs", 7, 3), SourceLoc::new("a.rs", 7, 9), SourceLoc::new("b.rs", 2, 1)];
        assert_eq!(loc_summary(&locs, 1), "a.rs:7 (+1 more)");
        assert_eq!(loc_summary(&locs, 2), "a.rs:7, b.rs:2");
        assert_eq!(loc_summary(&[], 3), "");
        let run: Vec<SourceLoc> = [6, 7, 7, 8, 12, 14, 15].iter().map(|&l| SourceLoc::new("m.rs", l, 1)).collect();
        assert_eq!(loc_summary(&run, 9), "m.rs:6-8, 12, 14-15");
        assert_eq!(loc_summary(&run, 2), "m.rs:6-8, 12 (+1 more)");
        let far = [SourceLoc::new("m.rs", u32::MAX, 1), SourceLoc::new("m.rs", u32::MAX, 2)];
        assert_eq!(loc_summary(&far, 9), format!("m.rs:{}", u32::MAX));
    }
}
