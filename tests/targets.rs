//! Tests written once and run on every target: `on_every_target!` instantiates each body for
//! the CPU target, the Candle target's CPU device and the WGSL target (on whatever adapter
//! wgpu finds; Mesa's software Vulkan driver in CI), as candle's `test_device!` does. Every
//! result is checked against the reference interpreter on the unoptimised graph.

use proptest::prelude::*;
use rustral::frontend::Traced;
use rustral::ir::{DType, Dim, Graph, Op, QuantFormat, TensorType, UnaryOp};
use rustral::prelude::*;
use rustral::runtime::cpu::Elementwise;
use rustral::runtime::reference::evaluate;
use std::collections::HashMap;

mod common;
use common::{every_model_matches_the_reference, max_error, random_graph_feeds, wgsl_available};

/// `fn name(target) { body }` becomes a module `name` with one test per target.
macro_rules! on_every_target {
    ($($(#[$meta:meta])* fn $name:ident($target:ident) $body:block)*) => {$(
        $(#[$meta])*
        mod $name {
            use super::*;

            fn body($target: &Target) $body

            #[test]
            fn cpu() {
                body(&Target::Cpu)
            }

            #[test]
            fn candle_cpu() {
                body(&Target::Candle(rustral::runtime::candle::Device::Cpu))
            }

            #[test]
            fn wgsl() {
                if wgsl_available() {
                    body(&Target::Wgsl)
                }
            }
        }
    )*};
}

/// The pipelines a target is checked at: O0 and O2, and on the CPU target O2 with fused
/// elementwise bodies compiled as the CPU favours, all by the tile loops, and interpreted.
fn modes(target: &Target) -> Vec<(OptLevel, Elementwise)> {
    let mut m = vec![(OptLevel::O0, Elementwise::Jit), (OptLevel::O2, Elementwise::Jit)];
    if matches!(target, Target::Cpu) {
        m.push((OptLevel::O2, Elementwise::Tiles));
        m.push((OptLevel::O2, Elementwise::Interpreted));
    }
    m
}

fn is_wgsl(target: &Target) -> bool {
    matches!(target, Target::Wgsl)
}

fn is_candle(target: &Target) -> bool {
    matches!(target, Target::Candle(_))
}

/// True when every value the graph computes is one WGSL represents portably: floats finite
/// (WGSL lets an implementation assume NaN and infinities never occur, and lavapipe folds
/// `x * 0` to 0), integers within 2^24 in magnitude (the target computes in f32 and stores
/// i64 as i32, WGSL having no 64-bit integers). These are the target's documented limits.
/// Values inside fused bodies count too: each body's prefixes become extra outputs.
fn values_are_portable(g: &Graph, feeds: &HashMap<String, HostTensor>) -> bool {
    let mut all = g.clone();
    let order = all.topo_order().unwrap();
    for (i, id) in order.iter().enumerate() {
        let _ = all.set_output(&format!("node {i}"), *id);
        if let Op::FusedElementwise { body } = all.node(*id).unwrap().op.clone() {
            let operands = all.operands(*id);
            for j in 0..body.nodes.len().saturating_sub(1) {
                let prefix = rustral::ir::ElementwiseExpr { nodes: body.nodes[..=j].to_vec() };
                if let Ok(p) = all.add(Op::FusedElementwise { body: prefix }, &operands, "") {
                    let _ = all.set_output(&format!("node {i} body {j}"), p);
                }
            }
        }
    }
    let Ok(out) = evaluate(&all, feeds) else { return false };
    out.iter().all(|(_, t)| {
        let limit = if t.dtype.is_int() { 2f64.powi(24) } else { f64::MAX };
        t.to_vec().iter().all(|v| v.abs() <= limit)
    })
}

/// Random graphs from the passes' property tests against the reference on the unoptimised
/// graph, at every mode of the target. Tolerance: 1e-3 absolute + 1e-3 relative (chains of
/// transcendental ops in f32). On WGSL only graphs whose values are portable count.
fn random_graph_matches(target: &Target, g: &Graph) -> Result<(), TestCaseError> {
    let t = Traced { graph: g.clone(), params: vec![] };
    let feeds = random_graph_feeds(g);
    let Ok(want) = evaluate(g, &feeds.all) else { return Ok(()) };
    if is_wgsl(target) {
        prop_assume!(values_are_portable(g, &feeds.all));
    }
    let free: Vec<(&str, HostTensor)> = feeds.inputs.iter().map(|(n, v)| (n.as_str(), v.clone())).collect();
    for (level, elementwise) in modes(target) {
        let options = CompileOptions { level, threads: 2, elementwise, ..CompileOptions::default() };
        let mut s = Session::compile(&t.graph, target.clone(), &options).unwrap();
        s.bind(&feeds.store).unwrap();
        let got = s.run(&free).unwrap_or_else(|e| panic!("{target:?} {level:?}: {e}"));
        let what = format!("{target:?} {level:?} {elementwise:?} on\n{}", rustral::ir::print(g));
        max_error(&want, &got, 1e-3, 1e-3, &what);
    }
    Ok(())
}

/// Values every unary op is run on: its domain's edges, tiny and large magnitudes, and (off
/// WGSL, whose implementations may assume no NaN or infinity) non-finite inputs.
fn special_values(target: &Target) -> Vec<f64> {
    let mut v = vec![-20.0, -3.5, -1.0, -1e-8, 0.0, 1e-8, 0.5, 1.0, 3.5, 20.0];
    if !is_wgsl(target) {
        v.extend([-100.0, 100.0, f64::INFINITY, f64::NEG_INFINITY, f64::NAN]);
    }
    v
}

/// Every unary op as one graph with one output per op (fused into one elementwise body at
/// O2, one kernel each at O0).
fn every_unary_op() -> Graph {
    let mut g = Graph::new("unary");
    let x = g.input("x", TensorType::new(DType::F32, vec![Dim::sym("n")])).unwrap();
    for u in UnaryOp::ALL {
        let y = g.add(Op::Unary(u), &[x], u.name()).unwrap();
        g.set_output(u.name(), y).unwrap();
    }
    g
}

on_every_target! {
    /// Every model of `common::models` at O0 and O2 for two bindings of the symbolic dims.
    /// Tolerance: 1e-4 absolute + 1e-4 relative on every output value.
    fn every_model_matches_the_reference_at_o0_and_o2(target) {
        every_model_matches_the_reference(target);
    }

    /// 120 random graphs (48 on the WGSL target, whose software driver is slow), every mode.
    fn random_graphs_match_the_reference(target) {
        let cases = if is_wgsl(target) { 48 } else { 120 };
        let config = ProptestConfig { cases, failure_persistence: None, ..ProptestConfig::default() };
        proptest!(config, |(g in rustral::ir::testing::arb_graph(20))| {
            random_graph_matches(target, &g)?;
        });
    }

    /// Every unary op on the special values, against the reference in f64 rounded to f32.
    /// Tolerance: 2e-6 absolute + 2e-5 relative (polynomial exp/tanh/erf, WGSL's `sin`/`cos`
    /// of 20 radians); NaN must be NaN and infinities exact.
    fn unary_ops_on_special_values_match_the_reference(target) {
        let g = every_unary_op();
        let values = special_values(target);
        let x = HostTensor::new(DType::F32, &[values.len()], values.clone()).unwrap();
        let want = evaluate(&g, &HashMap::from([("x".to_string(), x.clone())])).unwrap();
        for (level, elementwise) in modes(target) {
            let options = CompileOptions { level, threads: 2, elementwise, ..CompileOptions::default() };
            let mut s = Session::compile(&g, target.clone(), &options).unwrap();
            s.bind(&rustral::frontend::ParamStore::default()).unwrap();
            let got = s.run(&[("x", x.clone())]).unwrap();
            max_error(&want, &got, 2e-6, 2e-5, &format!("{target:?} {level:?} {elementwise:?} on {values:?}"));
        }
    }

    /// Every matmul-epilogue activation on products that hold NaN and infinities (off WGSL,
    /// which may assume neither): NaN must stay NaN through relu, as the IR defines it (the
    /// random graphs caught Candle's epilogue relu turning NaN into 0). Tolerance: 1e-5
    /// absolute + 1e-5 relative.
    fn matmul_epilogue_activations_keep_nan(target) {
        if is_wgsl(target) {
            return;
        }
        let f = |dims: &[usize]| TensorType::new(DType::F32, dims.iter().map(|&d| Dim::Static(d)).collect::<Vec<_>>());
        let mut a = rustral::runtime::seeded_values(7, 4 * 3);
        (a[0], a[4], a[8]) = (f64::NAN, f64::INFINITY, f64::NEG_INFINITY);
        let a = HostTensor::new(DType::F32, &[4, 3], a).unwrap();
        let b = HostTensor::new(DType::F32, &[3, 5], rustral::runtime::seeded_values(8, 15)).unwrap();
        for activation in rustral::ir::Activation::ALL {
            let mut g = Graph::new("epilogue");
            let x = g.input("a", f(&[4, 3])).unwrap();
            let w = g.input("b", f(&[3, 5])).unwrap();
            let y = g.add(Op::MatMulEpilogue { activation }, &[x, w], "mm").unwrap();
            g.set_output("y", y).unwrap();
            let feeds = HashMap::from([("a".to_string(), a.clone()), ("b".to_string(), b.clone())]);
            let want = evaluate(&g, &feeds).unwrap();
            assert!(want[0].1.to_vec()[..5].iter().all(|v| v.is_nan()), "the reference keeps NaN ({activation:?})");
            for (level, elementwise) in modes(target) {
                let options = CompileOptions { level, threads: 2, elementwise, ..CompileOptions::default() };
                let mut s = Session::compile(&g, target.clone(), &options).unwrap();
                s.bind(&rustral::frontend::ParamStore::default()).unwrap();
                let got = s.run(&[("a", a.clone()), ("b", b.clone())]).unwrap();
                max_error(&want, &got, 1e-5, 1e-5, &format!("{target:?} {level:?} {activation:?}"));
            }
        }
    }

    /// Reductions, softmax, LayerNorm and cross-entropy over a size-1 axis of a broadcast value, as is
    /// (`[1, 3]`, strides `[0, 1]` in candle) and permuted (`[3, 1]`, strides `[1, 0]`):
    /// candle counts both views as contiguous, and its max/min reduction divided by the zero
    /// stride (a panic found by the random graphs).
    fn reductions_over_a_broadcast_unit_axis_match_the_reference(target) {
        use rustral::ir::{Literal, NodeId, ReduceOp, F64};
        let f = |dims: &[usize]| TensorType::new(DType::F32, dims.iter().map(|&d| Dim::Static(d)).collect::<Vec<_>>());
        let x = HostTensor::new(DType::F32, &[3], vec![0.5, -2.0, 3.0]).unwrap();
        let reduce = |op| move |g: &mut Graph, v: NodeId, axis: usize| {
            g.add(Op::Reduce { op, axes: vec![axis], keepdim: false }, &[v], "r").unwrap()
        };
        let softmax = |g: &mut Graph, v: NodeId, axis: usize| g.add(Op::Softmax { axis }, &[v], "s").unwrap();
        let layer_norm = |g: &mut Graph, v: NodeId, _: usize| g.add(Op::LayerNorm { eps: F64(1e-5) }, &[v], "ln").unwrap();
        let cross_entropy = |g: &mut Graph, v: NodeId, _: usize| {
            let ty = TensorType::new(DType::I64, vec![Dim::Static(3), Dim::Static(1)]);
            let t = g.declare(Op::Constant { value: Literal::Splat(F64(0.0)) }, ty, "t").unwrap();
            g.add(Op::CrossEntropy, &[v, t], "ce").unwrap()
        };
        // (name, the op over the given axis, whether it reads only the last axis)
        type Case<'a> = (&'a str, &'a dyn Fn(&mut Graph, NodeId, usize) -> NodeId, bool);
        let ops: [Case; 7] = [
            ("max", &reduce(ReduceOp::Max), false),
            ("min", &reduce(ReduceOp::Min), false),
            ("sum", &reduce(ReduceOp::Sum), false),
            ("mean", &reduce(ReduceOp::Mean), false),
            ("layer_norm", &layer_norm, true),
            ("softmax", &softmax, false),
            ("cross_entropy", &cross_entropy, true),
        ];
        for (name, op, last_axis_only) in ops {
            for permuted in [false, true] {
                if last_axis_only && !permuted {
                    continue;
                }
                let mut g = Graph::new("unit_axis");
                let i = g.input("x", f(&[3])).unwrap();
                let shape = vec![Dim::Static(1), Dim::Static(3)].into();
                let mut v = g.add(Op::BroadcastTo { shape }, &[i], "b").unwrap();
                if permuted {
                    v = g.add(Op::Permute { perm: vec![1, 0] }, &[v], "p").unwrap();
                }
                let y = op(&mut g, v, usize::from(permuted));
                g.set_output("y", y).unwrap();
                let feeds = HashMap::from([("x".to_string(), x.clone())]);
                let want = evaluate(&g, &feeds).unwrap();
                for (level, elementwise) in modes(target) {
                    let options = CompileOptions { level, threads: 2, elementwise, ..CompileOptions::default() };
                    let mut s = Session::compile(&g, target.clone(), &options).unwrap();
                    s.bind(&rustral::frontend::ParamStore::default()).unwrap();
                    let got = s.run(&[("x", x.clone())]).unwrap();
                    max_error(&want, &got, 1e-6, 1e-6, &format!("{target:?} {level:?} {name} permuted={permuted}"));
                }
            }
        }
    }
}

/// A KV-cache step as a graph: key and value caches `[1, 2, 8, 4]` written at `position` by
/// `update_slice`, read by `cached_attention` of 4 query heads (two per key/value head).
fn kv_step() -> Graph {
    let mut g = Graph::new("kv_step");
    let f = |dims: Vec<Dim>| TensorType::new(DType::F32, dims);
    let seq = || Dim::sym("seq");
    let (s1, s2, s4, s8) = (Dim::Static(1), Dim::Static(2), Dim::Static(4), Dim::Static(8));
    let kc = g.input("past.key", f(vec![s1.clone(), s2.clone(), s8.clone(), s4.clone()])).unwrap();
    let vc = g.input("past.value", f(vec![s1.clone(), s2.clone(), s8, s4.clone()])).unwrap();
    let k = g.input("k", f(vec![s1.clone(), s2.clone(), seq(), s4.clone()])).unwrap();
    let v = g.input("v", f(vec![s1.clone(), s2, seq(), s4.clone()])).unwrap();
    let q = g.input("q", f(vec![s1, s4.clone(), seq(), s4])).unwrap();
    let pos = g.input("position", TensorType::new(DType::I64, vec![])).unwrap();
    let kw = g.add(Op::UpdateSlice { axis: 2 }, &[kc, k, pos], "cache").unwrap();
    let vw = g.add(Op::UpdateSlice { axis: 2 }, &[vc, v, pos], "cache").unwrap();
    let a = g.add(Op::CachedAttention { scale: rustral::ir::F64(0.5) }, &[q, kw, vw, pos], "attn").unwrap();
    g.set_output("attn", a).unwrap();
    g.set_output("present.key", kw).unwrap();
    g.set_output("present.value", vw).unwrap();
    g
}

fn kv_feeds(seq: usize, position: usize, seed: u64) -> HashMap<String, HostTensor> {
    let t = |shape: &[usize], s: u64| {
        let n = shape.iter().product();
        HostTensor::new(DType::F32, shape, rustral::runtime::seeded_values(seed + s, n)).unwrap()
    };
    HashMap::from([
        ("past.key".to_string(), t(&[1, 2, 8, 4], 1)),
        ("past.value".to_string(), t(&[1, 2, 8, 4], 2)),
        ("k".to_string(), t(&[1, 2, seq, 4], 3)),
        ("v".to_string(), t(&[1, 2, seq, 4], 4)),
        ("q".to_string(), t(&[1, 4, seq, 4], 5)),
        ("position".to_string(), HostTensor::scalar(DType::I64, position as f64)),
    ])
}

on_every_target! {
    /// `update_slice` and `cached_attention` against the reference, run plainly and as run
    /// state carried over three steps (prefill of 3, then two single tokens, the caches never
    /// leaving the target), and a position past the cache's end refused with an error.
    /// Tolerance: 1e-5 absolute + 1e-5 relative.
    fn kv_cache_ops_match_the_reference(target) {
        let g = kv_step();
        let mut s = Session::compile(&g, target.clone(), &CompileOptions { threads: 2, ..CompileOptions::default() }).unwrap();
        s.bind(&rustral::frontend::ParamStore::default()).unwrap();
        let feeds = kv_feeds(3, 2, 10);
        let want = evaluate(&g, &feeds).unwrap();
        let named: Vec<(&str, HostTensor)> = feeds.iter().map(|(n, t)| (n.as_str(), t.clone())).collect();
        max_error(&want, &s.run(&named).unwrap(), 1e-5, 1e-5, &format!("{target:?} plain run"));
        assert_eq!(s.carried().len(), 2, "present.* carries into past.*");

        let first = kv_feeds(3, 0, 20);
        let mut state = s
            .new_state(first.iter().filter(|(n, _)| n.starts_with("past.")).map(|(n, t)| (n.clone(), t.clone())).collect())
            .unwrap();
        let mut reference_caches: HashMap<String, HostTensor> =
            first.iter().filter(|(n, _)| n.starts_with("past.")).map(|(n, t)| (n.clone(), t.clone())).collect();
        for (step, (seq, position)) in [(3, 0), (1, 3), (1, 4)].into_iter().enumerate() {
            let mut feeds = kv_feeds(seq, position, 30 + step as u64);
            feeds.extend(reference_caches.clone());
            let want = evaluate(&g, &feeds).unwrap();
            let fresh: Vec<(&str, HostTensor)> =
                feeds.iter().filter(|(n, _)| !n.starts_with("past.")).map(|(n, t)| (n.as_str(), t.clone())).collect();
            let got = s.run_state(&fresh, &mut state, &["attn"]).unwrap();
            let want_attn: Vec<(String, HostTensor)> = want.iter().filter(|(n, _)| n == "attn").cloned().collect();
            max_error(&want_attn, &got, 1e-5, 1e-5, &format!("{target:?} step {step}"));
            for (name, t) in want.into_iter().filter(|(n, _)| n.starts_with("present.")) {
                reference_caches.insert(name.replace("present.", "past."), t);
            }
        }

        let err = s.run(&kv_feeds(3, 6, 40).iter().map(|(n, t)| (n.as_str(), t.clone())).collect::<Vec<_>>());
        let err = err.expect_err("3 rows at position 6 do not fit in 8").to_string();
        assert!(err.contains("past the end") || err.contains("past the cache"), "{target:?}: {err}");
    }
}

/// The WGSL target writes `update_slice` into its target's buffer, so a target read after the
/// write (here: also an output) is refused by name rather than overwritten in silence.
#[test]
fn wgsl_refuses_an_update_slice_whose_target_is_read_later() {
    let mut g = kv_step();
    let past = g.inputs().into_iter().find(|(n, _)| n == "past.key").unwrap().1;
    g.set_output("old.key", past).unwrap();
    let program = rustral::lowering::lower(&g).unwrap();
    let err = rustral::lowering::wgsl::lower_wgsl(&program, "kv_step").unwrap_err().to_string();
    assert!(err.contains("update_slice") && err.contains("in place"), "{err}");
    assert!(rustral::lowering::wgsl::lower_wgsl(&rustral::lowering::lower(&kv_step()).unwrap(), "kv_step").is_ok());
}

/// `u8` rows of `format`'s blocks with small finite f16 scales (random bytes elsewhere).
fn quant_rows(format: QuantFormat, rows: usize, k: usize, seed: u64) -> HostTensor {
    let rb = format.row_bytes(k).unwrap();
    let mut bytes: Vec<u8> =
        rustral::runtime::seeded_values(seed, rows * rb).iter().map(|v| ((v + 1.0) * 127.9) as u8).collect();
    let scales: &[usize] = match format {
        QuantFormat::Q6K => &[208],
        QuantFormat::Q4_1 | QuantFormat::Q4K | QuantFormat::Q5K => &[0, 2],
        _ => &[0],
    };
    for blk in bytes.chunks_exact_mut(format.block_bytes()) {
        for &o in scales {
            // 0x2000..0x23ff: f16 values around 1e-2.
            blk[o + 1] = 0x20 | (blk[o + 1] & 0x03);
        }
    }
    HostTensor::new(DType::U8, &[rows, rb], bytes.into_iter().map(f64::from).collect()).unwrap()
}

/// Rows of `x` in the quantized-op test: more than one row tile of the WGSL kernel (8).
const ROWS: usize = 11;

/// `y = quant_matmul(x, w)`, `rows = dequantize(gather(w, ids))` and `cut`, the bytes of `w`
/// but each row's first and last (a slice moving bytes off their word boundaries).
fn quant_graph(format: QuantFormat, k: usize, rb: usize, w_rows: usize) -> Graph {
    let mut g = Graph::new("quant");
    let x = g.input("x", TensorType::new(DType::F32, vec![Dim::Static(ROWS), Dim::Static(k)])).unwrap();
    let w = g.input("w", TensorType::new(DType::U8, vec![Dim::Static(w_rows), Dim::Static(rb)])).unwrap();
    let ids = g.input("ids", TensorType::new(DType::I64, vec![Dim::Static(2)])).unwrap();
    let y = g.add(Op::QuantMatMul { format }, &[x, w], "proj").unwrap();
    let picked = g.add(Op::Gather { axis: 0 }, &[w, ids], "embed").unwrap();
    let rows = g.add(Op::Dequantize { format }, &[picked], "embed").unwrap();
    let cut = g.add(Op::Slice { axis: 1, start: 1, end: Dim::Static(rb - 1) }, &[w], "cut").unwrap();
    g.set_output("y", y).unwrap();
    g.set_output("rows", rows).unwrap();
    g.set_output("cut", cut).unwrap();
    g
}

/// [`quant_graph`] with `w_rows` weight rows on `target` against the reference; returns the
/// tolerance of `y` (see `quantized_ops_match_the_reference`).
fn check_quant_graph(target: &Target, format: QuantFormat, w_rows: usize, options: &CompileOptions) -> (f64, f64) {
    let k = 256;
    let rb = format.row_bytes(k).unwrap();
    let g = quant_graph(format, k, rb, w_rows);
    let mut s = Session::compile(&g, target.clone(), options).unwrap();
    s.bind(&rustral::frontend::ParamStore::default()).unwrap();
    if let Some((p, _)) = s.wgsl().filter(|_| options.webgpu_limits.name != "default") {
        let ops: std::collections::BTreeSet<&str> = p
            .kernels
            .iter()
            .filter(|k| k.bindings.iter().any(|b| b.size.is_some_and(|n| n > 4)))
            .map(|k| k.op.as_str())
            .collect();
        assert_eq!(
            ops.into_iter().collect::<Vec<_>>(),
            ["gather", "quant_matmul", "slice"],
            "{format}: kernels binding ranges"
        );
    }
    let x = HostTensor::new(DType::F32, &[ROWS, k], rustral::runtime::seeded_values(7, ROWS * k)).unwrap();
    let feeds = HashMap::from([
        ("x".to_string(), x),
        ("w".to_string(), quant_rows(format, w_rows, k, 11)),
        ("ids".to_string(), HostTensor::i64(&[2], &[4, 1]).unwrap()),
    ]);
    let want = evaluate(&g, &feeds).unwrap();
    let named: Vec<(&str, HostTensor)> = feeds.iter().map(|(n, t)| (n.as_str(), t.clone())).collect();
    let got = s.run(&named).unwrap();
    let pick = |outs: &[(String, HostTensor)], name: &str| -> Vec<(String, HostTensor)> {
        outs.iter().filter(|(n, _)| n == name).cloned().collect()
    };
    let largest = pick(&want, "y")[0].1.data.iter().fold(0.0f64, |m, v| m.max(v.abs()));
    let (atol, rtol) = if is_candle(target) { (5e-2 * largest, 0.0) } else { (1e-5 + 1e-6 * largest, 1e-5) };
    let at = format!("{target:?} {format} {w_rows} rows");
    max_error(&pick(&want, "rows"), &pick(&got, "rows"), 1e-6, 1e-6, &format!("{at} dequantize"));
    max_error(&pick(&want, "cut"), &pick(&got, "cut"), 0.0, 0.0, &format!("{at} slice of bytes"));
    max_error(&pick(&want, "y"), &pick(&got, "y"), atol, rtol, &format!("{at} quant_matmul"));
    (atol, rtol)
}

on_every_target! {
    /// `quant_matmul` and `dequantize` of every block format against the reference
    /// (dequantize, then an f64 matmul), with 5 weight rows (not a whole 8-column tile of the
    /// WGSL kernel) and Q6_K's 210-byte rows (not whole words), gathered. Tolerance on the CPU and
    /// WGSL: 1e-5 relative, plus 1e-5 + 1e-6 of the largest output absolute (f32 sums of 256
    /// products in another order; outputs reach 184 where terms cancel to 0.3); on candle, whose quantized matmul rounds the
    /// activations to 8 bits (Q8_K for K-quants), 5% of the largest output.
    fn quantized_ops_match_the_reference(target) {
        for format in QuantFormat::ALL {
            let k = 256;
            let rb = format.row_bytes(k).unwrap();
            let options = CompileOptions { threads: 2, ..CompileOptions::default() };
            let (atol, rtol) = check_quant_graph(target, format, 5, &options);
            if is_wgsl(target) {
                // 64 weight rows (17 to 54 KB) bound in two ranges: the quantized reads and the
                // byte stores of `cut` go through the range accessors.
                let binding = (64 * rb as u64 / 2).div_ceil(256) * 256;
                let limits = rustral::lowering::wgsl::Limits { max_storage_buffer_binding_size: binding, ..Default::default() };
                let webgpu_limits = rustral::lowering::wgsl::Profile { name: format!("{binding}-byte binding"), limits };
                check_quant_graph(target, format, 64, &CompileOptions { webgpu_limits, ..options.clone() });
            }
            let feeds = HashMap::from([(
                "x".to_string(),
                HostTensor::new(DType::F32, &[ROWS, k], rustral::runtime::seeded_values(7, ROWS * k)).unwrap(),
            )]);

            // The weight as a bound parameter (targets may keep what they derive from it, as
            // candle keeps its QMatMul): right on a second run, and after binding other
            // weights.
            let mut gp = Graph::new("quant_param");
            let x = gp.input("x", TensorType::new(DType::F32, vec![Dim::Static(ROWS), Dim::Static(k)])).unwrap();
            let w = gp.param("w", TensorType::new(DType::U8, vec![Dim::Static(5), Dim::Static(rb)]), "proj").unwrap();
            let y = gp.add(Op::QuantMatMul { format }, &[x, w], "proj").unwrap();
            gp.set_output("y", y).unwrap();
            let mut s = Session::compile(&gp, target.clone(), &options).unwrap();
            for seed in [11, 12] {
                let w = quant_rows(format, 5, k, seed);
                s.bind_host(&HashMap::from([("w".to_string(), w.clone())])).unwrap();
                let all = HashMap::from([("x".to_string(), feeds["x"].clone()), ("w".to_string(), w)]);
                let want = evaluate(&gp, &all).unwrap();
                for run in 0..2 {
                    let got = s.run(&[("x", feeds["x"].clone())]).unwrap();
                    max_error(&want, &got, atol, rtol, &format!("{target:?} {format} bound weights {seed}, run {run}"));
                }
            }
        }
    }
}

/// An attention graph: `q [1, 2, lq, 40]`, `k [1, 2, lk, 40]`, `v [1, 2, lk, 24]` and,
/// when `mask` is given, an additive mask of that shape (broadcast over the scores).
fn attention_graph(lq: usize, lk: usize, causal: bool, mask: Option<&[usize]>) -> Graph {
    let mut g = Graph::new("attention");
    let f = |dims: &[usize]| TensorType::new(DType::F32, dims.iter().map(|&d| Dim::Static(d)).collect::<Vec<_>>());
    let q = g.input("q", f(&[1, 2, lq, 40])).unwrap();
    let k = g.input("k", f(&[1, 2, lk, 40])).unwrap();
    let v = g.input("v", f(&[1, 2, lk, 24])).unwrap();
    let mut args = vec![q, k, v];
    if let Some(m) = mask {
        args.push(g.input("mask", f(m)).unwrap());
    }
    let a = g.add(Op::Attention { scale: rustral::ir::F64(0.3), causal }, &args, "attn").unwrap();
    g.set_output("y", a).unwrap();
    g
}

on_every_target! {
    /// Fused attention against the reference at shapes that take several query blocks of the
    /// CPU kernel (32 rows each when causal, else 64), causal with more keys than queries, masks broadcast over
    /// heads and rows, and an infinite value that only some rows of a block can see (the
    /// others must not turn NaN). Tolerance: 2e-5 absolute + 2e-5 relative.
    fn attention_in_blocks_matches_the_reference(target) {
        let t = |shape: &[usize], seed: u64| {
            HostTensor::new(DType::F32, shape, rustral::runtime::seeded_values(seed, shape.iter().product())).unwrap()
        };
        // (queries, keys, causal, mask shape, key whose value is infinite)
        type Case = (usize, usize, bool, Option<&'static [usize]>, Option<usize>);
        let cases: [Case; 6] = [
            (150, 150, true, None, None),
            (70, 200, true, Some(&[70, 200]), None),
            (130, 90, false, Some(&[1, 1, 1, 90]), None),
            // A mask that varies by query only (broadcast along the keys: the CPU kernel's
            // strided path rather than its row add).
            (130, 90, false, Some(&[1, 2, 130, 1]), None),
            (100, 100, true, None, Some(80)),
            (3, 5, false, None, None),
        ];
        for (lq, lk, causal, mask, poison) in cases {
            let g = attention_graph(lq, lk, causal, mask);
            let mut v = t(&[1, 2, lk, 24], 3).to_vec();
            if let Some(j) = poison {
                v[j * 24 + 5] = f64::INFINITY;
            }
            let mut feeds = HashMap::from([
                ("q".to_string(), t(&[1, 2, lq, 40], 1)),
                ("k".to_string(), t(&[1, 2, lk, 40], 2)),
                ("v".to_string(), HostTensor::new(DType::F32, &[1, 2, lk, 24], v).unwrap()),
            ]);
            if let Some(m) = mask {
                let n: usize = m.iter().product();
                // Every seventh key hidden by a large negative bias (not in a mask along the
                // queries only: a bias of -1e9 on a whole row leaves no score digits in f32).
                let hides = m.last() != Some(&1);
                let bias = (0..n).map(|i| if hides && i % 7 == 3 { -1e9 } else { (i % 5) as f64 * 0.1 }).collect();
                feeds.insert("mask".to_string(), HostTensor::new(DType::F32, m, bias).unwrap());
            }
            let want = evaluate(&g, &feeds).unwrap();
            if let Some(j) = poison {
                let y = want[0].1.to_vec();
                assert!(y[..j * 24].iter().all(|x| x.is_finite()) && !y[j * 24 + 5].is_finite(), "the reference hides key {j} from earlier rows");
            }
            let mut s = Session::compile(&g, target.clone(), &CompileOptions { threads: 2, ..CompileOptions::default() }).unwrap();
            s.bind(&rustral::frontend::ParamStore::default()).unwrap();
            let named: Vec<(&str, HostTensor)> = feeds.iter().map(|(n, t)| (n.as_str(), t.clone())).collect();
            max_error(&want, &s.run(&named).unwrap(), 2e-5, 2e-5, &format!("{target:?} lq {lq} lk {lk} causal {causal} mask {mask:?}"));
        }
    }

    /// A prefill of 80 queries over a KV cache of 200 rows at position 10: two query blocks,
    /// and the unfilled rows past position + 80 hold NaN, which must never be read.
    /// Tolerance: 2e-5 absolute + 2e-5 relative.
    fn cached_attention_prefill_matches_the_reference(target) {
        let mut g = Graph::new("prefill");
        let f = |dims: &[usize]| TensorType::new(DType::F32, dims.iter().map(|&d| Dim::Static(d)).collect::<Vec<_>>());
        let q = g.input("q", f(&[1, 4, 80, 8])).unwrap();
        let k = g.input("k", f(&[1, 2, 200, 8])).unwrap();
        let v = g.input("v", f(&[1, 2, 200, 8])).unwrap();
        let pos = g.input("position", TensorType::new(DType::I64, vec![])).unwrap();
        let a = g.add(Op::CachedAttention { scale: rustral::ir::F64(0.35) }, &[q, k, v, pos], "attn").unwrap();
        g.set_output("attn", a).unwrap();
        let cache = |seed: u64| {
            let mut x = rustral::runtime::seeded_values(seed, 2 * 200 * 8);
            for (i, x) in x.iter_mut().enumerate() {
                if (i / 8) % 200 >= 90 {
                    *x = f64::NAN;
                }
            }
            HostTensor::new(DType::F32, &[1, 2, 200, 8], x).unwrap()
        };
        let feeds = HashMap::from([
            ("q".to_string(), HostTensor::new(DType::F32, &[1, 4, 80, 8], rustral::runtime::seeded_values(5, 4 * 80 * 8)).unwrap()),
            ("k".to_string(), cache(6)),
            ("v".to_string(), cache(7)),
            ("position".to_string(), HostTensor::scalar(DType::I64, 10.0)),
        ]);
        let want = evaluate(&g, &feeds).unwrap();
        assert!(want[0].1.to_vec().iter().all(|x| x.is_finite()), "the reference reads only filled rows");
        let mut s = Session::compile(&g, target.clone(), &CompileOptions { threads: 2, ..CompileOptions::default() }).unwrap();
        s.bind(&rustral::frontend::ParamStore::default()).unwrap();
        let named: Vec<(&str, HostTensor)> = feeds.iter().map(|(n, t)| (n.as_str(), t.clone())).collect();
        max_error(&want, &s.run(&named).unwrap(), 2e-5, 2e-5, &format!("{target:?} prefill"));
    }
}
