//! all-MiniLM-L6-v2 with its real pretrained weights against sentence-transformers
//! (`fixtures/minilm`): tokenization, last hidden states and sentence embeddings.
//! Tolerances: 1e-4 absolute on every embedding and hidden value, cosine > 0.99999.
//! The weights come from `scripts/fetch-minilm.sh`, which `.ci/run` runs first.

mod common;
use common::{f32_tensor, feeds, fixture, ids, max_abs_diff, read_npy};
use rustral_frontend::{ParamStore, TraceOptions, trace_named};
use rustral_models::{Bert, BertConfig, find_minilm_dir, tokenize};
use std::path::PathBuf;

fn tokens() -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(fixture("minilm").join("tokens.json")).unwrap()).unwrap()
}

fn rows(v: &serde_json::Value) -> Vec<Vec<i64>> {
    v.as_array().unwrap().iter().map(|r| r.as_array().unwrap().iter().map(|x| x.as_i64().unwrap()).collect()).collect()
}

fn model_dir() -> PathBuf {
    find_minilm_dir().unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn tokenizer_reproduces_the_reference_ids() {
    let t = tokens();
    let sentences: Vec<&str> = t["sentences"].as_array().unwrap().iter().map(|s| s.as_str().unwrap()).collect();
    // The tokenizer file ships in the fixtures too, so this test does not need the weights.
    let batch = tokenize(&fixture("minilm").join("model_files"), &sentences).unwrap();
    assert_eq!(batch.input_ids, rows(&t["input_ids"]));
    assert_eq!(batch.attention_mask, rows(&t["attention_mask"]));
    assert_eq!(batch.token_type_ids, rows(&t["token_type_ids"]));
}

#[test]
fn minilm_matches_sentence_transformers() {
    let dir = model_dir();
    let model = Bert { config: BertConfig::from_file(&dir.join("config.json")).unwrap() };
    let traced = trace_named(TraceOptions::default(), |ctx| {
        let (ids, types, mask) = model.inputs(ctx)?;
        let hidden = model.forward(ctx, &ids, &types, &mask)?;
        let emb = model.sentence_embedding(ctx, &hidden, &mask)?;
        Ok(vec![("last_hidden_state".into(), hidden), ("embeddings".into(), emb)])
    })
    .unwrap();
    let params =
        ParamStore::load_safetensors(&dir.join("model.safetensors"), &traced.params, model.unused_weights()).unwrap();
    let t = tokens();
    let mask = rows(&t["attention_mask"]);
    let (b, s) = (mask.len(), mask[0].len());
    let mask_values = mask.iter().flatten().map(|&m| m as f64).collect();
    let inputs = vec![
        ("input_ids", ids(&rows(&t["input_ids"]))),
        ("token_type_ids", ids(&rows(&t["token_type_ids"]))),
        ("attention_mask", f32_tensor(&[b, s], mask_values)),
    ];
    let out = rustral_runtime::reference::evaluate(&traced.graph, &feeds(&params, inputs)).unwrap();

    let (shape, want_hidden) = read_npy(&fixture("minilm").join("last_hidden_all.npy"));
    assert_eq!(out[0].1.shape(), shape.as_slice());
    let hidden_err = max_abs_diff(&out[0].1.to_vec(), &want_hidden);

    let (shape, want_emb) = read_npy(&fixture("minilm").join("embeddings.npy"));
    assert_eq!(out[1].1.shape(), shape.as_slice());
    let got = out[1].1.to_vec();
    let emb_err = max_abs_diff(&got, &want_emb);
    let min_cos = got
        .chunks(shape[1])
        .zip(want_emb.chunks(shape[1]))
        .map(|(a, b)| {
            let dot: f64 = a.iter().zip(b).map(|(x, y)| x * y).sum();
            let norm = |v: &[f64]| v.iter().map(|x| x * x).sum::<f64>().sqrt();
            dot / (norm(a) * norm(b))
        })
        .fold(f64::INFINITY, f64::min);
    println!(
        "minilm: last_hidden max abs error {hidden_err:.3e}, embeddings max abs error {emb_err:.3e}, min cosine {min_cos:.9}"
    );
    assert!(hidden_err < 1e-4, "hidden max abs error {hidden_err}");
    assert!(emb_err < 1e-4, "embedding max abs error {emb_err}");
    assert!(min_cos > 0.99999, "min cosine {min_cos}");
}
