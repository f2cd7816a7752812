//! O2 on every model: the fused counts the issue asks for, the same outputs as the unoptimised
//! graph on the reference interpreter, and snapshots of each small model before and after.

mod common;
use common::{assert_same_outputs, compile, feeds, params};
use rustral_frontend::{TraceOptions, Traced, trace, trace_named};
use rustral_models::{Bert, BertConfig, Gpt2, Gpt2Config, Llama, LlamaConfig, MlpConfig, MlpModel};
use rustral_passes::OptLevel;
use std::path::PathBuf;

fn fixture(path: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fixtures").join(path)
}

fn bert(config: BertConfig) -> Traced {
    let m = Bert { config };
    trace_named(TraceOptions { name: "bert".into(), ..TraceOptions::default() }, |ctx| {
        let (ids, types, mask) = m.inputs(ctx)?;
        let h = m.forward(ctx, &ids, &types, &mask)?;
        let e = m.sentence_embedding(ctx, &h, &mask)?;
        Ok(vec![("last_hidden_state".into(), h), ("embeddings".into(), e)])
    })
    .unwrap()
}

fn gpt2(config: Gpt2Config) -> Traced {
    let m = Gpt2 { config };
    trace(TraceOptions { name: "gpt2".into(), ..TraceOptions::default() }, |ctx| {
        let x = m.input(ctx)?;
        Ok(vec![m.forward(ctx, &x)?])
    })
    .unwrap()
}

fn llama(config: LlamaConfig) -> Traced {
    let m = Llama { config };
    trace(TraceOptions { name: "llama".into(), ..TraceOptions::default() }, |ctx| {
        let x = m.input(ctx)?;
        Ok(vec![m.forward(ctx, &x)?])
    })
    .unwrap()
}

fn fused(c: &rustral_passes::Compiled, kind: &str) -> usize {
    c.stats.fused[kind]
}

/// all-MiniLM-L6-v2's real config: 13 LayerNorms, 6 attentions, 6 GELUs, all fused.
#[test]
fn minilm_l6_fuses_every_layer_norm_attention_and_gelu() {
    let t = bert(BertConfig::from_file(&fixture("minilm/model_files/config.json")).unwrap());
    let (_, c) = compile(&t.graph, OptLevel::O2);
    assert_eq!(fused(&c, "layer_norm"), 13);
    assert_eq!(fused(&c, "attention"), 6);
    assert_eq!(fused(&c, "gelu"), 6);
    assert_eq!(fused(&c, "softmax"), 0, "every softmax is inside an attention");
    assert_eq!(fused(&c, "matmul_epilogue"), 36, "q, k, v, output, intermediate, output per layer");
    println!("minilm O2: {:?}, {} nodes", c.stats.fused, c.stats.nodes);
}

#[test]
fn gpt2_and_llama_fuse_norms_attention_activations_epilogues() {
    let t = gpt2(Gpt2Config::from_file(&fixture("tiny-gpt2/config.json")).unwrap());
    let (_, c) = compile(&t.graph, OptLevel::O2);
    assert_eq!((fused(&c, "layer_norm"), fused(&c, "attention"), fused(&c, "gelu")), (5, 2, 2));
    assert_eq!(fused(&c, "matmul_epilogue"), 8, "c_attn, c_proj, c_fc (+gelu), mlp.c_proj per block");
    let t = llama(LlamaConfig::from_file(&fixture("tiny-llama/config.json")).unwrap());
    let (_, c) = compile(&t.graph, OptLevel::O2);
    assert_eq!((fused(&c, "rms_norm"), fused(&c, "attention"), fused(&c, "silu")), (5, 2, 2));
    assert_eq!(fused(&c, "softmax"), 0);
}

/// Every model, O2 against the unoptimised graph on the same inputs. Tolerance: 1e-5
/// absolute plus 1e-4 relative (fused ops round once where primitives round at every step).
#[test]
fn o2_matches_unoptimised_on_every_model() {
    let mlp = {
        let m = MlpModel { config: MlpConfig::default() };
        trace(TraceOptions::default(), |ctx| Ok(vec![m.trace(ctx)?])).unwrap()
    };
    for (name, t) in [
        ("mlp", mlp),
        ("bert", bert(BertConfig::tiny(2))),
        ("gpt2", gpt2(Gpt2Config::tiny(2))),
        ("llama", llama(LlamaConfig::tiny(2))),
    ] {
        let store = params(&t);
        let f = feeds(&t.graph, Some(&store), &[("batch", 2), ("seq", 5)], 50);
        for level in [OptLevel::O1, OptLevel::O2] {
            let (opt, _) = compile(&t.graph, level);
            let worst = assert_same_outputs(&t.graph, &opt, &f, 1e-5, 1e-4);
            println!("{name} {level:?}: max abs difference {worst:.2e}");
        }
    }
}

macro_rules! snapshot {
    ($name:expr, $value:expr) => {
        insta::with_settings!({
            snapshot_path => concat!(env!("CARGO_MANIFEST_DIR"), "/../snapshots/passes"),
            prepend_module_to_snapshot => false,
            omit_expression => true,
        }, {
            insta::assert_snapshot!($name, $value);
        })
    };
}

#[test]
fn small_models_before_and_after_o2() {
    for (name, t) in [
        ("bert", bert(BertConfig::tiny(1))),
        ("gpt2", gpt2(Gpt2Config::tiny(1))),
        ("llama", llama(LlamaConfig::tiny(1))),
    ] {
        let (opt, c) = compile(&t.graph, OptLevel::O2);
        // Without source locations: the snapshots hold structure, which moving a model's code
        // between lines does not change (tests/locations.rs checks the locations).
        let structure = |g: &rustral_ir::Graph| {
            let mut g = g.clone();
            g.clear_locs();
            rustral_ir::print(&g)
        };
        snapshot!(format!("{name}_O0"), structure(&t.graph));
        snapshot!(format!("{name}_O2"), structure(&opt));
        let (again, _) = compile(&t.graph, OptLevel::O2);
        assert_eq!(rustral_ir::print(&again), rustral_ir::print(&opt), "{name}: deterministic");
        assert!(c.stats.nodes < t.graph.len(), "{name}: O2 has {} of {} nodes", c.stats.nodes, t.graph.len());
    }
}
