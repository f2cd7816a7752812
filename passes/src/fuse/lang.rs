//! The bridge between graph nodes and egg's `SymbolLang`: each op is a symbol (attributes
//! spelled inside it, axes relative to the operand's rank so one rule serves every rank), and
//! every value the region does not compute (inputs, params, constants, other regions) is a
//! childless leaf. Rules build `fused_*` symbols whose scalar attributes (eps, scale) are
//! constant children; `decode` turns any symbol back into an IR op.

use egg::{Id, Symbol, SymbolLang};
use rustral_ir::{
    Activation, BinaryOp, DType, Dim, F64, GeluApprox, Graph, Literal, NodeId, Op, ReduceOp, Shape, TensorType, UnaryOp,
};
use std::collections::HashMap;

/// What a leaf symbol stands for.
#[derive(Clone, Debug)]
pub struct Leaf {
    /// The graph node it reads.
    pub node: NodeId,
    /// Its type.
    pub ty: TensorType,
    /// Its value, when it is a splat constant.
    pub splat: Option<f64>,
    /// The iota axis, when it is an iota (the causal-mask rule looks for them).
    pub iota_axis: Option<usize>,
    /// True when it is a causal visibility mask computed elsewhere (`cols <= rows` of iotas,
    /// shared between layers by CSE).
    pub causal: bool,
}

/// Leaves by symbol.
#[derive(Clone, Debug, Default)]
pub struct Table {
    /// Symbol to leaf.
    pub leaves: HashMap<Symbol, Leaf>,
}

impl Table {
    /// The leaf symbol of graph node `id`: splat constants and iotas are named by value and
    /// type (so equal ones share an e-class), anything else by node.
    pub fn leaf(&mut self, g: &Graph, id: NodeId) -> Symbol {
        let node = g.node(id).expect("leaf node exists");
        let ty = compact(&node.ty.to_string());
        let (name, splat, iota_axis) = match &node.op {
            Op::Constant { value: Literal::Splat(v) } => (format!("const[{ty}]{v}"), Some(v.0), None),
            Op::Iota { axis } => (format!("iota[{ty}]{axis}"), None, Some(*axis)),
            _ => (format!("leaf%{}", id.index()), None, None),
        };
        let sym = Symbol::from(name);
        let causal = is_causal_visibility(g, id);
        self.leaves.entry(sym).or_insert(Leaf { node: id, ty: node.ty.clone(), splat, iota_axis, causal });
        sym
    }
}

/// `le(cols, rows)` with `cols` an iota along axis 1 of shape `[1, s]` and `rows` an iota
/// along axis 0 of shape `[s, 1]`: true where key `j` <= query `i`.
pub fn is_causal_visibility(g: &Graph, id: NodeId) -> bool {
    let Some(node) = g.node(id) else { return false };
    if node.op != Op::Binary(BinaryOp::Le) {
        return false;
    }
    let ops = g.operands(id);
    let iota = |n: NodeId, axis: usize, unit: usize| {
        g.node(n).is_some_and(|x| x.op == Op::Iota { axis } && x.ty.rank() == 2 && x.ty.shape.0[unit] == Dim::Static(1))
    };
    ops.len() == 2 && iota(ops[0], 1, 0) && iota(ops[1], 0, 1)
}

/// Text without spaces, so it can sit inside an s-expression symbol.
fn compact(s: &str) -> String {
    s.replace(' ', "")
}

fn list<T: ToString>(xs: &[T]) -> String {
    xs.iter().map(|x| x.to_string()).collect::<Vec<_>>().join(",")
}

/// The symbol of a non-source op whose first operand has rank `rank`; None for ops the
/// fusion rules treat as opaque (fused elementwise bodies).
pub fn encode(op: &Op, rank: usize) -> Option<String> {
    let rel = |a: usize| a as isize - rank as isize;
    Some(match op {
        Op::Unary(u) => u.name().to_string(),
        Op::Binary(b) => b.name().to_string(),
        Op::Where | Op::MatMul | Op::Silu | Op::CrossEntropy => op.name().to_string(),
        Op::Cast { to } => format!("cast.{to}"),
        Op::Reduce { op: r, axes, keepdim } => {
            let rels: Vec<isize> = axes.iter().map(|&a| rel(a)).collect();
            format!("{}[{}]{}", r.name(), list(&rels), if *keepdim { "k" } else { "d" })
        }
        Op::Softmax { axis } => format!("softmax[{}]", rel(*axis)),
        Op::Reshape { shape } | Op::BroadcastTo { shape } => format!("{}{}", op.name(), compact(&shape.to_string())),
        Op::Permute { perm } => format!("permute[{}]", list(perm)),
        Op::Slice { axis, start, end } => format!("slice[{axis},{start},{end}]"),
        Op::Concat { axis } | Op::Gather { axis } => format!("{}[{axis}]", op.name()),
        Op::LayerNorm { eps } | Op::RmsNorm { eps } => format!("{}[{eps}]", op.name()),
        Op::Gelu { approx } => format!("gelu[{}]", if *approx == GeluApprox::Erf { "erf" } else { "tanh" }),
        Op::Attention { scale, causal } => format!("attention[{scale},{causal}]"),
        Op::MatMulEpilogue { activation } => format!("matmul_epilogue[{}]", activation.name()),
        Op::FusedElementwise { .. }
        | Op::Input { .. }
        | Op::Param { .. }
        | Op::Constant { .. }
        | Op::Iota { .. }
        | Op::RandomUniform { .. } => return None,
    })
}

/// The IR op of an e-node and the positions of its children that are operands (fused rule
/// outputs carry scalar attributes as trailing constant children). `ty(i)` and `splat(i)`
/// give the type and constant value of child `i`.
pub fn decode(
    node: &SymbolLang,
    ty: &dyn Fn(Id) -> Option<TensorType>,
    splat: &dyn Fn(Id) -> Option<f64>,
) -> Option<(Op, usize)> {
    let s = node.op.as_str();
    let n = node.children.len();
    let child_rank = || node.children.first().and_then(|&c| ty(c)).map(|t| t.rank());
    let abs = |rel: isize| -> Option<usize> { usize::try_from(child_rank()? as isize + rel).ok() };
    let last_const = || splat(*node.children.last()?);
    if let Some(op) = decode_fused(s, n, &last_const) {
        return Some(op);
    }
    if let Some(u) = UnaryOp::ALL.into_iter().find(|u| u.name() == s) {
        return Some((Op::Unary(u), n));
    }
    if let Some(b) = BinaryOp::ALL.into_iter().find(|b| b.name() == s) {
        return Some((Op::Binary(b), n));
    }
    let op = match s {
        "where" => Op::Where,
        "matmul" => Op::MatMul,
        "silu" => Op::Silu,
        "cross_entropy" => Op::CrossEntropy,
        _ if s.starts_with("cast.") => Op::Cast { to: s["cast.".len()..].parse::<DType>().ok()? },
        _ => {
            let (name, rest) = s.split_once('[')?;
            let (inner, tail) = rest.split_once(']')?;
            let ints = || inner.split(',').map(|x| x.parse::<isize>().ok()).collect::<Option<Vec<isize>>>();
            match name {
                "softmax" => Op::Softmax { axis: abs(*ints()?.first()?)? },
                "permute" => {
                    Op::Permute { perm: ints()?.into_iter().map(|x| usize::try_from(x).ok()).collect::<Option<_>>()? }
                }
                "reshape" | "broadcast_to" => {
                    let dims = if inner.is_empty() {
                        vec![]
                    } else {
                        inner.split(',').map(dim).collect::<Option<Vec<_>>>()?
                    };
                    if name == "reshape" {
                        Op::Reshape { shape: Shape(dims) }
                    } else {
                        Op::BroadcastTo { shape: Shape(dims) }
                    }
                }
                "slice" => {
                    let parts: Vec<&str> = inner.split(',').collect();
                    let [axis, start, end] = parts.as_slice() else { return None };
                    Op::Slice { axis: axis.parse().ok()?, start: start.parse().ok()?, end: dim(end)? }
                }
                "concat" => Op::Concat { axis: inner.parse().ok()? },
                "gather" => Op::Gather { axis: inner.parse().ok()? },
                "layer_norm" => Op::LayerNorm { eps: F64::parse(inner)? },
                "rms_norm" => Op::RmsNorm { eps: F64::parse(inner)? },
                "gelu" => Op::Gelu { approx: if inner == "erf" { GeluApprox::Erf } else { GeluApprox::Tanh } },
                "attention" => {
                    let (scale, causal) = inner.split_once(',')?;
                    Op::Attention { scale: F64::parse(scale)?, causal: causal == "true" }
                }
                "matmul_epilogue" => Op::MatMulEpilogue { activation: activation(inner)? },
                _ => {
                    let r = ReduceOp::ALL.into_iter().find(|r| r.name() == name)?;
                    let axes = ints()?.into_iter().map(abs).collect::<Option<Vec<usize>>>()?;
                    Op::Reduce { op: r, axes, keepdim: tail == "k" }
                }
            }
        }
    };
    Some((op, n))
}

fn dim(s: &str) -> Option<Dim> {
    match s.parse::<usize>() {
        Ok(n) => Some(Dim::Static(n)),
        Err(_) if rustral_ir::is_identifier(s) => Some(Dim::Sym(s.to_string())),
        Err(_) => None,
    }
}

fn activation(name: &str) -> Option<Activation> {
    Activation::ALL.into_iter().find(|a| a.name() == name)
}

/// The ops fusion rules build. Attribute constants are the trailing children.
fn decode_fused(s: &str, n: usize, last_const: &dyn Fn() -> Option<f64>) -> Option<(Op, usize)> {
    let rest = s.strip_prefix("fused_")?;
    Some(match rest {
        "layer_norm" | "layer_norm_affine" => (Op::LayerNorm { eps: F64(last_const()?) }, n - 1),
        "rms_norm" | "rms_norm_affine" => (Op::RmsNorm { eps: F64(last_const()?) }, n - 1),
        "gelu_erf" => (Op::Gelu { approx: GeluApprox::Erf }, n),
        "gelu_tanh" => (Op::Gelu { approx: GeluApprox::Tanh }, n),
        "silu" => (Op::Silu, n),
        _ if rest.starts_with("attention_") => {
            // fused_attention_{mul|div}[_causal]: children q, k, v, [mask,] scale constant.
            let c = last_const()?;
            let scale = if rest.contains("_div") { 1.0 / c } else { c };
            (Op::Attention { scale: F64(scale), causal: rest.ends_with("_causal") }, n - 1)
        }
        _ if rest.starts_with("epilogue_") => {
            (Op::MatMulEpilogue { activation: activation(&rest["epilogue_".len()..])? }, n)
        }
        _ => return None,
    })
}
