//! Op attributes (`{axis=1, keepdim=true}`): parsed values, consumed by name, and the table
//! from op names to ops.

use super::PResult;
use crate::dtype::DType;
use crate::error::ParseError;
use crate::float::F64;
use crate::op::{Activation, BinaryOp, GeluApprox, Op, ReduceOp, UnaryOp};
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

/// Build a non-source op from its name and attributes; None for an unknown name.
pub(super) fn build_op(name: &str, a: &mut Attrs) -> Option<PResult<Op>> {
    if let Some(u) = UnaryOp::ALL.into_iter().find(|u| u.name() == name) {
        return Some(Ok(Op::Unary(u)));
    }
    if let Some(b) = BinaryOp::ALL.into_iter().find(|b| b.name() == name) {
        return Some(Ok(Op::Binary(b)));
    }
    if let Some(r) = ReduceOp::ALL.into_iter().find(|r| r.name() == name) {
        return Some((|| Ok(Op::Reduce { op: r, axes: a.usizes("axes")?, keepdim: a.bool("keepdim")? }))());
    }
    let dtypes: Vec<(&str, DType)> = DType::ALL.iter().map(|d| (d.name(), *d)).collect();
    let acts: Vec<(&str, Activation)> = Activation::ALL.iter().map(|x| (x.name(), *x)).collect();
    let op = match name {
        "iota" => a.usize("axis").map(|axis| Op::Iota { axis }),
        "random_uniform" => a.u32("seed").map(|seed| Op::RandomUniform { seed }),
        "where" => Ok(Op::Where),
        "cast" => a.choice("to", &dtypes).map(|to| Op::Cast { to }),
        "matmul" => Ok(Op::MatMul),
        "reshape" => a.shape("shape").map(|shape| Op::Reshape { shape }),
        "broadcast_to" => a.shape("shape").map(|shape| Op::BroadcastTo { shape }),
        "permute" => a.usizes("perm").map(|perm| Op::Permute { perm }),
        "slice" => (|| Ok(Op::Slice { axis: a.usize("axis")?, start: a.usize("start")?, end: a.dim("end")? }))(),
        "concat" => a.usize("axis").map(|axis| Op::Concat { axis }),
        "gather" => a.usize("axis").map(|axis| Op::Gather { axis }),
        "layer_norm" => a.float("eps").map(|eps| Op::LayerNorm { eps }),
        "rms_norm" => a.float("eps").map(|eps| Op::RmsNorm { eps }),
        "softmax" => a.usize("axis").map(|axis| Op::Softmax { axis }),
        "gelu" => a
            .choice("approx", &[("erf", GeluApprox::Erf), ("tanh", GeluApprox::Tanh)])
            .map(|approx| Op::Gelu { approx }),
        "silu" => Ok(Op::Silu),
        "cross_entropy" => Ok(Op::CrossEntropy),
        "attention" => (|| Ok(Op::Attention { scale: a.float("scale")?, causal: a.bool("causal")? }))(),
        "matmul_epilogue" => a.choice("activation", &acts).map(|activation| Op::MatMulEpilogue { activation }),
        _ => return None,
    };
    Some(op)
}
