//! Symbolic dims bound at run time, and the errors a bad feed gives.

mod common;
use common::{graph, run, values};
use rustral_ir::{DType, samples};
use rustral_runtime::HostTensor;
use rustral_runtime::reference::EvalError;

fn f32(shape: &[usize], seed: u64) -> HostTensor {
    HostTensor::new(DType::F32, shape, values(seed, shape.iter().product())).unwrap()
}

fn mlp_feeds(x: HostTensor) -> Vec<(&'static str, HostTensor)> {
    vec![
        ("x", x),
        ("fc1.weight", f32(&[8, 16], 1)),
        ("fc1.bias", f32(&[16], 2)),
        ("fc2.weight", f32(&[16, 4], 3)),
        ("fc2.bias", f32(&[4], 4)),
    ]
}

/// One graph, any batch: each row of a batch-3 run equals a batch-1 run on that row alone.
#[test]
fn one_graph_serves_every_batch_size() {
    let g = samples::mlp().unwrap();
    let x = f32(&[3, 8], 9);
    let batched = run(&g, &mlp_feeds(x.clone())).unwrap().remove(0);
    assert_eq!(batched.shape(), &[3, 4]);
    for row in 0..3 {
        let xr = HostTensor::new(DType::F32, &[1, 8], x.to_vec()[row * 8..row * 8 + 8].to_vec()).unwrap();
        let single = run(&g, &mlp_feeds(xr)).unwrap().remove(0);
        assert_eq!(single.to_vec(), batched.to_vec()[row * 4..row * 4 + 4]);
    }
    let empty = run(&g, &mlp_feeds(f32(&[0, 8], 1))).unwrap().remove(0);
    assert_eq!(empty.shape(), &[0, 4], "a zero batch is a valid binding");
}

#[test]
fn symbols_bind_across_feeds_and_shape_ops() {
    let g = graph(
        "graph \"s\" {
  %0: f32[batch, seq] = input \"x\"
  %1: f32[seq, 4] = input \"y\"
  %2: f32[batch, 4] = matmul %0, %1
  %3: f32[4, batch] = permute %2 {perm=[1, 0]}
  %4: f32[2, 2, batch] = reshape %3 {shape=[2, 2, batch]}
  %5: f32[seq] = iota {axis=0}
  output \"z\" = %4
  output \"pos\" = %5
}
",
    );
    let out = run(&g, &[("x", f32(&[5, 3], 1)), ("y", f32(&[3, 4], 2))]).unwrap();
    assert_eq!(out[0].shape(), &[2, 2, 5]);
    assert_eq!(out[1].to_vec(), [0.0, 1.0, 2.0]);
    let err = run(&g, &[("x", f32(&[5, 3], 1)), ("y", f32(&[2, 4], 2))]).unwrap_err();
    assert!(matches!(&err, EvalError::SymbolConflict { sym, first: 3, second: 2, .. } if sym == "seq"), "{err}");
}

#[test]
fn bad_feeds_are_named() {
    let g = samples::mlp().unwrap();
    let mut feeds = mlp_feeds(f32(&[2, 8], 1));
    feeds.retain(|(n, _)| *n != "fc2.bias");
    assert_eq!(run(&g, &feeds).unwrap_err().to_string(), "no value fed for param \"fc2.bias\"");

    let feeds = mlp_feeds(f32(&[2, 7], 1));
    assert_eq!(
        run(&g, &feeds).unwrap_err().to_string(),
        "value fed for \"x\" is f32[2, 7], but the graph declares f32[batch, 8]"
    );

    let mut feeds = mlp_feeds(f32(&[2, 8], 1));
    feeds.push(("fc3.weight", f32(&[1], 1)));
    let err = run(&g, &feeds).unwrap_err().to_string();
    assert!(err.starts_with("fed value \"fc3.weight\" is not an input or param of the graph"), "{err}");

    let mut feeds = mlp_feeds(f32(&[2, 8], 1));
    feeds[0].1 = HostTensor::new(DType::F64, &[2, 8], vec![0.0; 16]).unwrap();
    assert!(matches!(run(&g, &feeds), Err(EvalError::FeedMismatch { .. })));
}

#[test]
fn symbolic_slice_end_is_checked_when_bound() {
    let g = graph(
        "graph \"p\" {
  %0: f32[8, 2] = param \"pos\"  @embeddings.position
  %1: f32[batch, seq] = input \"x\"
  %2: f32[seq, 2] = slice %0 {axis=0, start=0, end=seq}  @embeddings.position
  output \"y\" = %2
}
",
    );
    let ok = run(&g, &[("pos", f32(&[8, 2], 1)), ("x", f32(&[1, 3], 2))]).unwrap();
    assert_eq!(ok[0].to_vec(), f32(&[8, 2], 1).to_vec()[..6]);
    let err = run(&g, &[("pos", f32(&[8, 2], 1)), ("x", f32(&[1, 9], 2))]).unwrap_err();
    assert_eq!(err.to_string(), "%2 (slice) at embeddings.position: slice 0..9 is past the end of axis 0 (size 8)");
}

#[test]
fn unverified_graph_is_rejected_before_running() {
    let g = rustral_ir::parse("graph \"g\" {\n  %0: f32[2] = input \"x\"\n  %1: f32[3] = exp %0\n}\n").unwrap();
    let err = run(&g, &[("x", f32(&[2], 1))]).unwrap_err();
    assert!(matches!(err, EvalError::Verify(_)), "{err}");
}
