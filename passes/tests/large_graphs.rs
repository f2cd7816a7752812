//! Graphs far larger than a model's layer: one module of thousands of LayerNorms (a fusion
//! region over the e-graph's window) and one elementwise chain of a thousand ops still fuse,
//! in bounded pieces, and compute what the unoptimised graph does. (Compile time against size
//! is the bench's: `rustral-bench scaling`.)

mod common;
use common::{assert_same_outputs, compile, feeds};
use rustral_frontend::nn::{LayerNorm, Module};
use rustral_frontend::{DType, Dim, TraceOptions, trace};
use rustral_ir::{ExprNode, Graph, Op};
use rustral_passes::fuse::MAX_REGION_NODES;
use rustral_passes::{MAX_GROUP_OPS, OptLevel};

/// `n` LayerNorms of width 8 one after another, all in the module `norms` (one region).
fn layer_norms(n: usize) -> Graph {
    trace(TraceOptions::default(), |ctx| {
        let mut h = ctx.input("x", &[Dim::fixed(2), Dim::fixed(8)], DType::F32)?;
        ctx.scope("norms", |ctx| {
            for i in 0..n {
                h = LayerNorm::new(&format!("ln_{i}"), 8, 1e-5).forward(ctx, &h)?;
            }
            Ok::<(), rustral_frontend::Error>(())
        })?;
        Ok(vec![h])
    })
    .unwrap()
    .graph
}

#[test]
fn a_region_over_the_window_is_split_and_every_layer_norm_fuses() {
    // 2,500 LayerNorms: 30,000 nodes in one region, far over one e-graph's node limit (unsplit,
    // saturation stopped at the limit and fused none). A LayerNorm is 12 nodes and the window
    // is not a multiple of 12, so the first cut splits some; the second, offset, fuses them.
    let g = layer_norms(2_500);
    assert!(g.len() > 20 * MAX_REGION_NODES, "{} nodes", g.len());
    let (fused, c) = compile(&g, OptLevel::O2);
    assert_eq!(c.stats.fused["layer_norm"], 2_500, "{:?}", c.stats.fused);
    let ln = c.stats.passes.iter().find(|p| p.pass == "fuse-layer-norm").unwrap();
    let egg = ln.egg.as_ref().unwrap();
    assert_eq!(egg.split.len(), 1, "{:?}", egg.split);
    assert!(egg.split[0].starts_with("region `norms`: "), "{}", egg.split[0]);
    assert!(egg.max_egraph_nodes < rustral_passes::fuse::Limits::default().nodes, "{egg:?}");
    // Unit-variance rows in, so each LayerNorm keeps them near unit variance: errors do not grow.
    let f = feeds(&g, None, &[], 1);
    assert_same_outputs(&g, &fused, &f, 1e-4, 1e-4);
}

#[test]
fn a_long_elementwise_chain_becomes_bounded_kernels() {
    let steps: usize = 1_000;
    let g = trace(TraceOptions::default(), |ctx| {
        let x = ctx.input("x", &[Dim::fixed(3), Dim::fixed(5)], DType::F32)?;
        let mut h = x.clone();
        for i in 0..steps {
            h = match i % 3 {
                0 => h.mul_scalar(0.5)?,
                1 => h.tanh()?,
                _ => h.add(&x)?,
            };
        }
        Ok(vec![h])
    })
    .unwrap()
    .graph;
    let (fused, c) = compile(&g, OptLevel::O2);
    let bodies: Vec<usize> = fused
        .node_ids()
        .filter_map(|id| match &fused.node(id).unwrap().op {
            Op::FusedElementwise { body } => {
                Some(body.nodes.iter().filter(|n| !matches!(n, ExprNode::Arg(_) | ExprNode::Const { .. })).count())
            }
            _ => None,
        })
        .collect();
    assert_eq!(bodies.len(), steps.div_ceil(MAX_GROUP_OPS), "{bodies:?} {:?}", c.stats.fused);
    assert!(bodies.iter().all(|&ops| ops <= MAX_GROUP_OPS), "{bodies:?}");
    assert_eq!(bodies.iter().sum::<usize>(), steps, "every op is in one kernel");
    let f = feeds(&g, None, &[], 1);
    assert_same_outputs(&g, &fused, &f, 1e-5, 1e-5);
}
