//! DOT pictures: every node and edge appears, fused ops are drawn distinctly.

use rustral_ir::{parse_verified, samples, to_dot};

#[test]
fn dot_has_every_node_and_edge_and_marks_fused_ops() {
    let g = samples::attention_block().unwrap();
    let dot = to_dot(&g);
    assert!(dot.starts_with("digraph \"attention\" {"));
    let nodes =
        dot.lines().filter(|l| l.trim_start().starts_with('n') && l.contains("[label=") && !l.contains("->")).count();
    assert_eq!(nodes, g.len());
    let edges = dot.lines().filter(|l| l.contains(" -> n")).count();
    let operand_count: usize = g.node_ids().map(|id| g.operands(id).len()).sum();
    assert_eq!(edges, operand_count);
    assert!(!dot.contains("#ffb347"), "no fused ops in a primitive graph");

    let fused = parse_verified(
        "graph \"f\" {\n  %0: f32[2, 4] = input \"x\"\n  %1: f32[2, 4] = softmax %0 {axis=1}  @head\n  output \"y\" = %1\n}\n",
    )
    .unwrap();
    let dot = to_dot(&fused);
    let softmax_line = dot.lines().find(|l| l.contains("softmax")).expect("softmax node");
    assert!(softmax_line.contains("#ffb347") && softmax_line.contains("@head"), "{softmax_line}");
    assert_eq!(dot, to_dot(&fused), "deterministic");
}
