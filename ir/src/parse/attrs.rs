//! Op attributes (`{axis=1, keepdim=true}`): parsed values, consumed by name, and the table
//! from op names to ops.

use super::PResult;
use crate::error::ParseError;
use crate::float::F64;
use crate::op::{AttrVisitor, Op};
use crate::shape::{Dim, Shape};

/// An attribute value before it is checked against the op's attribute list.
#[derive(Debug)]
pub(super) enum Value {
    Num(String),
    Ident(String),
    List(Vec<(Value, usize, usize)>),
}
/// One parsed `key=value`.
pub(super) struct AttrItem {
    pub(super) key: String,
    pub(super) value: Value,
    pub(super) key_at: (usize, usize),
    pub(super) value_at: (usize, usize),
}

/// An op's attributes, consumed by name; `finish` rejects leftovers.
pub(super) struct Attrs {
    pub(super) items: Vec<AttrItem>,
    pub(super) at: (usize, usize),
    pub(super) op: String,
}

impl Attrs {
    fn take(&mut self, key: &str) -> PResult<(Value, usize, usize)> {
        match self.items.iter().position(|item| item.key == key) {
            Some(i) => {
                let item = self.items.remove(i);
                Ok((item.value, item.value_at.0, item.value_at.1))
            }
            None => Err(ParseError {
                line: self.at.0,
                col: self.at.1,
                expected: format!("attribute `{key}` for `{}`", self.op),
                found: "none".into(),
            }),
        }
    }

    pub(super) fn finish(self) -> PResult<()> {
        match self.items.into_iter().next() {
            Some(item) => Err(ParseError {
                line: item.key_at.0,
                col: item.key_at.1,
                expected: "an attribute this op takes".into(),
                found: format!("'{}'", item.key),
            }),
            None => Ok(()),
        }
    }

    fn usize(&mut self, key: &str) -> PResult<usize> {
        let (v, l, c) = self.take(key)?;
        as_usize(&v, l, c)
    }

    fn u32(&mut self, key: &str) -> PResult<u32> {
        let (v, l, c) = self.take(key)?;
        match &v {
            Value::Num(s) => s.parse().map_err(|_| bad(l, c, "an integer in 0..2^32", &v)),
            _ => Err(bad(l, c, "an integer in 0..2^32", &v)),
        }
    }

    fn usizes(&mut self, key: &str) -> PResult<Vec<usize>> {
        match self.take(key)? {
            (Value::List(xs), ..) => xs.iter().map(|(v, l, c)| as_usize(v, *l, *c)).collect(),
            (v, l, c) => Err(bad(l, c, "a list of integers", &v)),
        }
    }

    fn float(&mut self, key: &str) -> PResult<F64> {
        let (v, l, c) = self.take(key)?;
        match &v {
            Value::Num(s) | Value::Ident(s) => F64::parse(s).ok_or_else(|| bad(l, c, "a number", &v)),
            Value::List(_) => Err(bad(l, c, "a number", &v)),
        }
    }

    fn word(&mut self, key: &str) -> PResult<(String, usize, usize)> {
        match self.take(key)? {
            (Value::Ident(s), l, c) => Ok((s, l, c)),
            (v, l, c) => Err(bad(l, c, "a name", &v)),
        }
    }

    fn choice<T: Copy>(&mut self, key: &str, options: &[(&str, T)]) -> PResult<T> {
        let (w, l, c) = self.word(key)?;
        let names: Vec<&str> = options.iter().map(|(n, _)| *n).collect();
        options.iter().find(|(n, _)| *n == w).map(|(_, v)| *v).ok_or_else(|| ParseError {
            line: l,
            col: c,
            expected: format!("one of {}", names.join(", ")),
            found: format!("'{w}'"),
        })
    }

    fn bool(&mut self, key: &str) -> PResult<bool> {
        self.choice(key, &[("true", true), ("false", false)])
    }

    fn dim(&mut self, key: &str) -> PResult<Dim> {
        let (v, l, c) = self.take(key)?;
        as_dim(&v, l, c)
    }

    fn shape(&mut self, key: &str) -> PResult<Shape> {
        match self.take(key)? {
            (Value::List(xs), ..) => {
                xs.iter().map(|(v, l, c)| as_dim(v, *l, *c)).collect::<PResult<Vec<_>>>().map(Shape)
            }
            (v, l, c) => Err(bad(l, c, "a shape like [batch, 8]", &v)),
        }
    }
}

fn bad(line: usize, col: usize, expected: &str, v: &Value) -> ParseError {
    let found = match v {
        Value::Num(s) | Value::Ident(s) => format!("'{s}'"),
        Value::List(_) => "a list".into(),
    };
    ParseError { line, col, expected: expected.into(), found }
}

fn as_usize(v: &Value, l: usize, c: usize) -> PResult<usize> {
    match v {
        Value::Num(s) => s.parse().map_err(|_| bad(l, c, "a non-negative integer", v)),
        _ => Err(bad(l, c, "a non-negative integer", v)),
    }
}

fn as_dim(v: &Value, l: usize, c: usize) -> PResult<Dim> {
    match v {
        Value::Ident(s) => Ok(Dim::Sym(s.clone())),
        _ => as_usize(v, l, c).map(Dim::Static),
    }
}

/// Build a non-source op from its name and attributes; None for an unknown name. The
/// attributes read are the ones the op declares (`Op::visit_attrs`).
pub(super) fn build_op(name: &str, a: &mut Attrs) -> Option<PResult<Op>> {
    let mut op = Op::from_name(name)?;
    let mut reader = Reader { attrs: a, error: None };
    op.visit_attrs(&mut reader);
    Some(match reader.error {
        Some(e) => Err(e),
        None => Ok(op),
    })
}

/// Fills an op's attributes from parsed ones, keeping the first error.
struct Reader<'a> {
    attrs: &'a mut Attrs,
    error: Option<ParseError>,
}

impl Reader<'_> {
    fn read<T>(&mut self, v: &mut T, f: impl FnOnce(&mut Attrs) -> PResult<T>) {
        if self.error.is_some() {
            return;
        }
        match f(self.attrs) {
            Ok(x) => *v = x,
            Err(e) => self.error = Some(e),
        }
    }
}

impl AttrVisitor for Reader<'_> {
    fn int(&mut self, key: &'static str, v: &mut usize) {
        self.read(v, |a| a.usize(key));
    }
    fn axis(&mut self, key: &'static str, v: &mut usize) {
        self.read(v, |a| a.usize(key));
    }
    fn axes(&mut self, key: &'static str, v: &mut Vec<usize>) {
        self.read(v, |a| a.usizes(key));
    }
    fn ints(&mut self, key: &'static str, v: &mut Vec<usize>) {
        self.read(v, |a| a.usizes(key));
    }
    fn u32(&mut self, key: &'static str, v: &mut u32) {
        self.read(v, |a| a.u32(key));
    }
    fn bool(&mut self, key: &'static str, v: &mut bool) {
        self.read(v, |a| a.bool(key));
    }
    fn float(&mut self, key: &'static str, v: &mut F64) {
        self.read(v, |a| a.float(key));
    }
    fn dim(&mut self, key: &'static str, v: &mut Dim) {
        self.read(v, |a| a.dim(key));
    }
    fn shape(&mut self, key: &'static str, v: &mut Shape) {
        self.read(v, |a| a.shape(key));
    }
    fn word(&mut self, key: &'static str, options: &[&'static str], v: &mut usize) {
        let indexed: Vec<(&str, usize)> = options.iter().enumerate().map(|(i, o)| (*o, i)).collect();
        self.read(v, |a| a.choice(key, &indexed));
    }
}
