//! Parser for the text form written by `text::print`. Errors carry line:col and say what was
//! expected. Nodes must be numbered `%0, %1, ...` in order and may only use earlier nodes, so
//! a parsed graph is acyclic by construction; types are taken as declared and checked by
//! the verifier.

use crate::dtype::DType;
use crate::error::ParseError;
use crate::float::F64;
use crate::graph::{Graph, NodeId};
use crate::op::{Activation, BinaryOp, ElementwiseExpr, ExprNode, GeluApprox, Literal, Op, ReduceOp, UnaryOp};
use crate::shape::{Dim, Shape, TensorType};
use crate::text::is_path_char;

/// Parse a graph from its text form (not verified: call `verify` next).
pub fn parse(src: &str) -> Result<Graph, ParseError> {
    let tokens = lex(src)?;
    let mut p = Parser { tokens, pos: 0, nodes: Vec::new() };
    p.graph()
}

#[derive(Clone, Debug, PartialEq)]
enum Tok {
    Node(usize),
    Ident(String),
    Num(String),
    Str(String),
    Prov(String),
    Punct(char),
    Eof,
}

impl Tok {
    fn describe(&self) -> String {
        match self {
            Tok::Node(n) => format!("'%{n}'"),
            Tok::Ident(s) | Tok::Num(s) => format!("'{s}'"),
            Tok::Str(s) => format!("string {s:?}"),
            Tok::Prov(s) => format!("provenance '@{s}'"),
            Tok::Punct(c) => format!("'{c}'"),
            Tok::Eof => "end of input".to_string(),
        }
    }
}

struct Spanned {
    tok: Tok,
    line: usize,
    col: usize,
}

fn lex(src: &str) -> Result<Vec<Spanned>, ParseError> {
    let chars: Vec<char> = src.chars().collect();
    let (mut i, mut line, mut col) = (0, 1, 1);
    let mut out = Vec::new();
    let err = |line, col, expected: &str, found: String| ParseError { line, col, expected: expected.into(), found };
    while i < chars.len() {
        let c = chars[i];
        let (l0, c0) = (line, col);
        let take = |i: &mut usize, col: &mut usize, pred: &dyn Fn(char) -> bool| {
            let start = *i;
            while *i < chars.len() && pred(chars[*i]) {
                *i += 1;
                *col += 1;
            }
            chars[start..*i].iter().collect::<String>()
        };
        if c == '\n' {
            i += 1;
            line += 1;
            col = 1;
            continue;
        }
        if c.is_whitespace() {
            i += 1;
            col += 1;
            continue;
        }
        if c == '#' {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
            continue;
        }
        let tok = if c == '%' {
            i += 1;
            col += 1;
            let digits = take(&mut i, &mut col, &|c| c.is_ascii_digit());
            Tok::Node(digits.parse().map_err(|_| err(l0, c0 + 1, "a node number after '%'", found_at(&chars, i)))?)
        } else if c.is_ascii_alphabetic() || c == '_' {
            Tok::Ident(take(&mut i, &mut col, &|c| c.is_ascii_alphanumeric() || c == '_'))
        } else if c.is_ascii_digit() || c == '-' || c == '+' {
            let text = take(&mut i, &mut col, &|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '+'));
            Tok::Num(text)
        } else if c == '"' {
            Tok::Str(lex_string(&chars, &mut i, &mut line, &mut col)?)
        } else if c == '@' {
            i += 1;
            col += 1;
            if chars.get(i) == Some(&'"') {
                Tok::Prov(lex_string(&chars, &mut i, &mut line, &mut col)?)
            } else {
                let path = take(&mut i, &mut col, &|c| is_path_char(c));
                if path.is_empty() {
                    return Err(err(l0, c0 + 1, "a module path after '@'", found_at(&chars, i)));
                }
                Tok::Prov(path)
            }
        } else if ":=,[]{};".contains(c) {
            i += 1;
            col += 1;
            Tok::Punct(c)
        } else {
            return Err(err(l0, c0, "a token", format!("'{c}'")));
        };
        out.push(Spanned { tok, line: l0, col: c0 });
    }
    out.push(Spanned { tok: Tok::Eof, line, col });
    Ok(out)
}

fn found_at(chars: &[char], i: usize) -> String {
    chars.get(i).map_or_else(|| "end of input".to_string(), |c| format!("'{c}'"))
}

/// Lex a quoted string starting at `chars[*i] == '"'`, undoing `text::quote`'s escapes.
fn lex_string(chars: &[char], i: &mut usize, line: &mut usize, col: &mut usize) -> Result<String, ParseError> {
    let (l0, c0) = (*line, *col);
    let err = |expected: &str, found: String, line, col| ParseError { line, col, expected: expected.into(), found };
    *i += 1;
    *col += 1;
    let mut s = String::new();
    loop {
        let Some(&c) = chars.get(*i) else {
            return Err(err("a closing '\"'", format!("end of input (string opened at {l0}:{c0})"), *line, *col));
        };
        *i += 1;
        *col += 1;
        match c {
            '"' => return Ok(s),
            '\n' => return Err(err("a closing '\"' before the end of the line", "a newline".into(), *line, *col - 1)),
            '\\' => {
                let e = chars.get(*i).copied();
                *i += 1;
                *col += 1;
                match e {
                    Some('"') => s.push('"'),
                    Some('\\') => s.push('\\'),
                    Some('n') => s.push('\n'),
                    Some('t') => s.push('\t'),
                    Some('u') if chars.get(*i) == Some(&'{') => {
                        let start = *i + 1;
                        let end = chars[start..].iter().position(|&c| c == '}').map(|p| start + p);
                        let code = end
                            .and_then(|e| u32::from_str_radix(&chars[start..e].iter().collect::<String>(), 16).ok())
                            .and_then(char::from_u32);
                        match (code, end) {
                            (Some(ch), Some(e)) => {
                                s.push(ch);
                                *col += e + 1 - *i;
                                *i = e + 1;
                            }
                            _ => return Err(err("a \\u{HEX} escape", "a malformed escape".into(), *line, *col)),
                        }
                    }
                    other => {
                        let found = other.map_or_else(|| "end of input".to_string(), |c| format!("'\\{c}'"));
                        return Err(err("an escape (\\\" \\\\ \\n \\t \\u{..})", found, *line, *col - 1));
                    }
                }
            }
            c => s.push(c),
        }
    }
}

/// An attribute value before it is checked against the op's attribute list.
#[derive(Debug)]
enum Value {
    Num(String),
    Ident(String),
    List(Vec<(Value, usize, usize)>),
}

struct Parser {
    tokens: Vec<Spanned>,
    pos: usize,
    /// Node ids by printed number.
    nodes: Vec<NodeId>,
}

type PResult<T> = Result<T, ParseError>;

impl Parser {
    fn peek(&self) -> &Tok {
        &self.tokens[self.pos].tok
    }

    fn here(&self) -> (usize, usize) {
        let t = &self.tokens[self.pos];
        (t.line, t.col)
    }

    fn next(&mut self) -> Tok {
        let t = self.tokens[self.pos].tok.clone();
        if self.pos + 1 < self.tokens.len() {
            self.pos += 1;
        }
        t
    }

    fn fail<T>(&self, expected: impl Into<String>) -> PResult<T> {
        Err(self.error_here(expected))
    }

    fn error_here(&self, expected: impl Into<String>) -> ParseError {
        let (line, col) = self.here();
        ParseError { line, col, expected: expected.into(), found: self.peek().describe() }
    }

    fn punct(&mut self, c: char) -> PResult<()> {
        if *self.peek() == Tok::Punct(c) {
            self.next();
            Ok(())
        } else {
            self.fail(format!("'{c}'"))
        }
    }

    fn eat_punct(&mut self, c: char) -> bool {
        let hit = *self.peek() == Tok::Punct(c);
        if hit {
            self.next();
        }
        hit
    }

    fn keyword(&mut self, kw: &str) -> PResult<()> {
        match self.peek() {
            Tok::Ident(s) if s == kw => {
                self.next();
                Ok(())
            }
            _ => self.fail(format!("'{kw}'")),
        }
    }

    fn ident(&mut self, what: &str) -> PResult<String> {
        match self.peek().clone() {
            Tok::Ident(s) => {
                self.next();
                Ok(s)
            }
            _ => self.fail(what),
        }
    }

    fn string(&mut self, what: &str) -> PResult<String> {
        match self.peek().clone() {
            Tok::Str(s) => {
                self.next();
                Ok(s)
            }
            _ => self.fail(what),
        }
    }

    fn usize(&mut self, what: &str) -> PResult<usize> {
        match self.peek().clone() {
            Tok::Num(s) if s.bytes().all(|b| b.is_ascii_digit()) => match s.parse() {
                Ok(n) => {
                    self.next();
                    Ok(n)
                }
                Err(_) => self.fail(format!("{what} that fits in usize")),
            },
            _ => self.fail(what),
        }
    }

    fn float(&mut self) -> PResult<F64> {
        let v = match self.peek() {
            Tok::Num(s) | Tok::Ident(s) => F64::parse(s),
            _ => None,
        };
        match v {
            Some(v) => {
                self.next();
                Ok(v)
            }
            None => self.fail("a number (or inf, -inf, nan)"),
        }
    }

    fn dtype(&mut self) -> PResult<DType> {
        match self.peek() {
            Tok::Ident(s) => match s.parse::<DType>() {
                Ok(d) => {
                    self.next();
                    Ok(d)
                }
                Err(()) => self.fail("a dtype (f16, bf16, f32, f64, i32, i64, bool)"),
            },
            _ => self.fail("a dtype (f16, bf16, f32, f64, i32, i64, bool)"),
        }
    }

    fn dim(&mut self) -> PResult<Dim> {
        match self.peek().clone() {
            Tok::Ident(s) => {
                self.next();
                Ok(Dim::Sym(s))
            }
            Tok::Num(_) => self.usize("a dim (a size or a symbol)").map(Dim::Static),
            _ => self.fail("a dim (a size or a symbol)"),
        }
    }

    fn shape(&mut self) -> PResult<Shape> {
        self.punct('[')?;
        let mut dims = Vec::new();
        if !self.eat_punct(']') {
            loop {
                dims.push(self.dim()?);
                if self.eat_punct(']') {
                    break;
                }
                if !self.eat_punct(',') {
                    return self.fail("',' or ']'");
                }
            }
        }
        Ok(Shape(dims))
    }

    fn graph(&mut self) -> PResult<Graph> {
        self.keyword("graph")?;
        let name = self.string("the graph's name as a string")?;
        self.punct('{')?;
        let mut g = Graph::new(name);
        loop {
            match self.peek().clone() {
                Tok::Node(n) => self.node(&mut g, n)?,
                Tok::Ident(s) if s == "output" => {
                    self.next();
                    let (line, col) = self.here();
                    let name = self.string("the output's name as a string")?;
                    self.punct('=')?;
                    let id = self.operand()?;
                    g.set_output(&name, id).map_err(|e| ParseError {
                        line,
                        col,
                        expected: "a unique output name".into(),
                        found: e.to_string(),
                    })?;
                }
                Tok::Punct('}') => {
                    self.next();
                    break;
                }
                _ => return self.fail("a node ('%n: ...'), 'output' or '}'"),
            }
        }
        if *self.peek() != Tok::Eof {
            return self.fail("end of input after the graph's '}'");
        }
        Ok(g)
    }

    fn operand(&mut self) -> PResult<NodeId> {
        match self.peek().clone() {
            Tok::Node(n) => match self.nodes.get(n) {
                Some(&id) => {
                    self.next();
                    Ok(id)
                }
                None => self.fail(format!("a node defined earlier (%0..%{})", self.nodes.len())),
            },
            _ => self.fail("an operand ('%n')"),
        }
    }

    fn node(&mut self, g: &mut Graph, n: usize) -> PResult<()> {
        if n != self.nodes.len() {
            return self.fail(format!("'%{}' (nodes are numbered in order)", self.nodes.len()));
        }
        self.next();
        self.punct(':')?;
        let dtype = self.dtype()?;
        let shape = self.shape()?;
        self.punct('=')?;
        let (op_line, op_col) = self.here();
        let opname = self.ident("an op name")?;
        let (op, operands) = match opname.as_str() {
            "input" => (Op::Input { name: self.string("the input's name as a string")? }, vec![]),
            "param" => (Op::Param { name: self.string("the param's name as a string")? }, vec![]),
            "const" => (Op::Constant { value: self.literal()? }, vec![]),
            _ => {
                let operands = self.operands()?;
                let op = if opname == "fused_elementwise" {
                    self.punct('{')?;
                    Op::FusedElementwise { body: self.body()? }
                } else {
                    let attrs = if *self.peek() == Tok::Punct('{') { self.attrs()? } else { Vec::new() };
                    let mut a = Attrs { items: attrs, at: (op_line, op_col), op: opname.clone() };
                    let op = build_op(&opname, &mut a).ok_or_else(|| ParseError {
                        line: op_line,
                        col: op_col,
                        expected: "an op name".into(),
                        found: format!("'{opname}'"),
                    })??;
                    a.finish()?;
                    op
                };
                (op, operands)
            }
        };
        let provenance = match self.peek().clone() {
            Tok::Prov(p) => {
                self.next();
                p
            }
            _ => String::new(),
        };
        let id = g.add_unchecked(op, &operands, TensorType { dtype, shape }, &provenance);
        self.nodes.push(id);
        Ok(())
    }

    fn operands(&mut self) -> PResult<Vec<NodeId>> {
        let mut out = Vec::new();
        if matches!(self.peek(), Tok::Node(_)) {
            out.push(self.operand()?);
            while self.eat_punct(',') {
                out.push(self.operand()?);
            }
        }
        Ok(out)
    }

    fn literal(&mut self) -> PResult<Literal> {
        if !self.eat_punct('[') {
            return Ok(Literal::Splat(self.float()?));
        }
        let mut xs = Vec::new();
        if !self.eat_punct(']') {
            loop {
                xs.push(self.float()?);
                if self.eat_punct(']') {
                    break;
                }
                if !self.eat_punct(',') {
                    return self.fail("',' or ']'");
                }
            }
        }
        Ok(Literal::Dense(xs))
    }

    /// `{key=value, ...}`; each item keeps the key's position and the value's.
    fn attrs(&mut self) -> PResult<Vec<AttrItem>> {
        self.punct('{')?;
        let mut items = Vec::new();
        if self.eat_punct('}') {
            return Ok(items);
        }
        loop {
            let (line, col) = self.here();
            let key = self.ident("an attribute name")?;
            self.punct('=')?;
            let (vline, vcol) = self.here();
            let value = self.value()?;
            items.push(AttrItem { key, value, key_at: (line, col), value_at: (vline, vcol) });
            if self.eat_punct('}') {
                return Ok(items);
            }
            if !self.eat_punct(',') {
                return self.fail("',' or '}'");
            }
        }
    }

    fn value(&mut self) -> PResult<Value> {
        match self.next() {
            Tok::Num(s) => Ok(Value::Num(s)),
            Tok::Ident(s) => Ok(Value::Ident(s)),
            Tok::Punct('[') => {
                let mut xs = Vec::new();
                if self.eat_punct(']') {
                    return Ok(Value::List(xs));
                }
                loop {
                    let (line, col) = self.here();
                    xs.push((self.value()?, line, col));
                    if self.eat_punct(']') {
                        return Ok(Value::List(xs));
                    }
                    if !self.eat_punct(',') {
                        return self.fail("',' or ']'");
                    }
                }
            }
            _ => {
                self.pos -= 1;
                self.fail("an attribute value (number, name or list)")
            }
        }
    }

    /// A fused body after its '{': `t0 = arg 0; t1 = tanh t0 }`.
    fn body(&mut self) -> PResult<ElementwiseExpr> {
        let mut nodes = Vec::new();
        loop {
            let temp = self.ident(&format!("'t{}'", nodes.len()))?;
            if temp != format!("t{}", nodes.len()) {
                self.pos -= 1;
                return self.fail(format!("'t{}' (body temps are numbered in order)", nodes.len()));
            }
            self.punct('=')?;
            let name = self.ident("a body op (arg, const, cast, where, or a unary/binary op)")?;
            let node = match name.as_str() {
                "arg" => ExprNode::Arg(self.usize("an operand index")?),
                "const" => {
                    let value = self.float()?;
                    ExprNode::Const { value, dtype: self.dtype()? }
                }
                "cast" => {
                    let x = self.temp(nodes.len())?;
                    self.keyword("to")?;
                    ExprNode::Cast(self.dtype()?, x)
                }
                "where" => {
                    let c = self.temp(nodes.len())?;
                    self.punct(',')?;
                    let a = self.temp(nodes.len())?;
                    self.punct(',')?;
                    ExprNode::Where(c, a, self.temp(nodes.len())?)
                }
                _ => {
                    if let Some(u) = UnaryOp::ALL.into_iter().find(|u| u.name() == name) {
                        ExprNode::Unary(u, self.temp(nodes.len())?)
                    } else if let Some(b) = BinaryOp::ALL.into_iter().find(|b| b.name() == name) {
                        let x = self.temp(nodes.len())?;
                        self.punct(',')?;
                        ExprNode::Binary(b, x, self.temp(nodes.len())?)
                    } else {
                        self.pos -= 1;
                        return self.fail("a body op (arg, const, cast, where, or a unary/binary op)");
                    }
                }
            };
            nodes.push(node);
            if self.eat_punct('}') {
                return Ok(ElementwiseExpr { nodes });
            }
            if !self.eat_punct(';') {
                return self.fail("';' or '}'");
            }
        }
    }

    /// A reference to an earlier body temp.
    fn temp(&mut self, defined: usize) -> PResult<usize> {
        let expected = format!("a temp defined earlier (t0..t{})", defined.saturating_sub(1));
        match self.peek().clone() {
            Tok::Ident(s) => match s.strip_prefix('t').and_then(|d| d.parse::<usize>().ok()) {
                Some(i) if i < defined => {
                    self.next();
                    Ok(i)
                }
                _ => self.fail(expected),
            },
            _ => self.fail(expected),
        }
    }
}

/// One parsed `key=value`.
struct AttrItem {
    key: String,
    value: Value,
    key_at: (usize, usize),
    value_at: (usize, usize),
}

/// An op's attributes, consumed by name; `finish` rejects leftovers.
struct Attrs {
    items: Vec<AttrItem>,
    at: (usize, usize),
    op: String,
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

    fn finish(self) -> PResult<()> {
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
fn build_op(name: &str, a: &mut Attrs) -> Option<PResult<Op>> {
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
        "attention" => (|| Ok(Op::Attention { scale: a.float("scale")?, causal: a.bool("causal")? }))(),
        "matmul_epilogue" => a.choice("activation", &acts).map(|activation| Op::MatMulEpilogue { activation }),
        _ => return None,
    };
    Some(op)
}
