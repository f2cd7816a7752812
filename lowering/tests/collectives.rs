//! Program::schedule_collectives: buckets in schedule order, closed at the size asked for,
//! each started after the kernel computing its last buffer; outputs sharing a buffer summed
//! once; bad requests named.

use rustral_ir::{DType, Graph, Op, Shape, TensorType, UnaryOp};
use rustral_lowering::lower;

/// `a = tanh(x)` (4 KiB of f32), `b = exp(a)`, `c = neg(b)`; outputs a, b, c, and `c2` = c.
fn chain() -> Graph {
    let mut g = Graph::new("chain");
    let ty = TensorType::new(DType::F32, Shape::of(&[1024]));
    let x = g.input("x", ty.clone()).unwrap();
    let a = g.add(Op::Unary(UnaryOp::Tanh), &[x], "a").unwrap();
    let b = g.add(Op::Unary(UnaryOp::Exp), &[a], "b").unwrap();
    let c = g.add(Op::Unary(UnaryOp::Neg), &[b], "c").unwrap();
    let n = g.input("n", TensorType::new(DType::I64, Shape::of(&[2]))).unwrap();
    for (name, id) in [("c", c), ("a", a), ("b", b), ("c2", c), ("n", n)] {
        g.set_output(name, id).unwrap();
    }
    g
}

fn names(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

#[test]
fn buckets_follow_the_schedule_and_close_at_their_size() {
    let mut p = lower(&chain()).unwrap();
    // 4 KiB buckets: one output each, in the order the kernels compute them.
    p.schedule_collectives(&names(&["c", "a", "b", "c2"]), 4096).unwrap();
    let got: Vec<(&str, Vec<String>, Option<usize>, usize)> =
        p.collectives.iter().map(|c| (c.name.as_str(), c.outputs.clone(), c.after, c.buffers.len())).collect();
    assert_eq!(
        got,
        vec![
            ("all_reduce.0", names(&["a"]), Some(0), 1),
            ("all_reduce.1", names(&["b"]), Some(1), 1),
            // c and c2 are one buffer: summed once.
            ("all_reduce.2", names(&["c", "c2"]), Some(2), 1),
        ]
    );
    // 8 KiB: a and b together, started after b's kernel.
    p.schedule_collectives(&names(&["c", "a", "b"]), 8192).unwrap();
    let got: Vec<(Vec<String>, Option<usize>, usize)> =
        p.collectives.iter().map(|c| (c.outputs.clone(), c.after, c.bytes)).collect();
    assert_eq!(got, vec![(names(&["a", "b"]), Some(1), 8192), (names(&["c"]), Some(2), 4096)]);
}

#[test]
fn bad_requests_name_the_output() {
    let mut p = lower(&chain()).unwrap();
    let err = |p: &mut rustral_lowering::Program, v: &[&str]| {
        p.schedule_collectives(&names(v), 4096).unwrap_err().to_string()
    };
    assert_eq!(err(&mut p, &["a", "zz"]), "cannot all-reduce `zz`: no such output");
    assert_eq!(err(&mut p, &["n"]), "cannot all-reduce `n`: only float outputs are summed");
    assert_eq!(err(&mut p, &["a", "a"]), "cannot all-reduce `a`: it is asked for twice");
}
