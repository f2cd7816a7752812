//! The memory plan: no two intermediates that are live at once share a slot, and reuse
//! makes the planned peak smaller than giving every intermediate its own storage.

use rustral_ir::{BinaryOp, DType, Dim, Graph, Op, TensorType, UnaryOp};
use rustral_lowering::{BufferKind, lower};
use std::collections::BTreeMap;

/// A chain of 10 elementwise ops on `[batch, 64]` plus a residual that stays live throughout.
fn chain() -> Graph {
    let mut g = Graph::new("chain");
    let x = g.input("x", TensorType::new(DType::F32, vec![Dim::sym("batch"), 64.into()])).unwrap();
    let mut h = x;
    for _ in 0..10 {
        h = g.add(Op::Unary(UnaryOp::Tanh), &[h], "layer").unwrap();
    }
    let y = g.add(Op::Binary(BinaryOp::Add), &[h, x], "out").unwrap();
    g.set_output("y", y).unwrap();
    g
}

#[test]
fn live_intermediates_never_share_a_slot() {
    let p = lower(&chain()).unwrap();
    let mut produced_at = BTreeMap::new();
    let mut last_use = BTreeMap::new();
    for (k, kernel) in p.kernels.iter().enumerate() {
        produced_at.insert(kernel.output, k);
        for &i in &kernel.inputs {
            last_use.insert(i, k);
        }
    }
    for (_, b) in &p.outputs {
        last_use.insert(*b, usize::MAX);
    }
    let live = |b: usize, k: usize| produced_at[&b] <= k && last_use.get(&b).copied().unwrap_or(produced_at[&b]) >= k;
    for k in 0..p.kernels.len() {
        let mut used: BTreeMap<usize, usize> = BTreeMap::new();
        for (&b, &slot) in &p.plan.slot_of {
            if live(b, k) {
                assert!(used.insert(slot, b).is_none(), "slot {slot} holds two live buffers at kernel {k}");
            }
        }
    }
    for (b, buf) in p.buffers.iter().enumerate() {
        if buf.kind == BufferKind::Intermediate {
            assert!(p.plan.slot_of.contains_key(&b), "intermediate {b} has no slot");
        }
    }
}

#[test]
fn reuse_shrinks_the_peak() {
    let p = lower(&chain()).unwrap();
    assert_eq!(p.plan.slots, 2, "a chain needs two slots: the value being read and the one being written");
    let report = p.plan.report(&p.buffers, &BTreeMap::from([("batch".to_string(), 8)]));
    assert_eq!(report.unplanned_bytes, 11 * 8 * 64 * 4);
    assert_eq!(report.planned_peak_bytes, 2 * 8 * 64 * 4);
}
