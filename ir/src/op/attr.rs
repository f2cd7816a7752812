//! Op attributes, visited by name. Each op lists its attributes once (`Op::visit_attrs`), and
//! every form that spells them walks that list with a visitor: the text printer and parser,
//! and the fusion pass's e-graph symbols, which spell axes from the end (`axis=-1`) so that
//! one rule serves every rank.

use crate::dtype::DType;
use crate::float::F64;
use crate::shape::{Dim, Shape};
use std::fmt::Write;

use super::{Activation, GeluApprox};

/// A closed set of named values an attribute can take (`to=f32`, `approx=tanh`).
pub trait Choice: Copy + PartialEq + 'static {
    /// Every value, in declaration order.
    fn all() -> &'static [Self];
    /// Its spelling.
    fn spelling(self) -> &'static str;
}

impl Choice for crate::quant::QuantFormat {
    fn all() -> &'static [crate::quant::QuantFormat] {
        &crate::quant::QuantFormat::ALL
    }
    fn spelling(self) -> &'static str {
        self.name()
    }
}

impl Choice for DType {
    fn all() -> &'static [DType] {
        &DType::ALL
    }
    fn spelling(self) -> &'static str {
        self.name()
    }
}

impl Choice for GeluApprox {
    fn all() -> &'static [GeluApprox] {
        &[GeluApprox::Erf, GeluApprox::Tanh]
    }
    fn spelling(self) -> &'static str {
        match self {
            GeluApprox::Erf => "erf",
            GeluApprox::Tanh => "tanh",
        }
    }
}

impl Choice for Activation {
    fn all() -> &'static [Activation] {
        &Activation::ALL
    }
    fn spelling(self) -> &'static str {
        self.name()
    }
}

/// Something that reads or writes an op's attributes, one `key` at a time, in the op's
/// declared order. A reader (a parser) overwrites each value; a writer (a printer) reads it.
pub trait AttrVisitor {
    /// A non-negative integer (`start=2`).
    fn int(&mut self, key: &'static str, v: &mut usize);
    /// An axis of the first operand (`axis=1`).
    fn axis(&mut self, key: &'static str, v: &mut usize);
    /// Axes of the first operand (`axes=[1, 2]`).
    fn axes(&mut self, key: &'static str, v: &mut Vec<usize>);
    /// A list of non-negative integers (`perm=[0, 2, 1]`).
    fn ints(&mut self, key: &'static str, v: &mut Vec<usize>);
    /// A 32-bit unsigned integer (`seed=7`).
    fn u32(&mut self, key: &'static str, v: &mut u32);
    /// `true` or `false`.
    fn bool(&mut self, key: &'static str, v: &mut bool);
    /// A number (`eps=1e-5`).
    fn float(&mut self, key: &'static str, v: &mut F64);
    /// A static or symbolic dim (`end=seq`).
    fn dim(&mut self, key: &'static str, v: &mut Dim);
    /// A shape (`shape=[batch, 8]`).
    fn shape(&mut self, key: &'static str, v: &mut Shape);
    /// One of `options` (`to=f32`); `v` is an index into `options`.
    fn word(&mut self, key: &'static str, options: &[&'static str], v: &mut usize);
}

/// Visit a [`Choice`] attribute as a word.
pub(crate) fn choice<T: Choice>(visitor: &mut impl AttrVisitor, key: &'static str, v: &mut T) {
    let all = T::all();
    let names: Vec<&'static str> = all.iter().map(|c| c.spelling()).collect();
    let mut i = all.iter().position(|c| c == v).unwrap_or(0);
    visitor.word(key, &names, &mut i);
    if let Some(c) = all.get(i) {
        *v = *c;
    }
}

/// Writes attributes as `key=value, key=value`, the text IR's spelling. With `rank`, axes are
/// written from the end (`-1` for the last axis of a rank-`rank` operand) and the separator
/// has no space, as e-graph symbols need.
pub struct AttrWriter {
    /// The text so far.
    pub text: String,
    rank: Option<usize>,
}

impl AttrWriter {
    /// A writer in the text IR's spelling.
    pub fn text() -> AttrWriter {
        AttrWriter { text: String::new(), rank: None }
    }

    /// A writer for e-graph symbols of an op whose first operand has rank `rank`.
    pub fn symbol(rank: usize) -> AttrWriter {
        AttrWriter { text: String::new(), rank: Some(rank) }
    }

    fn put(&mut self, key: &str, value: std::fmt::Arguments<'_>) {
        if !self.text.is_empty() {
            self.text.push_str(self.sep());
        }
        write!(self.text, "{key}={value}").expect("write to String");
    }

    fn sep(&self) -> &'static str {
        if self.rank.is_some() { "," } else { ", " }
    }

    fn axis_text(&self, a: usize) -> String {
        match self.rank {
            Some(r) => (a as isize - r as isize).to_string(),
            None => a.to_string(),
        }
    }

    fn list(&self, xs: impl Iterator<Item = String>) -> String {
        format!("[{}]", xs.collect::<Vec<_>>().join(self.sep()))
    }
}

impl AttrVisitor for AttrWriter {
    fn int(&mut self, key: &'static str, v: &mut usize) {
        self.put(key, format_args!("{v}"));
    }
    fn axis(&mut self, key: &'static str, v: &mut usize) {
        let a = self.axis_text(*v);
        self.put(key, format_args!("{a}"));
    }
    fn axes(&mut self, key: &'static str, v: &mut Vec<usize>) {
        let l = self.list(v.iter().map(|&a| self.axis_text(a)));
        self.put(key, format_args!("{l}"));
    }
    fn ints(&mut self, key: &'static str, v: &mut Vec<usize>) {
        let l = self.list(v.iter().map(|a| a.to_string()));
        self.put(key, format_args!("{l}"));
    }
    fn u32(&mut self, key: &'static str, v: &mut u32) {
        self.put(key, format_args!("{v}"));
    }
    fn bool(&mut self, key: &'static str, v: &mut bool) {
        self.put(key, format_args!("{v}"));
    }
    fn float(&mut self, key: &'static str, v: &mut F64) {
        self.put(key, format_args!("{v}"));
    }
    fn dim(&mut self, key: &'static str, v: &mut Dim) {
        self.put(key, format_args!("{v}"));
    }
    fn shape(&mut self, key: &'static str, v: &mut Shape) {
        let l = self.list(v.0.iter().map(|d| d.to_string()));
        self.put(key, format_args!("{l}"));
    }
    fn word(&mut self, key: &'static str, options: &[&'static str], v: &mut usize) {
        let w = options.get(*v).copied().unwrap_or("?");
        self.put(key, format_args!("{w}"));
    }
}

/// Reads attributes back from an e-graph symbol's `key=value,...` text (what
/// [`AttrWriter::symbol`] wrote), axes counted from the end of a rank-`rank` operand. Any
/// value that does not read leaves `ok` false.
pub(crate) struct SymbolReader<'a> {
    items: Vec<(&'a str, &'a str)>,
    rank: usize,
    pub(crate) ok: bool,
}

impl<'a> SymbolReader<'a> {
    pub(crate) fn new(text: &'a str, rank: usize) -> SymbolReader<'a> {
        let mut items = Vec::new();
        let mut ok = true;
        for part in split_top(text) {
            match part.split_once('=') {
                Some((k, v)) => items.push((k, v)),
                None => ok = false,
            }
        }
        SymbolReader { items, rank, ok }
    }

    /// True when every value read and none was left over.
    pub(crate) fn finished(&self) -> bool {
        self.ok && self.items.is_empty()
    }

    fn take(&mut self, key: &str) -> Option<&'a str> {
        let i = self.items.iter().position(|(k, _)| *k == key)?;
        Some(self.items.remove(i).1)
    }

    fn read<T>(&mut self, key: &str, v: &mut T, f: impl FnOnce(&str, usize) -> Option<T>) {
        let rank = self.rank;
        match self.take(key).and_then(|s| f(s, rank)) {
            Some(x) => *v = x,
            None => self.ok = false,
        }
    }
}

/// `a,b,[c,d],e` split at the commas outside brackets (empty text gives nothing).
fn split_top(text: &str) -> Vec<&str> {
    let (mut parts, mut depth, mut start) = (Vec::new(), 0usize, 0usize);
    for (i, c) in text.char_indices() {
        match c {
            '[' => depth += 1,
            ']' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                parts.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    if !text.is_empty() {
        parts.push(&text[start..]);
    }
    parts
}

fn list(s: &str) -> Option<Vec<&str>> {
    let inner = s.strip_prefix('[')?.strip_suffix(']')?;
    Some(if inner.is_empty() { vec![] } else { inner.split(',').collect() })
}

fn from_end(s: &str, rank: usize) -> Option<usize> {
    let rel: isize = s.parse().ok()?;
    usize::try_from(rank as isize + rel).ok().filter(|&a| a < rank)
}

fn dim(s: &str) -> Option<Dim> {
    match s.parse::<usize>() {
        Ok(n) => Some(Dim::Static(n)),
        Err(_) if crate::shape::is_identifier(s) => Some(Dim::Sym(s.to_string())),
        Err(_) => None,
    }
}

impl AttrVisitor for SymbolReader<'_> {
    fn int(&mut self, key: &'static str, v: &mut usize) {
        self.read(key, v, |s, _| s.parse().ok());
    }
    fn axis(&mut self, key: &'static str, v: &mut usize) {
        self.read(key, v, from_end);
    }
    fn axes(&mut self, key: &'static str, v: &mut Vec<usize>) {
        self.read(key, v, |s, r| list(s)?.into_iter().map(|a| from_end(a, r)).collect());
    }
    fn ints(&mut self, key: &'static str, v: &mut Vec<usize>) {
        self.read(key, v, |s, _| list(s)?.into_iter().map(|a| a.parse().ok()).collect());
    }
    fn u32(&mut self, key: &'static str, v: &mut u32) {
        self.read(key, v, |s, _| s.parse().ok());
    }
    fn bool(&mut self, key: &'static str, v: &mut bool) {
        self.read(key, v, |s, _| s.parse().ok());
    }
    fn float(&mut self, key: &'static str, v: &mut F64) {
        self.read(key, v, |s, _| F64::parse(s));
    }
    fn dim(&mut self, key: &'static str, v: &mut Dim) {
        self.read(key, v, |s, _| dim(s));
    }
    fn shape(&mut self, key: &'static str, v: &mut Shape) {
        self.read(key, v, |s, _| list(s)?.into_iter().map(dim).collect::<Option<Vec<_>>>().map(Shape));
    }
    fn word(&mut self, key: &'static str, options: &[&'static str], v: &mut usize) {
        self.read(key, v, |s, _| options.iter().position(|o| *o == s));
    }
}
