//! Each rule family firing on a layer traced by the frontend, and not firing on a near miss.

mod common;
use common::{assert_same_outputs, compile, feeds};
use rustral_frontend::nn::{
    Activation, Dropout, LayerNorm, Linear, Mlp, Module, MultiHeadAttention, QkvProjection, RmsNorm, Rope,
    cross_entropy, gelu, silu,
};
use rustral_frontend::{DType, Dim, ForwardCtx, Result, Tensor, TraceOptions, trace};
use rustral_ir::Graph;
use rustral_passes::OptLevel;

fn input(ctx: &mut ForwardCtx, name: &str, last: usize) -> Result<Tensor> {
    ctx.input(name, &[Dim::sym("batch"), Dim::sym("seq"), Dim::fixed(last)], DType::F32)
}

/// Trace, compile at O2, check the outputs still agree, return the fused counts.
fn fused_counts(f: impl FnOnce(&mut ForwardCtx) -> Result<Vec<Tensor>>) -> std::collections::BTreeMap<String, usize> {
    let t = trace(TraceOptions::default(), f).unwrap();
    let (opt, c) = compile(&t.graph, OptLevel::O2);
    let fd = feeds(&t.graph, None, &[("batch", 2), ("seq", 4)], 8);
    assert_same_outputs(&t.graph, &opt, &fd, 1e-5, 1e-4);
    c.stats.fused
}

fn only(counts: &std::collections::BTreeMap<String, usize>, kind: &str) -> usize {
    counts[kind]
}

#[test]
fn layer_norm_fires_on_nn_layer_norm_and_on_the_expanded_variance() {
    assert_eq!(
        only(
            &fused_counts(|ctx| Ok(vec![{
                let x = input(ctx, "x", 8)?;
                LayerNorm::new("ln", 8, 1e-5).forward(ctx, &x)?
            }])),
            "layer_norm"
        ),
        1
    );
    let no_affine = LayerNorm { affine: false, ..LayerNorm::new("ln", 8, 1e-5) };
    assert_eq!(
        only(
            &fused_counts(|ctx| Ok(vec![{
                let x = input(ctx, "x", 8)?;
                no_affine.forward(ctx, &x)?
            }])),
            "layer_norm"
        ),
        1
    );
    // var = mean(x^2) - mean(x)^2, eps inside the sqrt, divided rather than multiplied.
    let expanded = fused_counts(|ctx| {
        let x = input(ctx, "x", 8)?;
        let mean = x.mean(&[-1], true)?;
        let var = x.square()?.mean(&[-1], true)?.sub(&mean.square()?)?;
        Ok(vec![x.sub(&mean)?.div(&var.add_scalar(1e-5)?.sqrt()?)?])
    });
    assert_eq!(only(&expanded, "layer_norm"), 1);
}

#[test]
fn layer_norm_does_not_fire_over_the_wrong_axis_or_with_eps_outside_the_sqrt() {
    let wrong_axis = fused_counts(|ctx| {
        let x = input(ctx, "x", 8)?;
        let c = x.sub(&x.mean(&[-2], true)?)?;
        Ok(vec![c.mul(&c.square()?.mean(&[-2], true)?.add_scalar(1e-5)?.rsqrt()?)?])
    });
    assert_eq!(only(&wrong_axis, "layer_norm"), 0);
    // (x - mean) / (sqrt(var) + eps) is not a LayerNorm for eps != 0.
    let eps_outside = fused_counts(|ctx| {
        let x = input(ctx, "x", 8)?;
        let c = x.sub(&x.mean(&[-1], true)?)?;
        Ok(vec![c.div(&c.square()?.mean(&[-1], true)?.sqrt()?.add_scalar(1e-5)?)?])
    });
    assert_eq!(only(&eps_outside, "layer_norm"), 0);
}

#[test]
fn rms_norm_fires_and_its_near_miss_does_not() {
    assert_eq!(
        only(
            &fused_counts(|ctx| Ok(vec![{
                let x = input(ctx, "x", 8)?;
                RmsNorm::new("n", 8, 1e-6).forward(ctx, &x)?
            }])),
            "rms_norm"
        ),
        1
    );
    // x * rsqrt(mean(x^2)) * w with no eps: an eps is part of the op, so this stays primitive.
    let no_eps = fused_counts(|ctx| {
        let x = input(ctx, "x", 8)?;
        Ok(vec![x.mul(&x.square()?.mean(&[-1], true)?.rsqrt()?)?])
    });
    assert_eq!(only(&no_eps, "rms_norm"), 0);
}

#[test]
fn softmax_fires_along_any_axis_and_not_without_its_normaliser() {
    for axis in [-1, -2, -3] {
        let c = fused_counts(|ctx| Ok(vec![input(ctx, "x", 8)?.softmax(axis)?]));
        assert_eq!(only(&c, "softmax"), 1, "axis {axis}");
    }
    let unshifted = fused_counts(|ctx| {
        let e = input(ctx, "x", 8)?.exp()?;
        Ok(vec![e.div(&e.sum(&[-1], true)?)?])
    });
    assert_eq!(only(&unshifted, "softmax"), 1);
    let no_normaliser = fused_counts(|ctx| {
        let x = input(ctx, "x", 8)?;
        Ok(vec![x.sub(&x.max(&[-1], true)?)?.exp()?])
    });
    assert_eq!(only(&no_normaliser, "softmax"), 0);
}

/// Targets `[batch, seq]` and their one-hot over `classes` along `axis` of `[batch, seq, classes]`
/// (axis 2 is the real one-hot; another axis is a near miss), iota on the left or right.
fn one_hot(ctx: &mut ForwardCtx, classes: usize, axis: usize, swapped: bool) -> Result<Tensor> {
    let t = ctx.input("targets", &[Dim::sym("batch"), Dim::sym("seq")], DType::I64)?;
    let column = t.reshape(&[Dim::sym("batch"), Dim::sym("seq"), Dim::fixed(1)])?;
    let ids = ctx.iota(&[Dim::sym("batch"), Dim::sym("seq"), Dim::fixed(classes)], axis, DType::I64)?;
    let hot = if swapped { column.eq(&ids)? } else { ids.eq(&column)? };
    hot.cast(DType::F32)
}

#[test]
fn cross_entropy_fires_on_nn_cross_entropy_and_spellings_of_it_not_on_near_misses() {
    let nn = fused_counts(|ctx| {
        let x = input(ctx, "x", 8)?;
        let t = ctx.input("targets", &[Dim::sym("batch"), Dim::sym("seq")], DType::I64)?;
        Ok(vec![cross_entropy(ctx, &x, &t)?])
    });
    assert_eq!(only(&nn, "cross_entropy"), 1);
    // log-softmax without the max, the mask's operands swapped, the loss not negated.
    let unshifted = fused_counts(|ctx| {
        let x = input(ctx, "x", 8)?;
        let logp = x.sub(&x.exp()?.sum(&[-1], true)?.log()?)?;
        let hot = one_hot(ctx, 8, 2, true)?;
        Ok(vec![logp.mul(&hot)?.sum(&[-1], false)?])
    });
    assert_eq!(only(&unshifted, "cross_entropy"), 1);
    // A mask along the wrong axis is not a one-hot of the targets; log-softmax alone is no loss.
    let wrong_axis = fused_counts(|ctx| {
        let x = input(ctx, "x", 8)?;
        let hot = one_hot(ctx, 8, 1, false)?;
        Ok(vec![x.log_softmax(-1)?.mul(&hot)?.sum(&[-1], false)?.neg()?])
    });
    assert_eq!(only(&wrong_axis, "cross_entropy"), 0);
    let alone = fused_counts(|ctx| Ok(vec![input(ctx, "x", 8)?.log_softmax(-1)?]));
    assert_eq!(only(&alone, "cross_entropy"), 0);
}

#[test]
fn gelu_and_silu_fire_and_near_misses_do_not() {
    for tanh in [false, true] {
        assert_eq!(
            only(&fused_counts(|ctx| Ok(vec![gelu(&input(ctx, "x", 8)?, tanh)?])), "gelu"),
            1,
            "tanh form {tanh}"
        );
    }
    // 0.5 x (1 + erf(x)): the 1/sqrt(2) is missing.
    let missing_scale = fused_counts(|ctx| {
        let x = input(ctx, "x", 8)?;
        Ok(vec![x.mul_scalar(0.5)?.mul(&x.erf()?.add_scalar(1.0)?)?])
    });
    assert_eq!(only(&missing_scale, "gelu"), 0);
    assert_eq!(only(&fused_counts(|ctx| Ok(vec![silu(&input(ctx, "x", 8)?)?])), "silu"), 1);
    let other = fused_counts(|ctx| {
        let (x, y) = (input(ctx, "x", 8)?, input(ctx, "y", 8)?);
        Ok(vec![x.mul(&y.sigmoid()?)?])
    });
    assert_eq!(only(&other, "silu"), 0);
}

fn mha(causal: bool, rope: bool, kv_heads: usize) -> MultiHeadAttention {
    MultiHeadAttention {
        name: "attn".into(),
        n_heads: 4,
        n_kv_heads: kv_heads,
        head_dim: 4,
        qkv: QkvProjection::Separate {
            q: Linear::new("q", 16, 16, true),
            k: Linear::new("k", 16, 4 * kv_heads, true),
            v: Linear::new("v", 16, 4 * kv_heads, true),
        },
        out: Linear::new("o", 16, 16, true),
        rope: rope.then_some(Rope { theta: 10000.0 }),
        causal,
        divide_scores: !causal,
        dropout: Dropout { p: 0.1 },
    }
}

#[test]
fn attention_fires_with_masks_causal_rope_and_grouped_heads() {
    for (causal, rope, kv, masked) in
        [(false, false, 4, true), (true, false, 4, false), (true, true, 2, false), (false, false, 4, false)]
    {
        let layer = mha(causal, rope, kv);
        let c = fused_counts(|ctx| {
            let x = input(ctx, "x", 16)?;
            let mask = ctx.input("mask", &[Dim::sym("batch"), Dim::sym("seq")], DType::F32)?;
            let additive = rustral_frontend::nn::padding_mask(ctx, &mask)?;
            Ok(vec![layer.forward(ctx, &x, masked.then_some(&additive))?])
        });
        assert_eq!(only(&c, "attention"), 1, "causal {causal}, rope {rope}, kv heads {kv}, mask {masked}");
        assert_eq!(only(&c, "softmax"), 0);
    }
}

#[test]
fn attention_does_not_fire_when_softmax_runs_over_queries() {
    let c = fused_counts(|ctx| {
        let q = ctx.input("q", &[Dim::fixed(2), Dim::fixed(4), Dim::fixed(5), Dim::fixed(8)], DType::F32)?;
        let scores = q.matmul(&q.transpose(-2, -1)?)?.mul_scalar(0.25)?;
        Ok(vec![scores.softmax(-2)?.matmul(&q)?])
    });
    assert_eq!(only(&c, "attention"), 0);
    assert_eq!(only(&c, "softmax"), 1, "the softmax itself still fuses");
}

#[test]
fn matmul_epilogues_fire_on_linear_layers_and_not_on_a_full_size_addend() {
    let mlp = Mlp {
        name: "mlp".into(),
        up: Linear::new("up", 8, 16, true),
        act: Activation::GeluTanh,
        down: Linear::new("down", 16, 8, true),
    };
    let c = fused_counts(|ctx| {
        Ok(vec![{
            let x = input(ctx, "x", 8)?;
            mlp.forward(ctx, &x)?
        }])
    });
    assert_eq!((only(&c, "matmul_epilogue"), only(&c, "gelu")), (2, 1));
    let residual = fused_counts(|ctx| {
        let (x, r) = (input(ctx, "x", 8)?, input(ctx, "r", 8)?);
        let w = ctx.param("w", &[Dim::fixed(8), Dim::fixed(8)], rustral_frontend::Init::Ones)?;
        Ok(vec![x.matmul(&w)?.add(&r)?])
    });
    assert_eq!(only(&residual, "matmul_epilogue"), 0);
}

#[test]
fn elementwise_chains_become_one_kernel() {
    let t = trace(TraceOptions::default(), |ctx| {
        let x = input(ctx, "x", 8)?;
        Ok(vec![x.mul_scalar(2.0)?.tanh()?.add(&x)?.relu()?])
    })
    .unwrap();
    let (opt, c): (Graph, _) = compile(&t.graph, OptLevel::O2);
    assert_eq!(c.stats.fused["fused_elementwise"], 1);
    assert_eq!(opt.len(), 2, "input and one fused node:\n{}", rustral_ir::print(&opt));
}
