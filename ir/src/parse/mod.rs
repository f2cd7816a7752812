//! Parser for the text form written by `text::print`. Errors carry line:col and say what was
//! expected. Nodes must be numbered `%0, %1, ...` in order and may only use earlier nodes, so
//! a parsed graph is acyclic by construction; types are taken as declared and checked by
//! the verifier.

mod attrs;
mod lex;

use crate::dtype::DType;
use crate::error::ParseError;
use crate::float::F64;
use crate::graph::{Graph, NodeId};
use crate::loc::SourceLoc;
use crate::op::{BinaryOp, ElementwiseExpr, ExprNode, Literal, Op, UnaryOp};
use crate::shape::{Dim, Shape, TensorType};
use attrs::{AttrItem, Attrs, Value, build_op};
use lex::{Spanned, Tok, lex};

/// Parse a graph from its text form (not verified: call `verify` next).
pub fn parse(src: &str) -> Result<Graph, ParseError> {
    let tokens = lex(src)?;
    let mut p = Parser { tokens, pos: 0, nodes: Vec::new() };
    p.graph()
}
/// Lists in attribute values nest at most this deep: the parser recurses per level, and a
/// file nested 100,000 deep would otherwise overflow the stack (an abort, not an error).
pub const MAX_NESTING: usize = 64;

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

    fn u32(&mut self, what: &str) -> PResult<u32> {
        let (line, col) = self.here();
        let n = self.usize(what)?;
        u32::try_from(n).map_err(|_| ParseError {
            line,
            col,
            expected: format!("{what} below 2^32"),
            found: n.to_string(),
        })
    }

    fn float(&mut self) -> PResult<F64> {
        let v = match self.peek() {
            // A whole number is read exactly or not at all: 9007199254740993 would silently
            // become ...992 as an f64 (and an i64 constant another value).
            Tok::Num(s) if s.parse::<i128>().is_ok_and(|n| F64::parse(s).is_some_and(|v| v.0 as i128 != n)) => {
                return self.fail(format!("a number an f64 holds exactly (integers within 2^53), not {s}"));
            }
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
        let loc = if *self.peek() == Tok::Ident("loc".into()) { self.locs()? } else { Vec::new() };
        let id = g.add_unchecked(op, &operands, TensorType { dtype, shape }, &provenance);
        g.set_loc(id, loc);
        self.nodes.push(id);
        Ok(())
    }

    /// `loc("file":line:col, ...)`, the `loc` keyword not yet read.
    fn locs(&mut self) -> PResult<Vec<SourceLoc>> {
        self.next();
        self.punct('(')?;
        let mut out = Vec::new();
        loop {
            let (line, col) = self.here();
            let file = self.string("a source file as a string")?;
            if file.is_empty() {
                return Err(ParseError { line, col, expected: "a source file's name".into(), found: "\"\"".into() });
            }
            self.punct(':')?;
            let line = self.u32("a line number")?;
            self.punct(':')?;
            let col = self.u32("a column number")?;
            out.push(SourceLoc::new(file, line, col));
            if !self.eat_punct(',') {
                break;
            }
        }
        self.punct(')')?;
        Ok(out)
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
            let value = self.value(0)?;
            items.push(AttrItem { key, value, key_at: (line, col), value_at: (vline, vcol) });
            if self.eat_punct('}') {
                return Ok(items);
            }
            if !self.eat_punct(',') {
                return self.fail("',' or '}'");
            }
        }
    }

    fn value(&mut self, depth: usize) -> PResult<Value> {
        match self.next() {
            Tok::Num(s) => Ok(Value::Num(s)),
            Tok::Ident(s) => Ok(Value::Ident(s)),
            Tok::Punct('[') if depth >= MAX_NESTING => {
                self.pos -= 1;
                self.fail(format!("a value nested at most {MAX_NESTING} lists deep"))
            }
            Tok::Punct('[') => {
                let mut xs = Vec::new();
                if self.eat_punct(']') {
                    return Ok(Value::List(xs));
                }
                loop {
                    let (line, col) = self.here();
                    xs.push((self.value(depth + 1)?, line, col));
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
