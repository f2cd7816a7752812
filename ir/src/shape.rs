//! Dims, shapes and tensor types. A dim is either a number known at compile time or a name
//! (`batch`, `seq`) bound when the program runs, so one compiled graph serves every binding.
//! Shape checks are symbolic: two symbolic dims are equal only when they have the same name.

use crate::dtype::DType;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;

/// One dimension of a shape. In JSON a dim is a number or a symbol's name; in binary forms,
/// which cannot guess a type from the data, it is a tagged enum.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Dim {
    /// A size known at compile time.
    Static(usize),
    /// A size named by a symbol and bound at run time.
    Sym(String),
}

impl Dim {
    /// A static dim.
    pub fn fixed(n: usize) -> Dim {
        Dim::Static(n)
    }

    /// A symbolic dim. Symbol names are identifiers (letters, digits, `_`, not starting with a
    /// digit); the verifier rejects others so that the text form stays parseable.
    pub fn sym(name: impl Into<String>) -> Dim {
        Dim::Sym(name.into())
    }

    /// The static size, if known.
    pub fn as_static(&self) -> Option<usize> {
        match self {
            Dim::Static(n) => Some(*n),
            Dim::Sym(_) => None,
        }
    }

    /// True for a static dim of size 1, the only dim that broadcasts.
    pub fn is_one(&self) -> bool {
        *self == Dim::Static(1)
    }
}

/// The serialized forms of a dim: `Plain` for JSON, `Tagged` for binary.
#[derive(Serialize, Deserialize)]
#[serde(untagged)]
enum PlainDim {
    Static(usize),
    Sym(String),
}

#[derive(Serialize, Deserialize)]
enum TaggedDim {
    Static(usize),
    Sym(String),
}

impl Serialize for Dim {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match (self, s.is_human_readable()) {
            (Dim::Static(n), true) => PlainDim::Static(*n).serialize(s),
            (Dim::Sym(x), true) => PlainDim::Sym(x.clone()).serialize(s),
            (Dim::Static(n), false) => TaggedDim::Static(*n).serialize(s),
            (Dim::Sym(x), false) => TaggedDim::Sym(x.clone()).serialize(s),
        }
    }
}

impl<'de> Deserialize<'de> for Dim {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Dim, D::Error> {
        if d.is_human_readable() {
            Ok(match PlainDim::deserialize(d)? {
                PlainDim::Static(n) => Dim::Static(n),
                PlainDim::Sym(x) => Dim::Sym(x),
            })
        } else {
            Ok(match TaggedDim::deserialize(d)? {
                TaggedDim::Static(n) => Dim::Static(n),
                TaggedDim::Sym(x) => Dim::Sym(x),
            })
        }
    }
}

impl From<usize> for Dim {
    fn from(n: usize) -> Dim {
        Dim::Static(n)
    }
}

impl From<&str> for Dim {
    fn from(s: &str) -> Dim {
        Dim::Sym(s.to_string())
    }
}

impl fmt::Display for Dim {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Dim::Static(n) => write!(f, "{n}"),
            Dim::Sym(s) => f.write_str(s),
        }
    }
}

/// True when `s` is usable as a symbol name (and so prints as a bare identifier).
pub fn is_identifier(s: &str) -> bool {
    let mut chars = s.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// An ordered list of dims; rank 0 is a scalar.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Shape(pub Vec<Dim>);

impl Shape {
    /// The scalar shape `[]`.
    pub fn scalar() -> Shape {
        Shape(Vec::new())
    }

    /// A shape of static dims.
    pub fn of(dims: &[usize]) -> Shape {
        Shape(dims.iter().map(|&d| Dim::Static(d)).collect())
    }

    /// Number of dims.
    pub fn rank(&self) -> usize {
        self.0.len()
    }

    /// The dims.
    pub fn dims(&self) -> &[Dim] {
        &self.0
    }

    /// The element count when every dim is static (None on overflow or a symbolic dim).
    pub fn static_numel(&self) -> Option<usize> {
        self.0.iter().try_fold(1usize, |acc, d| acc.checked_mul(d.as_static()?))
    }

    /// The element count as a product `n * sym1 * sym2 ...`, for symbolic reshape checks.
    pub fn numel(&self) -> Option<SymProduct> {
        let mut p = SymProduct { coeff: 1, syms: BTreeMap::new() };
        for d in &self.0 {
            match d {
                Dim::Static(n) => p.coeff = p.coeff.checked_mul(*n)?,
                Dim::Sym(s) => *p.syms.entry(s.clone()).or_insert(0) += 1,
            }
        }
        Some(p)
    }

    /// Symbol names that occur in this shape, in order of first occurrence.
    pub fn symbols(&self) -> impl Iterator<Item = &str> {
        self.0.iter().filter_map(|d| match d {
            Dim::Sym(s) => Some(s.as_str()),
            Dim::Static(_) => None,
        })
    }

    /// Concrete sizes, each symbol sized by `size_of` (for callers that pick a size for every
    /// symbol: examples, tests, memory reports).
    pub fn resolve(&self, size_of: impl Fn(&str) -> usize) -> Vec<usize> {
        self.0
            .iter()
            .map(|d| match d {
                Dim::Static(n) => *n,
                Dim::Sym(s) => size_of(s),
            })
            .collect()
    }

    /// Replace symbols by the sizes bound to them; unbound symbols stay symbolic.
    pub fn substitute(&self, binding: &BTreeMap<String, usize>) -> Shape {
        Shape(
            self.0
                .iter()
                .map(|d| match d {
                    Dim::Sym(s) => binding.get(s).map_or_else(|| d.clone(), |&n| Dim::Static(n)),
                    Dim::Static(_) => d.clone(),
                })
                .collect(),
        )
    }
}

impl From<Vec<Dim>> for Shape {
    fn from(v: Vec<Dim>) -> Shape {
        Shape(v)
    }
}

impl fmt::Display for Shape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[")?;
        for (i, d) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{d}")?;
        }
        f.write_str("]")
    }
}

/// A symbolic element count: `coeff * prod(sym ^ power)`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SymProduct {
    /// Product of the static dims.
    pub coeff: usize,
    /// Each symbol with how often it occurs.
    pub syms: BTreeMap<String, u32>,
}

/// Broadcast two shapes by numpy's rules: align from the right; equal dims stay, a static 1
/// takes the other dim. Symbolic dims broadcast only against themselves or 1, since the
/// verifier cannot prove `seq == 8`.
pub fn broadcast_shapes(a: &Shape, b: &Shape) -> Result<Shape, (Dim, Dim)> {
    let rank = a.rank().max(b.rank());
    let mut out = Vec::with_capacity(rank);
    for i in 0..rank {
        let da = dim_from_right(a, rank - 1 - i);
        let db = dim_from_right(b, rank - 1 - i);
        let d = match (da, db) {
            (x, y) if x == y => x,
            (x, y) if x.is_one() => y,
            (x, y) if y.is_one() => x,
            (x, y) => return Err((x, y)),
        };
        out.push(d);
    }
    Ok(Shape(out))
}

/// The dim `from_right` places from the last one (0 = last); a missing leading dim is 1.
fn dim_from_right(s: &Shape, from_right: usize) -> Dim {
    let r = s.rank();
    if from_right < r { s.0[r - 1 - from_right].clone() } else { Dim::Static(1) }
}

/// True when `from` can be broadcast to `to` (numpy rules, `to` unchanged).
pub fn broadcasts_to(from: &Shape, to: &Shape) -> bool {
    from.rank() <= to.rank() && broadcast_shapes(from, to).is_ok_and(|s| &s == to)
}

/// The type of a tensor value: element type and shape.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct TensorType {
    /// Element type.
    pub dtype: DType,
    /// Shape, possibly symbolic.
    pub shape: Shape,
}

impl TensorType {
    /// A tensor type from a dtype and anything that converts to a shape.
    pub fn new(dtype: DType, shape: impl Into<Shape>) -> TensorType {
        TensorType { dtype, shape: shape.into() }
    }

    /// Rank of the shape.
    pub fn rank(&self) -> usize {
        self.shape.rank()
    }
}

impl fmt::Display for TensorType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}{}", self.dtype, self.shape)
    }
}
