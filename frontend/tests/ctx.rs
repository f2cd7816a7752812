//! Tracing: scopes and provenance, operators, shape policy, profiler, initialisers, errors.

use rustral_frontend::nn::{Dropout, LayerNorm, Linear, Module};
use rustral_frontend::{DType, Dim, Error, ForwardCtx, Init, Mode, ParamStore, ShapePolicy, TraceOptions, trace};
use std::cell::RefCell;
use std::rc::Rc;

fn opts() -> TraceOptions {
    TraceOptions::default()
}

#[test]
fn scopes_name_params_and_provenance() {
    let traced = trace(opts(), |ctx| {
        let x = ctx.input("x", &[Dim::sym("batch"), Dim::fixed(4)], DType::F32)?;
        let y = ctx.scope("encoder.layer.0", |ctx| Linear::new("attention.self.query", 4, 2, true).forward(ctx, &x))?;
        Ok(vec![y])
    })
    .unwrap();
    let names: Vec<&str> = traced.params.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(names, ["encoder.layer.0.attention.self.query.weight", "encoder.layer.0.attention.self.query.bias"]);
    let text = rustral_ir::print(&traced.graph);
    let matmul = text.lines().find(|l| l.contains("matmul")).unwrap();
    // The module path, then the model line that called the layer (its nodes are recorded in
    // a closure of the layer's, which carries the layer's own lines).
    let site = format!("@encoder.layer.0.attention.self.query loc(\"{}\":{}:", file!(), line!() - 10);
    assert!(matmul.contains(&site), "{matmul}");
}

#[test]
fn operators_trace_the_same_ops_as_methods() {
    let build = |use_ops: bool| {
        trace(opts(), |ctx| {
            let a = ctx.input("a", &[Dim::fixed(3)], DType::F32)?;
            let b = ctx.input("b", &[Dim::fixed(3)], DType::F32)?;
            let y = if use_ops {
                (&(&(&a + &b)? * &a)? - &(&b / &a)?).and_then(|t| -&t)?
            } else {
                a.add(&b)?.mul(&a)?.sub(&b.div(&a)?)?.neg()?
            };
            Ok(vec![y])
        })
        .unwrap()
        .graph
    };
    // The same ops; the lines they were written on differ.
    let structure = |mut g: rustral_ir::Graph| {
        g.clear_locs();
        rustral_ir::print(&g)
    };
    assert_eq!(structure(build(true)), structure(build(false)));
}

#[test]
fn shape_policy_pins_dims() {
    let mut options = opts();
    options.shape = ShapePolicy::symbolic().pin("batch", 2);
    let traced =
        trace(options, |ctx| Ok(vec![ctx.input("x", &[Dim::sym("batch"), Dim::sym("seq")], DType::F32)?])).unwrap();
    assert!(rustral_ir::print(&traced.graph).contains("%0: f32[2, seq] = input \"x\""));
}

#[test]
fn profiler_sees_every_recorded_op_with_its_path() {
    let seen = Rc::new(RefCell::new(Vec::new()));
    let log = Rc::clone(&seen);
    let mut ctx = ForwardCtx::new(opts());
    ctx.set_profiler(Box::new(move |e| log.borrow_mut().push(format!("{} @{}", e.op, e.path))));
    let x = ctx.input("x", &[Dim::fixed(2), Dim::fixed(4)], DType::F32).unwrap();
    let y = LayerNorm::new("ln", 4, 1e-5).forward(&mut ctx, &x).unwrap();
    let traced = ctx.finish(vec![("y".into(), y)]).unwrap();
    let recorded = traced.graph.node_ids().filter(|&id| !traced.graph.node(id).unwrap().op.is_source()).count();
    assert_eq!(seen.borrow().len(), recorded);
    assert_eq!(seen.borrow()[0], "reduce_mean @ln");
}

#[test]
fn initialisers_are_seeded_per_name_and_reproducible() {
    let declare = |order_swapped: bool| {
        trace(opts(), |ctx| {
            let names = if order_swapped { ["b", "a"] } else { ["a", "b"] };
            let mut out = vec![];
            for n in names {
                out.push(ctx.param(n, &[Dim::fixed(1000)], Init::Normal { std: 2.0 })?);
            }
            Ok(out)
        })
        .unwrap()
    };
    let (t1, t2) = (declare(false), declare(true));
    let (s1, s2) = (ParamStore::init(&t1.params, 5), ParamStore::init(&t2.params, 5));
    assert_eq!(s1.get("a"), s2.get("a"), "independent of declaration order");
    assert_ne!(s1.get("a").unwrap().data, s1.get("b").unwrap().data);
    assert_ne!(ParamStore::init(&t1.params, 6).get("a"), s1.get("a"), "seed matters");
    let a = &s1.get("a").unwrap().data;
    let std = (a.iter().map(|v| v * v).sum::<f64>() / a.len() as f64).sqrt();
    assert!((std - 2.0).abs() < 0.15, "std {std}");
    let u =
        trace(opts(), |ctx| Ok(vec![ctx.param("u", &[Dim::fixed(1000)], Init::Uniform { low: -1.0, high: 3.0 })?]))
            .unwrap();
    let u = ParamStore::init(&u.params, 1);
    assert!(u.get("u").unwrap().data.iter().all(|v| (-1.0..3.0).contains(v)));
    let bad = trace(opts(), |ctx| Ok(vec![ctx.param("w", &[Dim::fixed(2)], Init::Normal { std: -1.0 })?]));
    assert!(matches!(bad.as_ref().map_err(Error::unlocated), Err(Error::Param { .. })), "{bad:?}");
    let sym = trace(opts(), |ctx| Ok(vec![ctx.param("w", &[Dim::sym("n")], Init::Zeros)?])).unwrap_err();
    assert_eq!(sym.unlocated().to_string(), "parameter \"w\": shape [n] is not static (parameters need fixed sizes)");
    assert!(sym.to_string().starts_with("frontend/tests/ctx.rs:"), "{sym}");
}

#[test]
fn tensors_from_another_trace_are_rejected() {
    let mut other = ForwardCtx::new(opts());
    let foreign = other.input("z", &[Dim::fixed(2)], DType::F32).unwrap();
    let err = trace(opts(), |ctx| {
        let x = ctx.input("x", &[Dim::fixed(2)], DType::F32)?;
        Ok(vec![ctx.scope("head", |_| x.add(&foreign))?])
    })
    .unwrap_err();
    assert_eq!(err.unlocated().to_string(), "tensor from another trace used in `add` at head");
    assert!(err.to_string().starts_with("frontend/tests/ctx.rs:"), "{err}");
}

#[test]
fn bad_arguments_name_the_op_and_path() {
    let err = trace(opts(), |ctx| {
        let x = ctx.input("x", &[Dim::fixed(2)], DType::F32)?;
        Ok(vec![ctx.scope("pool", |_| x.sum(&[3], false))?])
    })
    .unwrap_err();
    assert_eq!(err.unlocated().to_string(), "`reduce_sum` at pool: axis 3 out of range for f32[2]");
    assert!(err.to_string().starts_with("frontend/tests/ctx.rs:"), "{err}");
    let mut options = opts();
    options.mode = Mode::Train;
    let err = trace(options, |ctx| {
        let x = ctx.input("x", &[Dim::fixed(2)], DType::F32)?;
        Ok(vec![Dropout { p: 1.0 }.forward(ctx, &x)?])
    })
    .unwrap_err();
    let line = line!() - 3;
    assert_eq!(err.unlocated().to_string(), "`dropout`: drop probability 1 is not in [0, 1)");
    // The layer's error names the line that called `forward`, not a line inside the layer.
    assert!(err.to_string().starts_with(&format!("frontend/tests/ctx.rs:{line}:")), "{err}");
}

/// `update_param` takes only a declared parameter, once, with its own type; batch norm in
/// training refuses a channel that may hold one value (no unbiased variance).
#[test]
fn parameter_updates_are_checked() {
    use rustral_frontend::nn::{BatchNorm2d, Module};
    let err = |f: &dyn Fn(&mut rustral_frontend::ForwardCtx) -> rustral_frontend::Result<()>| {
        trace(TraceOptions::default(), |ctx| {
            f(ctx)?;
            Ok(vec![ctx.scalar(0.0, DType::F32)?])
        })
        .unwrap_err()
        .to_string()
    };
    let e = err(&|ctx| {
        let v = ctx.full(1.0, &[Dim::fixed(2)], DType::F32)?;
        ctx.update_param("nope", &v)
    });
    assert!(e.contains("nope") && e.contains("not a parameter declared before its update"), "{e}");
    let e = err(&|ctx| {
        let p = ctx.param("p", &[Dim::fixed(2)], Init::Zeros)?;
        ctx.update_param("p", &p.reshape(&[Dim::fixed(1), Dim::fixed(2)])?)
    });
    assert!(e.contains("updated with f32[1, 2], declared f32 [2]"), "{e}");
    let e = err(&|ctx| {
        let p = ctx.param("p", &[Dim::fixed(2)], Init::Zeros)?;
        ctx.update_param("p", &p)?;
        ctx.update_param("p", &p)
    });
    assert!(e.contains("updated twice"), "{e}");
    let train = TraceOptions { mode: Mode::Train, ..TraceOptions::default() };
    let e = trace(train, |ctx| {
        let x = ctx.input("x", &[Dim::sym("batch"), Dim::fixed(2), Dim::fixed(1), Dim::fixed(1)], DType::F32)?;
        Ok(vec![BatchNorm2d::new("bn", 2, 1e-5).forward(ctx, &x)?])
    })
    .unwrap_err()
    .to_string();
    assert!(e.contains("more than one value per channel"), "{e}");
}
