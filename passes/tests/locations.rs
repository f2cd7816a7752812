//! Source locations through the passes, and the contracts fused nodes record: a fused node
//! names every model line of the primitives it replaced, and its contract computes what the
//! fused node computes.

mod common;
use common::{compile, feeds};
use rustral_frontend::{DType, Dim, Init, TraceOptions, Traced, trace};
use rustral_ir::{Graph, NodeId, loc_summary};
use rustral_passes::{OptLevel, PassManager};
use rustral_runtime::reference::evaluate;
use std::collections::BTreeSet;

/// A hand-written LayerNorm and a tanh GELU, one op a line, and the lines they are on.
fn model() -> (Traced, Vec<u32>, Vec<u32>) {
    let mut ln_lines = Vec::new();
    let mut gelu_lines = Vec::new();
    let traced = trace(TraceOptions::default(), |ctx| {
        let x = ctx.input("x", &[Dim::sym("batch"), Dim::fixed(8)], DType::F32)?;
        let w = ctx.param("w", &[Dim::fixed(8)], Init::Ones)?;
        let b = ctx.param("b", &[Dim::fixed(8)], Init::Zeros)?;
        ln_lines.push(line!() + 1);
        let m = x.mean(&[-1], true)?;
        ln_lines.push(line!() + 1);
        let d = x.sub(&m)?;
        ln_lines.push(line!() + 1);
        let v = d.square()?.mean(&[-1], true)?;
        ln_lines.push(line!() + 1);
        let r = v.add_scalar(1e-5)?.rsqrt()?;
        ln_lines.push(line!() + 1);
        let y = d.mul(&r)?.mul(&w)?.add(&b)?;
        gelu_lines.push(line!() + 1);
        let c = y.mul(&y)?.mul(&y)?.mul_scalar(0.044715)?.add(&y)?;
        gelu_lines.push(line!() + 1);
        let t = c.mul_scalar((2.0f64 / std::f64::consts::PI).sqrt())?.tanh()?.add_scalar(1.0)?;
        gelu_lines.push(line!() + 1);
        let g = y.mul(&t)?.mul_scalar(0.5)?;
        Ok(vec![g])
    })
    .unwrap();
    (traced, ln_lines, gelu_lines)
}

fn lines_of(g: &Graph, op: &str) -> Vec<BTreeSet<u32>> {
    g.node_ids()
        .filter_map(|id| g.node(id))
        .filter(|n| n.op.name() == op)
        .map(|n| {
            assert!(n.loc.iter().all(|l| l.file.ends_with("locations.rs")), "{op}: {:?}", n.loc);
            n.loc.iter().map(|l| l.line).collect()
        })
        .collect()
}

#[test]
fn traced_nodes_name_their_line_and_fused_nodes_every_line_they_replaced() {
    let (t, ln_lines, gelu_lines) = model();
    let first = t.graph.node_ids().map(|id| t.graph.node(id).unwrap()).find(|n| n.op.name() == "reduce_mean").unwrap();
    assert_eq!(loc_summary(&first.loc, 9), format!("{}:{}", file!(), ln_lines[0]), "a traced node names its line");

    let (opt, _) = compile(&t.graph, OptLevel::O2);
    let ln = lines_of(&opt, "layer_norm");
    assert_eq!(ln, [ln_lines.iter().copied().collect::<BTreeSet<u32>>()], "\n{}", rustral_ir::print(&opt));
    let gelu = lines_of(&opt, "gelu");
    assert_eq!(gelu, [gelu_lines.iter().copied().collect::<BTreeSet<u32>>()], "\n{}", rustral_ir::print(&opt));

    // The text form shows them and reads them back.
    let text = rustral_ir::print(&opt);
    assert!(text.contains(&format!("loc(\"{}\":{}:", file!(), ln_lines[0])), "{text}");
    let back = rustral_ir::parse(&text).unwrap();
    assert_eq!(rustral_ir::print(&back), text);
    assert_eq!(lines_of(&back, "layer_norm"), ln);
}

#[test]
fn every_fused_node_records_a_contract_that_computes_what_it_does() {
    let (t, _, _) = model();
    let mut opt = t.graph.clone();
    let compiled = PassManager::new(OptLevel::O2).record_contracts(true).run(&mut opt).unwrap();
    let fused: Vec<NodeId> = opt.node_ids().filter(|&id| opt.node(id).unwrap().op.is_fused()).collect();
    assert!(fused.len() >= 2, "{}", rustral_ir::print(&opt));
    let f = feeds(&t.graph, None, &[("batch", 3)], 1);
    for id in fused {
        let c = compiled
            .contracts
            .get(&id)
            .unwrap_or_else(|| panic!("no contract for {}", opt.node(id).unwrap().op.name()));
        assert_eq!(c.op, opt.node(id).unwrap().op.name());
        assert!(!c.rules.is_empty() && c.pass.starts_with("fuse-"), "{c:?}");
        assert!(
            c.replaced.node_ids().all(|n| !c.replaced.node(n).unwrap().op.is_fused()),
            "{}'s contract holds fused ops, not the primitives the model wrote:\n{}",
            c.op,
            rustral_ir::print(&c.replaced)
        );
        // The fused node's operands and result on the reference interpreter...
        let mut probe = opt.clone();
        probe.outputs_mut().clear();
        probe.set_output("fused", id).unwrap();
        let operands = opt.operands(id);
        for (k, &o) in operands.iter().enumerate() {
            probe.set_output(&format!("arg{k}"), o).unwrap();
        }
        let values = evaluate(&probe, &f).unwrap();
        // ... and the replaced primitives on the same operands give the same values.
        let args = values[1..].iter().cloned().collect();
        let want = evaluate(&c.replaced, &args).unwrap();
        let (got, want) = (values[0].1.to_vec(), want[0].1.to_vec());
        assert_eq!(got.len(), want.len());
        for (a, b) in got.iter().zip(&want) {
            assert!((a - b).abs() <= 1e-5 * (1.0 + b.abs()), "{}: {a} vs {b}", c.op);
        }
    }
}

#[test]
fn contracts_are_off_unless_asked_for() {
    let (t, _, _) = model();
    let mut opt = t.graph.clone();
    assert!(PassManager::new(OptLevel::O2).run(&mut opt).unwrap().contracts.is_empty());
}
