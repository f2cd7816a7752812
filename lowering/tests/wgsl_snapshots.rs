//! Snapshots of generated WGSL: a LayerNorm, an attention, a cross-entropy and a fused
//! elementwise kernel (with a broadcast operand and f16 rounding). Lowering validates every shader with naga, so a
//! snapshot is also a shader naga accepts; determinism is checked by lowering twice.

#![cfg(feature = "wgsl")]

use rustral_ir::{BinaryOp, DType, Dim, ElementwiseExpr, ExprNode, F64, Graph, NodeId, Op, TensorType, UnaryOp};
use rustral_lowering::lower;
use rustral_lowering::wgsl::lower_wgsl;

fn ty(dims: &[&str]) -> TensorType {
    let dims: Vec<Dim> = dims.iter().map(|d| d.parse::<usize>().map_or_else(|_| Dim::sym(*d), Dim::Static)).collect();
    TensorType::new(DType::F32, dims)
}

/// The WGSL of the graph's only kernel.
fn shader(g: &Graph) -> String {
    let p = lower(g).unwrap();
    let a = lower_wgsl(&p, g.name()).unwrap();
    assert_eq!(a, lower_wgsl(&p, g.name()).unwrap(), "deterministic");
    assert_eq!(a.kernels.len(), 1);
    a.kernels[0].source.clone()
}

fn snapshot(name: &str, text: &str) {
    insta::with_settings!({
        snapshot_path => concat!(env!("CARGO_MANIFEST_DIR"), "/../snapshots/wgsl"),
        prepend_module_to_snapshot => false,
        omit_expression => true,
    }, {
        insta::assert_snapshot!(name, text);
    });
}

fn one(g: &mut Graph, op: Op, operands: &[NodeId], prov: &str) {
    let y = g.add(op, operands, prov).unwrap();
    g.set_output("y", y).unwrap();
}

#[test]
fn layer_norm() {
    let mut g = Graph::new("layer_norm");
    let x = g.input("x", ty(&["batch", "seq", "384"])).unwrap();
    let gamma = g.param("gamma", ty(&["384"]), "encoder.layer.0.output.LayerNorm").unwrap();
    let beta = g.param("beta", ty(&["384"]), "encoder.layer.0.output.LayerNorm").unwrap();
    one(&mut g, Op::LayerNorm { eps: F64(1e-12) }, &[x, gamma, beta], "encoder.layer.0.output.LayerNorm");
    snapshot("layer_norm", &shader(&g));
}

#[test]
fn cross_entropy() {
    let mut g = Graph::new("cross_entropy");
    let logits = g.input("logits", ty(&["batch", "seq", "50257"])).unwrap();
    let labels = g.input("labels", TensorType::new(DType::I64, ty(&["batch", "seq", "1"]).shape)).unwrap();
    one(&mut g, Op::CrossEntropy, &[logits, labels], "cross_entropy");
    snapshot("cross_entropy", &shader(&g));
}

#[test]
fn causal_masked_attention() {
    let mut g = Graph::new("attention");
    let q = g.input("q", ty(&["batch", "12", "seq", "32"])).unwrap();
    let k = g.input("k", ty(&["batch", "12", "seq", "32"])).unwrap();
    let v = g.input("v", ty(&["batch", "12", "seq", "32"])).unwrap();
    let mask = g.input("mask", ty(&["batch", "1", "1", "seq"])).unwrap();
    let scale = F64(1.0 / 32f64.sqrt());
    one(&mut g, Op::Attention { scale, causal: true }, &[q, k, v, mask], "h.0.attn");
    snapshot("attention", &shader(&g));
}

#[test]
fn fused_elementwise_with_broadcast_and_f16_result() {
    let mut g = Graph::new("fused");
    let x = g.input("x", ty(&["batch", "8"])).unwrap();
    let b = g.param("bias", ty(&["8"]), "mlp.fc").unwrap();
    let body = ElementwiseExpr {
        nodes: vec![
            ExprNode::Arg(0),
            ExprNode::Arg(1),
            ExprNode::Binary(BinaryOp::Add, 0, 1),
            ExprNode::Unary(UnaryOp::Tanh, 2),
            ExprNode::Const { value: F64(0.5), dtype: DType::F32 },
            ExprNode::Binary(BinaryOp::Mul, 3, 4),
            ExprNode::Cast(DType::F16, 5),
        ],
    };
    one(&mut g, Op::FusedElementwise { body }, &[x, b], "mlp.act");
    snapshot("fused_elementwise", &shader(&g));
}
