//! The verifier and the typed builder: each invariant broken once, with the error it gives.

use rustral_ir::{
    BinaryOp, DType, Dim, F64, Graph, IrError, Literal, Op, ReduceOp, Shape, TensorType, UnaryOp, parse, samples,
    verify,
};

fn f32_ty(dims: Vec<Dim>) -> TensorType {
    TensorType::new(DType::F32, dims)
}

#[test]
fn samples_verify() {
    for g in [samples::mlp(), samples::layer_norm_primitives(), samples::attention_block()] {
        verify(&g.expect("builds")).expect("verifies");
    }
}

#[test]
fn builder_rejects_broadcast_mismatch_naming_op_shapes_and_module() {
    let mut g = Graph::new("g");
    let a = g.input("a", f32_ty(vec![Dim::sym("batch"), 8.into()])).unwrap();
    let b = g.input("b", f32_ty(vec![4.into()])).unwrap();
    let err = g.add(Op::Binary(BinaryOp::Add), &[a, b], "encoder.layer.1.output").expect_err("8 vs 4");
    assert_eq!(
        err.to_string(),
        "type error in `add` at encoder.layer.1.output (operands: f32[batch, 8], f32[4]): \
         cannot broadcast [batch, 8] with [4]: dims 8 and 4 differ"
    );
}

#[test]
fn symbolic_dims_are_checked_symbolically() {
    let mut g = Graph::new("g");
    let a = g.input("a", f32_ty(vec![Dim::sym("batch"), Dim::sym("seq")])).unwrap();
    let b = g.input("b", f32_ty(vec![Dim::sym("seq"), Dim::sym("batch")])).unwrap();
    let c = g.input("c", f32_ty(vec![Dim::sym("batch"), 1.into()])).unwrap();
    // batch vs seq cannot be proven equal.
    assert!(g.add(Op::Binary(BinaryOp::Mul), &[a, b], "").is_err());
    // A 1 broadcasts against a symbol.
    let ac = g.add(Op::Binary(BinaryOp::Mul), &[a, c], "").unwrap();
    assert_eq!(g.node(ac).unwrap().ty.shape, Shape(vec![Dim::sym("batch"), Dim::sym("seq")]));
    // Reshape must keep the symbolic element count: [batch, seq] -> [seq, batch] is fine,
    // [batch, seq] -> [batch, 2] is not.
    assert!(g.add(Op::Reshape { shape: Shape(vec![Dim::sym("seq"), Dim::sym("batch")]) }, &[a], "").is_ok());
    assert!(g.add(Op::Reshape { shape: Shape(vec![Dim::sym("batch"), 2.into()]) }, &[a], "").is_err());
    // Matmul contracts seq with seq.
    let ab = g.add(Op::MatMul, &[a, b], "").unwrap();
    assert_eq!(g.node(ab).unwrap().ty.shape, Shape(vec![Dim::sym("batch"), Dim::sym("batch")]));
}

#[test]
fn declared_type_that_differs_from_inferred_is_reported() {
    let src = "graph \"g\" {\n  %0: f32[2, 3] = input \"x\"\n  %1: f32[2] = reduce_sum %0 {axes=[1], keepdim=true}  @head.pool\n}\n";
    let g = parse(src).unwrap();
    let err = verify(&g).expect_err("keepdim gives [2, 1]");
    assert_eq!(err.to_string(), "%1 (reduce_sum) at head.pool: declared type f32[2] but the op gives f32[2, 1]");
}

#[test]
fn verifier_collects_every_error() {
    let src = "graph \"g\" {
  %0: f32[2] = input \"x\"
  %1: f32[2] = input \"x\"
  %2: i32[2] = exp %0
  %3: f32[2] = softmax %0 {axis=4}
  %4: f32[2] = layer_norm %0, %0 {eps=1e-5}
  %5: f32[2] = add %0
}
";
    let err = verify(&parse(src).unwrap()).expect_err("five errors");
    let lines: Vec<String> = err.0.iter().map(|e| e.to_string()).collect();
    assert_eq!(
        lines,
        [
            "%1 (input): name \"x\" is already used by %0",
            "%2 (exp): declared type i32[2] but the op gives f32[2]",
            "%3 (softmax): axis 4 out of range for rank 1 (operands: f32[2])",
            "%4 (layer_norm): layer_norm takes x, or x, gamma and beta (operands: f32[2], f32[2])",
            "%5 (add): `add` takes 2 operand(s), found 1 (operands: f32[2])",
        ]
    );
}

#[test]
fn cycles_and_missing_operands_are_reported() {
    let mut g = Graph::new("g");
    let x = g.input("x", f32_ty(vec![2.into()])).unwrap();
    let a = g.add(Op::Unary(UnaryOp::Neg), &[x], "m.a").unwrap();
    let b = g.add(Op::Unary(UnaryOp::Neg), &[a], "m.b").unwrap();
    g.replace_all_uses(x, b); // now a uses b and b uses a
    let err = verify(&g).expect_err("cycle");
    assert!(err.to_string().contains("is on a cycle"), "{err}");

    let mut g = Graph::new("g");
    let x = g.input("x", f32_ty(vec![2.into()])).unwrap();
    let y = g.input("y", f32_ty(vec![2.into()])).unwrap();
    let s = g.add(Op::Binary(BinaryOp::Sub), &[x, y], "m.sub").unwrap();
    g.set_output("out", s).unwrap();
    g.remove(x);
    let err = verify(&g).expect_err("operand 0 is gone");
    assert_eq!(err.to_string(), "%1 (sub) at m.sub: operand positions [1] are not 0..1");
}

#[test]
fn source_declarations_are_checked() {
    let mut g = Graph::new("g");
    let dense = Op::Constant { value: Literal::Dense(vec![F64(1.0), F64(2.0)]) };
    let err = g.declare(dense.clone(), f32_ty(vec![3.into()]), "c").expect_err("2 values for 3 elements");
    assert!(err.to_string().contains("2 values for shape [3] of 3 elements"), "{err}");
    assert!(g.declare(dense, f32_ty(vec![Dim::sym("n")]), "c").is_err(), "dense needs a static shape");
    assert!(g.input("x", f32_ty(vec![Dim::sym("not ident")])).is_err());
    assert!(g.declare(Op::Iota { axis: 1 }, f32_ty(vec![3.into()]), "").is_err());
    let x = g.input("x", f32_ty(vec![3.into()])).unwrap();
    assert!(matches!(g.add(Op::Input { name: "y".into() }, &[], ""), Err(IrError::Type(_))));
    assert!(g.set_output("o", x).is_ok());
    assert!(matches!(g.set_output("o", x), Err(IrError::DuplicateName { .. })));
}

#[test]
fn op_typing_rules() {
    let mut g = Graph::new("g");
    let x = g.input("x", f32_ty(vec![Dim::sym("b"), 4.into(), 6.into()])).unwrap();
    let i = g.input("i", TensorType::new(DType::I64, vec![Dim::sym("b"), 5.into()])).unwrap();
    let ty = |g: &Graph, id| g.node(id).unwrap().ty.to_string();
    let r = g.add(Op::Reduce { op: ReduceOp::Sum, axes: vec![0, 2], keepdim: false }, &[x], "").unwrap();
    assert_eq!(ty(&g, r), "f32[4]");
    assert!(g.add(Op::Reduce { op: ReduceOp::Sum, axes: vec![2, 0], keepdim: false }, &[x], "").is_err());
    assert!(g.add(Op::Reduce { op: ReduceOp::Mean, axes: vec![1], keepdim: false }, &[i], "").is_err(), "mean of ints");
    let p = g.add(Op::Permute { perm: vec![2, 0, 1] }, &[x], "").unwrap();
    assert_eq!(ty(&g, p), "f32[6, b, 4]");
    assert!(g.add(Op::Permute { perm: vec![0, 0, 1] }, &[x], "").is_err());
    let table = g.param("emb", f32_ty(vec![100.into(), 6.into()]), "").unwrap();
    let e = g.add(Op::Gather { axis: 0 }, &[table, i], "").unwrap();
    assert_eq!(ty(&g, e), "f32[b, 5, 6]");
    assert!(g.add(Op::Gather { axis: 0 }, &[table, x], "").is_err(), "float indices");
    let s = g.add(Op::Slice { axis: 0, start: 0, end: Dim::sym("seq") }, &[table], "").unwrap();
    assert_eq!(ty(&g, s), "f32[seq, 6]");
    assert!(g.add(Op::Slice { axis: 0, start: 1, end: Dim::sym("seq") }, &[table], "").is_err());
    assert!(g.add(Op::Slice { axis: 1, start: 2, end: Dim::Static(7) }, &[table], "").is_err());
    let c = g.add(Op::Binary(BinaryOp::Lt), &[x, x], "").unwrap();
    assert_eq!(ty(&g, c), "bool[b, 4, 6]");
    assert!(g.add(Op::Binary(BinaryOp::Add), &[c, c], "").is_err(), "no arithmetic on bool");
    assert!(g.add(Op::Binary(BinaryOp::Add), &[x, i], "").is_err(), "no implicit promotion");
    let w = g.add(Op::Where, &[c, x, x], "").unwrap();
    assert_eq!(ty(&g, w), "f32[b, 4, 6]");
    let q = g.input("q", f32_ty(vec![Dim::sym("b"), 2.into(), 7.into(), 8.into()])).unwrap();
    let k = g.input("k", f32_ty(vec![Dim::sym("b"), 2.into(), 9.into(), 8.into()])).unwrap();
    let v = g.input("v", f32_ty(vec![Dim::sym("b"), 2.into(), 9.into(), 3.into()])).unwrap();
    let m = g.input("m", f32_ty(vec![Dim::sym("b"), 1.into(), 1.into(), 9.into()])).unwrap();
    let a = g.add(Op::Attention { scale: F64(0.25), causal: true }, &[q, k, v, m], "").unwrap();
    assert_eq!(ty(&g, a), "f32[b, 2, 7, 3]");
    assert!(g.add(Op::Attention { scale: F64(0.25), causal: false }, &[q, v, k], "").is_err());
    let t = g.input("t", TensorType::new(DType::I32, vec![Dim::sym("b"), 4.into(), 1.into()])).unwrap();
    let ce = g.add(Op::CrossEntropy, &[x, t], "").unwrap();
    assert_eq!(ty(&g, ce), "f32[b, 4]");
    let err = g.add(Op::CrossEntropy, &[x, i], "").unwrap_err().to_string();
    assert!(
        err.contains("targets must have shape [b, 4, 1] (one class per row of logits [b, 4, 6]), found [b, 5]"),
        "{err}"
    );
    assert!(g.add(Op::CrossEntropy, &[x, x], "").is_err(), "float targets");
    assert!(g.add(Op::CrossEntropy, &[t, t], "").is_err(), "integer logits");
}
