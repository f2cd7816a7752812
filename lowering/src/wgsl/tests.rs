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

/// A token embedding of `vocab` rows of 768 (GPT-2-small's: 50257 rows, 154 MB f32), gathered
/// by token id.
fn embedding(vocab: usize) -> Program {
    let mut g = Graph::new("embed");
    let ids = g.input("ids", TensorType::new(DType::I64, vec![sym("batch"), sym("seq")])).unwrap();
    let shape = vec![Dim::Static(vocab), Dim::Static(768)];
    let wte = g.param("wte", TensorType::new(DType::F32, shape), "wte").unwrap();
    let x = g.add(Op::Gather { axis: 0 }, &[wte, ids], "wte").unwrap();
    g.set_output("x", x).unwrap();
    crate::lower(&g).unwrap()
}

#[test]
fn a_tensor_larger_than_one_binding_is_bound_in_ranges() {
    let p = embedding(50257);
    let w = lower_wgsl(&p, "embed").unwrap();
    let gather = &w.kernels[0];
    let ranges: Vec<(&str, Option<u64>, Option<u64>)> =
        gather.bindings.iter().map(|b| (b.name.as_str(), b.offset, b.size)).collect();
    // 154389504 bytes: 128 MiB from 0, the rest from 128 MiB (a multiple of 256).
    assert_eq!(
        ranges,
        [
            ("table_0", Some(0), Some(134217728)),
            ("table_1", Some(134217728), Some(20171776)),
            ("indices", None, None),
            ("out", None, None),
            ("status", Some(0), Some(4)),
        ]
    );
    assert!(gather.source.contains("fn table_at(i: u32) -> f32 {\n    if (i < 33554432u) { return table_0[i]; }\n    return table_1[i - 33554432u];\n}"), "{}", gather.source);
    assert!(gather.source.contains("out[i] = table_at("), "{}", gather.source);
    // Chromium's profile binds 1 GiB: one binding.
    let chrome = lower_wgsl_for(&p, "embed", &Profile::resolve("chrome").unwrap()).unwrap();
    assert!(chrome.kernels[0].bindings[0].size.is_none());
}

#[test]
fn a_program_over_its_profile_names_the_buffer_the_limit_and_the_profile() {
    // Twice GPT-2-small's vocabulary: 309 MB, more than one buffer may hold.
    let e = lower_wgsl(&embedding(100514), "embed").unwrap_err().to_string();
    assert!(
        e.starts_with(
            "buffer 1 (wte, at \"wte\") needs 308779008 where the default WebGPU limits allow 268435456 (maxBufferSize;"
        ),
        "{e}"
    );
    let few = Profile {
        name: "tiny".into(),
        limits: Limits { max_storage_buffers_per_shader_stage: 2, ..Limits::default() },
    };
    let e = lower_wgsl_for(&embedding(50257), "embed", &few).unwrap_err().to_string();
    // gather binds wte, ids, out and its status word (an id past the table sets it); two
    // bindings are too few to split the table.
    assert!(e.starts_with("kernel k000_gather (gather at \"wte\") needs 4 where the tiny WebGPU limits allow 2 (maxStorageBuffersPerShaderStage;"), "{e}");
    let unaligned = Profile {
        name: "odd".into(),
        limits: Limits { min_storage_buffer_offset_alignment: 1 << 30, ..Limits::default() },
    };
    let e = lower_wgsl_for(&embedding(50257), "embed", &unaligned).unwrap_err().to_string();
    // No range of at most 128 MiB starts at a multiple of 1 GiB but the first.
    assert!(e.starts_with("buffer 1 (wte, at \"wte\") needs 154389504 where the odd WebGPU limits allow 134217728 (maxStorageBufferBindingSize;"), "{e}");
}

#[test]
fn a_browsers_limits_read_as_a_profile() {
    // As web/tools/limits.html printed them in headless Chromium 156 (extra keys ignored).
    let file = concat!(env!("CARGO_MANIFEST_DIR"), "/../web/limits/chromium-156-swiftshader.json");
    let from_file = Profile::resolve(file).unwrap();
    assert_eq!(from_file.limits, Limits::profile("chrome").unwrap());
    assert_eq!(Limits::from_json("{}").unwrap(), Limits::default());
    assert_eq!(Limits::from_json(r#"{"maxBufferSize": 5}"#).unwrap().max_buffer_size, 5);
    assert!(Limits::from_json(r#"{"maxBufferSize": "big"}"#).unwrap_err().contains("invalid type"));
    let e = Profile::resolve("no-such-profile.json").unwrap_err();
    assert!(e.contains("a profile is one of default, chrome, native, or a JSON file of limits"), "{e}");
}
