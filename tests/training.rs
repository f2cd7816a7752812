//! Training: optimizers against identities that follow from their definitions, the schedule's
//! shape, checkpoints that resume to the same trajectory bit for bit on the CPU target, and the
//! examples' models learning (XOR to 100%, the digits to at least 97% test accuracy).

#[path = "../examples/training/mod.rs"]
mod training;

mod common;

use rustral::frontend::{ParamStore, ParamValue, TraceOptions, trace_named};
use rustral::prelude::*;
use rustral::train::{Optimizer, Schedule, Trainer};
use std::path::PathBuf;

fn options() -> CompileOptions {
    CompileOptions { threads: 2, ..CompileOptions::default() }
}

/// `loss = sum(a * p)` for a parameter p[3] and a fixed input a: the gradient is exactly `a`.
fn linear_loss(p0: [f64; 3]) -> (rustral::frontend::Traced, ParamStore) {
    let t = trace_named(TraceOptions::default(), |ctx| {
        let a = ctx.input("a", &[Dim::fixed(3)], DType::F32)?;
        let p = ctx.param("p", &[Dim::fixed(3)], rustral::frontend::Init::Zeros)?;
        Ok(vec![("loss".into(), a.mul(&p)?.sum(&[0], false)?)])
    })
    .unwrap();
    let mut store = ParamStore::default();
    store.insert("p", ParamValue { dtype: DType::F32, shape: vec![3], data: p0.to_vec() });
    (t, store)
}

fn a() -> HostTensor {
    HostTensor::f32(&[3], &[0.5, -2.0, 0.25]).unwrap()
}

#[test]
fn sgd_with_momentum_follows_its_recurrence() {
    let (t, store) = linear_loss([1.0, 1.0, 1.0]);
    let sgd = Optimizer::Sgd { lr: 0.1, momentum: 0.9, weight_decay: 0.0 };
    let mut tr = Trainer::new(&t, "loss", Target::Cpu, &options(), sgd, Schedule::Constant, store).unwrap();
    for _ in 0..2 {
        tr.step(&[("a", a())]).unwrap();
    }
    // v1 = g, v2 = 0.9 g + g: p2 = p0 - 0.1 * (1 + 1.9) * g
    let p = &tr.params().unwrap().get("p").unwrap().data;
    for (x, g) in p.iter().zip([0.5, -2.0, 0.25]) {
        assert!((x - (1.0 - 0.29 * g)).abs() < 1e-6, "{x}");
    }
}

#[test]
fn adam_moves_each_parameter_by_the_learning_rate_against_its_gradients_sign() {
    // With a constant gradient, Adam's bias-corrected step is lr * g / (|g| + eps): lr * sign(g).
    let (t, store) = linear_loss([1.0, 1.0, 1.0]);
    let mut tr =
        Trainer::new(&t, "loss", Target::Cpu, &options(), Optimizer::adam(0.01), Schedule::Constant, store).unwrap();
    for _ in 0..3 {
        tr.step(&[("a", a())]).unwrap();
    }
    let p = &tr.params().unwrap().get("p").unwrap().data;
    for (x, g) in p.iter().zip([0.5f64, -2.0, 0.25]) {
        assert!((x - (1.0 - 0.03 * g.signum())).abs() < 1e-6, "{x}");
    }
}

#[test]
fn adamw_decays_weights_apart_from_the_gradient() {
    // AdamW with wd: the first step scales p by (1 - lr wd), then takes Adam's step lr * sign(g).
    let (t, store) = linear_loss([2.0, 2.0, 2.0]);
    let opt = Optimizer::AdamW { lr: 0.1, beta1: 0.9, beta2: 0.999, eps: 1e-8, weight_decay: 0.5 };
    let mut tr = Trainer::new(&t, "loss", Target::Cpu, &options(), opt, Schedule::Constant, store).unwrap();
    tr.step(&[("a", a())]).unwrap();
    let p = &tr.params().unwrap().get("p").unwrap().data;
    for (x, g) in p.iter().zip([0.5f64, -2.0, 0.25]) {
        assert!((x - (2.0 * (1.0 - 0.05) - 0.1 * g.signum())).abs() < 1e-6, "{x}");
    }
}

#[test]
fn warmup_cosine_rises_linearly_then_falls_to_its_floor() {
    let s = Schedule::WarmupCosine { warmup: 10, total: 110, min_factor: 0.1 };
    assert_eq!(s.factor(5), 0.5);
    assert_eq!(s.factor(10), 1.0);
    assert!((s.factor(60) - 0.55).abs() < 1e-12, "half way down the cosine");
    assert!((s.factor(110) - 0.1).abs() < 1e-12);
    assert!((s.factor(500) - 0.1).abs() < 1e-12);
    assert_eq!(Schedule::Constant.factor(7), 1.0);
}

fn digits_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fixtures/digits")
}

/// Ten steps of AdamW on `target` in one go, or five, a checkpoint, a fresh trainer and five
/// more: the same losses and the same parameters bit for bit. Returns the ten losses.
fn resume_matches_ten_straight_steps(target: Target, schedule: Schedule) -> Vec<f64> {
    let (train, _) = training::graphs(&[4, 8, 3]);
    let x = HostTensor::new(DType::F32, &[6, 4], rustral::runtime::seeded_values(3, 24)).unwrap();
    let y = HostTensor::new(DType::I64, &[6], vec![0.0, 1.0, 2.0, 1.0, 0.0, 2.0]).unwrap();
    let batch = [("x", x), ("y", y)];
    let new = || {
        let params = ParamStore::init(&train.params, 4);
        Trainer::new(&train, "loss", target.clone(), &options(), Optimizer::adamw(0.05), schedule, params).unwrap()
    };
    let mut straight = new();
    let losses: Vec<f64> = (0..10).map(|_| straight.step(&batch).unwrap()).collect();
    let mut first = new();
    for _ in 0..5 {
        first.step(&batch).unwrap();
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("step5.safetensors");
    first.save_checkpoint(&path).unwrap();
    let mut resumed = new();
    resumed.load_checkpoint(&path).unwrap();
    assert_eq!(resumed.steps(), 5);
    let rest: Vec<f64> = (0..5).map(|_| resumed.step(&batch).unwrap()).collect();
    assert_eq!(rest, losses[5..].to_vec());
    assert_eq!(resumed.params().unwrap(), straight.params().unwrap());
    losses
}

#[test]
fn checkpoints_resume_the_same_trajectory_bit_for_bit() {
    let schedule = Schedule::WarmupCosine { warmup: 3, total: 10, min_factor: 0.0 };
    let losses = resume_matches_ten_straight_steps(Target::Cpu, schedule);
    assert!(losses[9] < losses[0], "{losses:?}");
}

#[test]
fn xor_is_learned_to_full_accuracy() {
    let (train, infer) = training::graphs(&[2, 8, 2]);
    let params = ParamStore::init(&train.params, 0);
    let mut tr =
        Trainer::new(&train, "loss", Target::Cpu, &options(), Optimizer::adam(0.05), Schedule::Constant, params)
            .unwrap();
    let x = HostTensor::f32(&[4, 2], &[0.0, 0.0, 0.0, 1.0, 1.0, 0.0, 1.0, 1.0]).unwrap();
    let y = HostTensor::new(DType::I64, &[4], vec![0.0, 1.0, 1.0, 0.0]).unwrap();
    let first = tr.step(&[("x", x.clone()), ("y", y.clone())]).unwrap();
    let mut last = first;
    for _ in 0..299 {
        last = tr.step(&[("x", x.clone()), ("y", y.clone())]).unwrap();
    }
    assert!(last < 0.05 && last < first, "loss {first} -> {last}");
    let mut s = Session::compile(&infer.graph, Target::Cpu, &options()).unwrap();
    s.bind(tr.params().unwrap()).unwrap();
    let logits = s.run(&[("x", x)]).unwrap().remove(0).1;
    assert_eq!(training::accuracy(&logits, &[0, 1, 1, 0]), 1.0);
}

/// The train_digits example's training: at least 97% test accuracy (logistic regression gets
/// 98.1% on this split).
#[test]
fn the_digits_mlp_reaches_97_percent() {
    let (acc, manifest) = training::digits::train(&digits_dir(), 30, false).unwrap();
    println!("digits test accuracy {acc:.3}");
    assert!(acc >= 0.97, "{acc}");
    // Its run manifest: every step's loss, the data's checksums, valid against the schema.
    assert_eq!(manifest.steps.len(), 30 * 1437usize.div_ceil(64));
    assert!(manifest.steps.last().unwrap().loss < manifest.steps[0].loss);
    assert_eq!(manifest.dataset.len(), 2);
    let value = serde_json::to_value(&manifest).unwrap();
    rustral::train::validate_manifest(&value).unwrap();
    let dir = tempfile::tempdir().unwrap();
    manifest.write(&dir.path().join("run.json")).unwrap();
}

/// The train_digits_cnn example's training (two convolutions with ReLU and max pooling, then
/// a linear classifier): at least 98% test accuracy on the CPU target.
#[test]
fn the_digits_cnn_reaches_98_percent_on_cpu() {
    let (acc, manifest) =
        training::digits::train_net(&digits_dir(), training::digits::CNN, Target::Cpu, 15, false).unwrap();
    println!("digits CNN test accuracy on cpu {acc:.3}");
    assert!(acc >= 0.98, "{acc}");
    assert!(manifest.steps.last().unwrap().loss < manifest.steps[0].loss);
}

/// The same CNN trained on the WGSL target (convolution, pooling and their gradients as WGSL
/// kernels, parameters and optimizer state on the device): at least 98% test accuracy.
#[test]
fn the_digits_cnn_reaches_98_percent_on_wgsl() {
    if !common::wgsl_available() {
        return;
    }
    let (acc, _) = training::digits::train_net(&digits_dir(), training::digits::CNN, Target::Wgsl, 15, false).unwrap();
    println!("digits CNN test accuracy on wgsl {acc:.3}");
    assert!(acc >= 0.98, "{acc}");
}

/// The same training step on the CPU and WGSL targets: 20 steps of AdamW on an MLP give the
/// same loss curve and parameters, the WGSL one with parameters and optimizer state kept on
/// the device (updated there in f32, the CPU's on the host in f64). Tolerance: 1e-4 (1 + |x|)
/// per step's loss and per parameter.
#[test]
fn cpu_and_wgsl_give_the_same_loss_curve() {
    if !common::wgsl_available() {
        return;
    }
    let (train, _) = training::graphs(&[64, 32, 10]);
    let x = HostTensor::new(DType::F32, &[32, 64], rustral::runtime::seeded_values(5, 32 * 64)).unwrap();
    let y = HostTensor::new(DType::I64, &[32], (0..32).map(|i| (i * 7 % 10) as f64).collect()).unwrap();
    let batch = [("x", x), ("y", y)];
    let curve = |target: Target| {
        let params = ParamStore::init(&train.params, 2);
        let schedule = Schedule::WarmupCosine { warmup: 5, total: 20, min_factor: 0.1 };
        let mut t = Trainer::new(&train, "loss", target, &options(), Optimizer::adamw(0.01), schedule, params).unwrap();
        let losses = (0..20).map(|_| t.step(&batch).unwrap()).collect::<Vec<f64>>();
        (losses, t.params().unwrap().clone())
    };
    let ((cpu, cpu_params), (wgsl, wgsl_params)) = (curve(Target::Cpu), curve(Target::Wgsl));
    for ((name, a), (_, b)) in cpu_params.iter().zip(wgsl_params.iter()) {
        for (x, y) in a.data.iter().zip(&b.data) {
            assert!((x - y).abs() <= 1e-4 * (1.0 + x.abs()), "{name}: cpu {x} vs wgsl {y}");
        }
    }
    assert_ne!(cpu_params, ParamStore::init(&train.params, 2), "the parameters moved");
    println!("cpu  {cpu:.5?}\nwgsl {wgsl:.5?}");
    assert!(cpu[19] < cpu[0] * 0.5, "it learns: {cpu:?}");
    for (step, (a, b)) in cpu.iter().zip(&wgsl).enumerate() {
        assert!((a - b).abs() <= 1e-4 * (1.0 + a.abs()), "step {step}: cpu {a} vs wgsl {b}");
    }
}

/// The char_gpt example's model: a character-level GPT-2 on this repository's README ends
/// clearly below the unigram baseline (at least 0.5 nats per character) and samples text.
#[test]
fn the_char_gpt_beats_the_unigram_baseline() {
    let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap();
    let out = training::char_gpt::train(&text, 400, "The ", false).unwrap();
    println!("final {:.3}, unigram {:.3}\nsample: {}", out.final_loss, out.unigram, out.sample);
    assert!(out.final_loss < out.unigram - 0.5, "{} vs {}", out.final_loss, out.unigram);
    assert_eq!(out.sample.chars().count(), 204);
}

/// `common::gpt2_with_dropout` over a batch of 4 x 8 ids.
fn gpt_with_dropout() -> (rustral::frontend::Traced, HostTensor) {
    let traced = common::gpt2_with_dropout(4, 8, 7);
    assert!(traced.graph.node_ids().any(|id| traced.graph.node(id).unwrap().op.name() == "random_uniform"));
    let ids = HostTensor::new(DType::I64, &[4, 8], (0..32).map(|i| ((i * 7) % 50) as f64).collect()).unwrap();
    (traced, ids)
}

/// A model traced in `Mode::Train` (masks drawn from explicit seeds) trains: the gradient
/// flows through the masks and the loss falls.
#[test]
fn a_model_traced_for_training_with_dropout_trains() {
    let (traced, ids) = gpt_with_dropout();
    let params = ParamStore::init(&traced.params, 1);
    let mut tr =
        Trainer::new(&traced, "loss", Target::Cpu, &options(), Optimizer::adam(3e-3), Schedule::Constant, params)
            .unwrap();
    let losses: Vec<f64> = (0..30).map(|_| tr.step(&[("input_ids", ids.clone())]).unwrap()).collect();
    assert!(losses[29] < losses[0] - 0.5, "{losses:?}");
}

/// Each step draws new dropout masks (the trainer feeds the step's number as `rng_step`): with
/// a learning rate of 0 the parameters never move, so only the masks change the loss. A second
/// run draws the same masks bit for bit, so does a run resumed from a checkpoint, and the WGSL
/// target draws the same ones too.
#[test]
fn dropout_masks_change_every_step_and_repeat_across_runs_and_targets() {
    let (traced, ids) = gpt_with_dropout();
    let new = |target: Target| {
        let params = ParamStore::init(&traced.params, 1);
        let sgd = Optimizer::Sgd { lr: 0.0, momentum: 0.0, weight_decay: 0.0 };
        Trainer::new(&traced, "loss", target, &options(), sgd, Schedule::Constant, params).unwrap()
    };
    let steps = |tr: &mut Trainer, n: usize| -> Vec<f64> {
        (0..n).map(|_| tr.step(&[("input_ids", ids.clone())]).unwrap()).collect()
    };
    let frozen = |target: Target| steps(&mut new(target), 4);
    let cpu = frozen(Target::Cpu);
    for w in cpu.windows(2) {
        assert!((w[0] - w[1]).abs() > 1e-4, "the same masks twice: {cpu:?}");
    }
    assert_eq!(cpu, frozen(Target::Cpu), "another run, other masks");
    // A run resumed from a checkpoint after two steps draws the masks of steps 2 and 3.
    let mut first = new(Target::Cpu);
    steps(&mut first, 2);
    let dir = tempfile::tempdir().unwrap();
    first.save_checkpoint(&dir.path().join("step2.safetensors")).unwrap();
    let mut resumed = new(Target::Cpu);
    resumed.load_checkpoint(&dir.path().join("step2.safetensors")).unwrap();
    assert_eq!(steps(&mut resumed, 2), cpu[2..].to_vec(), "a resumed run replays the masks");
    if common::wgsl_available() {
        let wgsl = frozen(Target::Wgsl);
        for (a, b) in cpu.iter().zip(&wgsl) {
            assert!((a - b).abs() <= 1e-4 * (1.0 + a.abs()), "cpu {cpu:?} wgsl {wgsl:?}");
        }
    }
}

/// On the WGSL target too (parameters and moments read back from the device, and written back
/// to it on resume).
#[test]
fn wgsl_checkpoints_resume_the_same_trajectory() {
    if common::wgsl_available() {
        resume_matches_ten_straight_steps(Target::Wgsl, Schedule::Constant);
    }
}

/// Batch norm in training mode: the batch is normalised by its own statistics (each channel of
/// the output has mean 0 and biased variance 1 / (1 + eps / var) with unit weight and zero
/// bias), and after a step the running statistics are PyTorch's `0.9 * running + 0.1 *
/// batch` with the unbiased variance, computed here by hand from the batch; the weight and bias
/// still learn. On cpu and on wgsl. Tolerance 1e-5 (1 + |x|).
#[test]
fn batch_norm_trains_on_batch_statistics_and_updates_its_running_ones() {
    use rustral::frontend::nn::{BatchNorm2d, Module};
    use rustral::frontend::{Mode, UPDATE};
    let (n, c, h, w) = (3usize, 2usize, 4usize, 5usize);
    let traced = trace_named(TraceOptions { mode: Mode::Train, ..TraceOptions::default() }, |ctx| {
        let x = ctx.input("x", &[Dim::sym("batch"), Dim::fixed(c), Dim::fixed(h), Dim::fixed(w)], DType::F32)?;
        let y = BatchNorm2d::new("bn", c, 1e-5).forward(ctx, &x)?;
        let loss = y.mul(&x)?.mean(&[0, 1, 2, 3], false)?;
        Ok(vec![("loss".into(), loss), ("y".into(), y)])
    })
    .unwrap();
    let outputs: Vec<&str> = traced.graph.outputs().iter().map(|o| o.name.as_str()).collect();
    assert_eq!(outputs, ["loss", "y", &format!("{UPDATE}bn.running_mean"), &format!("{UPDATE}bn.running_var")]);
    let x: Vec<f64> = rustral::runtime::seeded_values(3, n * c * h * w).iter().map(|v| v * 2.0 + 0.5).collect();
    let feed = HostTensor::new(DType::F32, &[n, c, h, w], x.clone()).unwrap();
    // By hand: per channel, over batch, height and width.
    let channel = |k: usize| -> Vec<f64> {
        (0..n).flat_map(|i| x[(i * c + k) * h * w..(i * c + k + 1) * h * w].to_vec()).collect()
    };
    let stats = |k: usize| {
        let v = channel(k);
        let m = v.iter().sum::<f64>() / v.len() as f64;
        let ss = v.iter().map(|a| (a - m) * (a - m)).sum::<f64>();
        (m, ss / v.len() as f64, ss / (v.len() - 1) as f64)
    };
    let mut targets = vec![Target::Cpu];
    if common::wgsl_available() {
        targets.push(Target::Wgsl);
    }
    for target in targets {
        let params = ParamStore::init(&traced.params, 0);
        let opt = Optimizer::Sgd { lr: 0.1, momentum: 0.0, weight_decay: 0.0 };
        let mut t = Trainer::new(&traced, "loss", target.clone(), &options(), opt, Schedule::Constant, params).unwrap();
        let mut s = Session::compile(&traced.graph, target.clone(), &options()).unwrap();
        s.bind(&ParamStore::init(&traced.params, 0)).unwrap();
        let y = s.run(&[("x", feed.clone())]).unwrap().remove(1).1.to_vec();
        for k in 0..c {
            let (_, biased, _) = stats(k);
            let ys: Vec<f64> = (0..n).flat_map(|i| y[(i * c + k) * h * w..(i * c + k + 1) * h * w].to_vec()).collect();
            let m = ys.iter().sum::<f64>() / ys.len() as f64;
            let var = ys.iter().map(|a| (a - m) * (a - m)).sum::<f64>() / ys.len() as f64;
            assert!(m.abs() < 1e-5, "{target:?} channel {k}: mean {m}");
            assert!((var - biased / (biased + 1e-5)).abs() < 1e-5, "{target:?} channel {k}: variance {var}");
        }
        t.step(&[("x", feed.clone())]).unwrap();
        let p = t.params().unwrap();
        let (mean, var) = (&p.get("bn.running_mean").unwrap().data, &p.get("bn.running_var").unwrap().data);
        for k in 0..c {
            let (m, _, unbiased) = stats(k);
            let (want_mean, want_var) = (0.1 * m, 0.9 + 0.1 * unbiased);
            assert!(
                (mean[k] - want_mean).abs() <= 1e-5 * (1.0 + want_mean.abs()),
                "{target:?}: {mean:?} vs {want_mean}"
            );
            assert!((var[k] - want_var).abs() <= 1e-5 * (1.0 + want_var), "{target:?}: {var:?} vs {want_var}");
        }
        assert_ne!(p.get("bn.weight").unwrap().data, vec![1.0; c], "{target:?}: the weight learns");
    }
}
