//! Unit tests of the WGSL lowering that need no adapter: every shader validates (checked by
//! `lower_wgsl` itself), counts evaluate, output is deterministic.

use super::*;
use rustral_ir::{Graph, TensorType};

fn sym(s: &str) -> Dim {
    Dim::sym(s)
}

#[test]
fn counts_are_products_of_ceil_divisions() {
    let c = Count::ceil_div(&[sym("batch"), Dim::Static(100)], 64).times(Count::elements(&[sym("seq")]));
    let b: BTreeMap<String, usize> = [("batch".to_string(), 3), ("seq".to_string(), 5)].into();
    assert_eq!(c.eval(&b).unwrap(), 300u64.div_ceil(64) * 5);
    assert!(c.eval(&BTreeMap::new()).unwrap_err().contains("batch"));
}

#[test]
fn a_small_graph_lowers_to_valid_deterministic_wgsl() {
    let mut g = Graph::new("g");
    let x = g.input("x", TensorType::new(DType::F32, vec![sym("batch"), Dim::Static(8)])).unwrap();
    let w = g.param("w", TensorType::new(DType::F32, vec![Dim::Static(8), Dim::Static(4)]), "lin").unwrap();
    let y = g.add(Op::MatMul, &[x, w], "lin").unwrap();
    let z = g.add(Op::Softmax { axis: 1 }, &[y], "head").unwrap();
    g.set_output("z", z).unwrap();
    let p = crate::lower(&g).unwrap();
    let a = lower_wgsl(&p, "g").unwrap();
    let b = lower_wgsl(&p, "g").unwrap();
    assert_eq!(a, b);
    assert_eq!(a.dims, vec!["batch".to_string()]);
    assert_eq!(a.kernels.len(), 2);
    assert!(a.kernels.iter().all(|k| k.phase == Phase::Run));
    assert!(a.kernels[1].source.contains("// node: \"head\""));
}
