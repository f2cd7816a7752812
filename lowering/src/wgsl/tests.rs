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

/// Every finite f32 prints as a literal whose decimal value is exactly that f32 (as Tint
/// demands): the extremes, subnormals, signed zero and values whose shortest f32 spelling
/// is inexact.
#[test]
fn float_literals_are_exact() {
    let extremes = [
        f32::MAX,
        f32::MIN,
        f32::MIN_POSITIVE,
        f32::from_bits(1),
        -f32::from_bits(1),
        f32::EPSILON,
        -0.0,
        0.0,
        0.1,
        16777217.0,
        1e-7,
        -3.4028235e38,
    ];
    let seeded = (0..2000u32).map(|i| f32::from_bits(i.wrapping_mul(2654435761) & 0xff7f_ffff | (i & 1) << 31));
    for x in extremes.into_iter().chain(seeded).filter(|x| x.is_finite()) {
        let s = helpers::float_text(x);
        let digits = s.trim_start_matches('(').trim_end_matches(')');
        let v: f64 = digits.parse().unwrap_or_else(|e| panic!("{s}: {e}"));
        assert_eq!(v, f64::from(x), "{s} is not exactly {x:e}");
        assert_eq!(v.to_bits() >> 63 == 1, x.is_sign_negative(), "{s}: sign");
        assert!(digits.contains(['.', 'e']), "{s} would read as an integer");
        naga::front::wgsl::parse_str(&format!("const c: f32 = {s};")).unwrap_or_else(|e| panic!("{s}: {e}"));
    }
}
