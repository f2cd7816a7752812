//! Traced graphs of 1-layer configs: snapshots (under `snapshots/models`), provenance on every
//! node, and train vs inference tracing.

use rustral_frontend::{Mode, TraceOptions, Traced, trace, trace_named};
use rustral_ir::{Graph, Op, print};
use rustral_models::{Bert, BertConfig, Gpt2, Gpt2Config, Llama, LlamaConfig, MlpConfig, MlpModel};
use std::collections::BTreeMap;

fn options(mode: Mode, seed: u64) -> TraceOptions {
    TraceOptions { mode, seed, ..TraceOptions::default() }
}

fn bert(mode: Mode, seed: u64) -> Traced {
    let model = Bert { config: BertConfig::tiny(1) };
    trace_named(TraceOptions { name: "bert".into(), ..options(mode, seed) }, |ctx| {
        let (ids, types, mask) = model.inputs(ctx)?;
        let h = model.forward(ctx, &ids, &types, &mask)?;
        Ok(vec![("last_hidden_state".into(), h)])
    })
    .unwrap()
}

fn gpt2(mode: Mode, seed: u64) -> Traced {
    let model = Gpt2 { config: Gpt2Config::tiny(1) };
    trace(TraceOptions { name: "gpt2".into(), ..options(mode, seed) }, |ctx| {
        let ids = model.input(ctx)?;
        Ok(vec![model.forward(ctx, &ids)?])
    })
    .unwrap()
}

fn llama() -> Traced {
    let model = Llama { config: LlamaConfig::tiny(1) };
    trace(TraceOptions { name: "llama".into(), ..TraceOptions::default() }, |ctx| {
        let ids = model.input(ctx)?;
        Ok(vec![model.forward(ctx, &ids)?])
    })
    .unwrap()
}

macro_rules! snapshot {
    ($name:expr, $value:expr) => {
        insta::with_settings!({
            snapshot_path => concat!(env!("CARGO_MANIFEST_DIR"), "/../snapshots/models"),
            prepend_module_to_snapshot => false,
            omit_expression => true,
        }, {
            insta::assert_snapshot!($name, $value);
        })
    };
}

/// The text form without source locations: the snapshots hold a model's structure, so moving
/// its code between lines leaves them alone (`locations_name_the_models_own_lines` checks the
/// locations).
fn structure(g: &rustral_ir::Graph) -> String {
    let mut g = g.clone();
    g.clear_locs();
    print(&g)
}

#[test]
fn one_layer_models_trace_as_snapshotted() {
    snapshot!("bert_1layer", structure(&bert(Mode::Inference, 0).graph));
    snapshot!("gpt2_1layer", structure(&gpt2(Mode::Inference, 0).graph));
    snapshot!("llama_1layer", structure(&llama().graph));
}

/// Every traced node records the line of the models' code that made it: a file of this crate
/// (the layers are `#[track_caller]`, so a layer's nodes name the model line that called it).
#[test]
fn locations_name_the_models_own_lines() {
    for (name, g) in [("bert", bert(Mode::Inference, 0).graph), ("gpt2", gpt2(Mode::Inference, 0).graph)] {
        for id in g.node_ids() {
            let n = g.node(id).unwrap();
            assert_eq!(n.loc.len(), 1, "{name}: node {} ({}) has locations {:?}", id.index(), n.op.name(), n.loc);
            let file = &n.loc[0].file;
            // Never a line of the frontend's layers: those name the model line that called them.
            assert!(
                file.starts_with("models/src/") || file.starts_with("models/tests/"),
                "{name}: {} ({}) located in {file}",
                n.op.name(),
                n.provenance
            );
        }
    }
}

/// Every node but the inputs names the module that traced it, and every layer appears.
#[test]
fn provenance_names_every_layer() {
    let check = |g: &Graph, layers: &[&str]| {
        for id in g.node_ids() {
            let n = g.node(id).unwrap();
            if !matches!(n.op, Op::Input { .. }) {
                assert!(!n.provenance.is_empty(), "{} has no provenance in {}", n.op.name(), g.name());
            }
        }
        let text = print(g);
        for l in layers {
            assert!(text.contains(&format!("@{l}")), "{l} missing from {}", g.name());
        }
    };
    check(
        &bert(Mode::Inference, 0).graph,
        &[
            "embeddings.word_embeddings",
            "embeddings.LayerNorm",
            "encoder.layer.0.attention.self.query",
            "encoder.layer.0.attention.output.LayerNorm",
            "encoder.layer.0.intermediate.dense",
            "encoder.layer.0.output.LayerNorm",
        ],
    );
    check(
        &gpt2(Mode::Inference, 0).graph,
        &[
            "transformer.h.0.ln_1",
            "transformer.h.0.attn.c_attn",
            "transformer.h.0.attn.causal_mask",
            "transformer.h.0.mlp.c_fc",
            "transformer.ln_f",
            "lm_head",
        ],
    );
    check(
        &llama().graph,
        &[
            "model.layers.0.input_layernorm",
            "model.layers.0.self_attn.rope",
            "model.layers.0.mlp.gate_proj",
            "model.norm",
            "lm_head",
        ],
    );
}

/// (op, provenance) of every node outside dropout scopes, counted (the `rng_step` input the
/// masks read is dropout's too).
fn non_dropout_ops(g: &Graph) -> BTreeMap<(String, String), usize> {
    let mut m = BTreeMap::new();
    for id in g.node_ids() {
        let n = g.node(id).unwrap();
        let step = matches!(&n.op, Op::Input { name } if name == rustral_frontend::RNG_STEP);
        if !n.provenance.ends_with("dropout") && !step {
            *m.entry((n.op.name().to_string(), n.provenance.clone())).or_insert(0) += 1;
        }
    }
    m
}

#[test]
fn train_tracing_differs_from_inference_only_by_dropout() {
    for (name, inf, train, train_again, other_seed) in [
        ("bert", bert(Mode::Inference, 1), bert(Mode::Train, 1), bert(Mode::Train, 1), bert(Mode::Train, 2)),
        ("gpt2", gpt2(Mode::Inference, 1), gpt2(Mode::Train, 1), gpt2(Mode::Train, 1), gpt2(Mode::Train, 2)),
    ] {
        let count = |g: &Graph, f: &dyn Fn(&Op) -> bool| g.node_ids().filter(|&id| f(&g.node(id).unwrap().op)).count();
        let random = |g: &Graph| count(g, &|op| matches!(op, Op::RandomUniform { .. }));
        assert_eq!(random(&inf.graph), 0, "{name}: inference has no dropout nodes");
        // BERT: embeddings, attention probs, attention output, ffn output; GPT-2: embeddings,
        // attention probs, two residuals.
        assert_eq!(random(&train.graph), 4, "{name}: one mask per dropout");
        let step = train.graph.inputs().into_iter().find(|(n, _)| n == rustral_frontend::RNG_STEP).unwrap().1;
        let stepped = train.graph.node_ids().filter(|&id| train.graph.operands(id) == [step]).count();
        assert_eq!(stepped, 4, "{name}: every mask reads the step");
        assert_eq!(non_dropout_ops(&train.graph), non_dropout_ops(&inf.graph), "{name}: only dropout differs");
        assert_eq!(train.params, inf.params);
        assert_eq!(print(&train.graph), print(&train_again.graph), "{name}: deterministic for a seed");
        let seeds = |g: &Graph| -> Vec<u32> {
            g.node_ids()
                .filter_map(|id| match g.node(id).unwrap().op {
                    Op::RandomUniform { seed } => Some(seed),
                    _ => None,
                })
                .collect()
        };
        let (a, b) = (seeds(&train.graph), seeds(&other_seed.graph));
        assert!(a.iter().zip(&b).all(|(x, y)| x != y), "{name}: another seed, other masks");
        let mut distinct = a.clone();
        distinct.sort_unstable();
        distinct.dedup();
        assert_eq!(distinct.len(), a.len(), "{name}: no two dropouts share a mask");
    }
}

#[test]
fn mlp_model_traces() {
    let m = MlpModel { config: MlpConfig::default() };
    let t = trace(TraceOptions::default(), |ctx| Ok(vec![m.trace(ctx)?])).unwrap();
    let names: Vec<&str> = t.params.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(names, ["layers.0.weight", "layers.0.bias", "layers.1.weight", "layers.1.bias"]);
    assert_eq!(t.graph.node(t.graph.outputs()[0].node).unwrap().ty.to_string(), "f32[batch, 4]");
}
