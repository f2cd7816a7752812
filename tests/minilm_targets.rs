//! all-MiniLM-L6-v2 with its real weights on the CPU, Candle (CPU device) and WGSL targets at O0
//! and O2, against sentence-transformers' embeddings (`fixtures/minilm`), tolerance 1e-4
//! absolute.

use rustral::frontend::{ParamStore, TraceOptions, trace_named};
use rustral::models::{Bert, BertConfig, find_minilm_dir};
use rustral::prelude::*;
use std::path::PathBuf;

mod common;

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fixtures/minilm").join(name)
}

fn rows(v: &serde_json::Value) -> Vec<f64> {
    v.as_array().unwrap().iter().flat_map(|r| r.as_array().unwrap().iter().map(|x| x.as_f64().unwrap())).collect()
}

#[test]
fn minilm_embeddings_on_every_target_match_sentence_transformers() {
    let dir = find_minilm_dir().unwrap_or_else(|e| panic!("{e}"));
    let model = Bert { config: BertConfig::from_file(&dir.join("config.json")).unwrap() };
    let traced = trace_named(TraceOptions::default(), |ctx| {
        let (ids, types, mask) = model.inputs(ctx)?;
        let hidden = model.forward(ctx, &ids, &types, &mask)?;
        Ok(vec![("sentence_embedding".into(), model.sentence_embedding(ctx, &hidden, &mask)?)])
    })
    .unwrap();
    let store =
        ParamStore::load_safetensors(&dir.join("model.safetensors"), &traced.params, model.unused_weights()).unwrap();
    let tokens: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(fixture("tokens.json")).unwrap()).unwrap();
    let (b, s) = (6, 13);
    let inputs = [
        ("input_ids", HostTensor::new(DType::I64, &[b, s], rows(&tokens["input_ids"])).unwrap()),
        ("token_type_ids", HostTensor::new(DType::I64, &[b, s], rows(&tokens["token_type_ids"])).unwrap()),
        ("attention_mask", HostTensor::new(DType::F32, &[b, s], rows(&tokens["attention_mask"])).unwrap()),
    ];
    let want: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(fixture("embeddings.json")).unwrap()).unwrap();
    let want = rows(&want["embeddings"]);
    let mut targets = vec![("cpu", Target::Cpu), ("candle-cpu", Target::Candle(rustral::runtime::candle::Device::Cpu))];
    if common::wgsl_available() {
        targets.push(("wgsl", Target::Wgsl));
    }
    for (name, target) in targets {
        for level in [OptLevel::O0, OptLevel::O2] {
            let options = CompileOptions { level, ..CompileOptions::default() };
            let mut session = Session::compile(&traced.graph, target.clone(), &options).unwrap();
            if level == OptLevel::O2 {
                assert_eq!(session.stats().fused["attention"], 6);
            }
            session.bind(&store).unwrap();
            if level == OptLevel::O2 && name == "wgsl" {
                // The browser demo's program (web/demo), checked against these numbers.
                let feeds: Vec<(String, HostTensor)> = inputs.iter().map(|(n, v)| (n.to_string(), v.clone())).collect();
                common::web_dump("minilm-real", &session, &traced, &store, &options, &feeds);
                if let Some(root) = std::env::var_os("RUSTRAL_WEB_DUMP") {
                    let to = std::path::Path::new(&root).join("minilm-real/vocab.txt");
                    std::fs::copy(dir.join("vocab.txt"), to).unwrap();
                }
            }
            let got = session.run(&inputs).unwrap().remove(0).1.to_vec();
            let err = got.iter().zip(&want).map(|(a, b)| (a - b).abs()).fold(0.0, f64::max);
            println!("minilm on {name} ({level:?}): max abs error {err:.2e} against sentence-transformers");
            assert!(err < 1e-4, "{name} {level:?}: {err}");
        }
    }
}
