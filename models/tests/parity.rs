//! Reference parity: our traced GPT-2 and LLaMA, run on the reference interpreter with the
//! fixtures' weights, against the logits Hugging Face transformers computed
//! (`fixtures/tiny-*`). Tolerance: 1e-4 absolute on every logit.

mod common;
use common::{feeds, fixture, ids, max_abs_diff, read_npy, run};
use rustral_frontend::{ParamStore, TraceOptions, trace};
use rustral_models::{Gpt2, Gpt2Config, Llama, LlamaConfig};

fn input_ids(dir: &str) -> Vec<Vec<i64>> {
    let io: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(fixture(dir).join("io.json")).unwrap()).unwrap();
    io["input_ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r.as_array().unwrap().iter().map(|v| v.as_i64().unwrap()).collect())
        .collect()
}

#[test]
fn gpt2_logits_match_transformers() {
    let dir = fixture("tiny-gpt2");
    let model = Gpt2 { config: Gpt2Config::from_file(&dir.join("config.json")).unwrap() };
    let traced = trace(TraceOptions::default(), |ctx| {
        let x = model.input(ctx)?;
        Ok(vec![model.forward(ctx, &x)?])
    })
    .unwrap();
    let params = ParamStore::load_safetensors(&dir.join("model.safetensors"), &traced.params, &[]).unwrap();
    let logits = run(&traced, &feeds(&params, vec![("input_ids", ids(&input_ids("tiny-gpt2")))]));
    let (shape, want) = read_npy(&dir.join("logits.npy"));
    assert_eq!(logits.shape(), shape.as_slice());
    let err = max_abs_diff(&logits.to_vec(), &want);
    println!("gpt2 logits: max abs error {err:.3e} over {} values", want.len());
    assert!(err < 1e-4, "max abs error {err}");
}

#[test]
fn llama_logits_match_transformers() {
    let dir = fixture("tiny-llama");
    let model = Llama { config: LlamaConfig::from_file(&dir.join("config.json")).unwrap() };
    let traced = trace(TraceOptions::default(), |ctx| {
        let x = model.input(ctx)?;
        Ok(vec![model.forward(ctx, &x)?])
    })
    .unwrap();
    let params = ParamStore::load_safetensors(&dir.join("model.safetensors"), &traced.params, &[]).unwrap();
    let logits = run(&traced, &feeds(&params, vec![("input_ids", ids(&input_ids("tiny-llama")))]));
    let (shape, want) = read_npy(&dir.join("logits.npy"));
    assert_eq!(logits.shape(), shape.as_slice());
    let err = max_abs_diff(&logits.to_vec(), &want);
    println!("llama logits: max abs error {err:.3e} over {} values", want.len());
    assert!(err < 1e-4, "max abs error {err}");
}

/// Hugging Face's causal LM loss: mean cross-entropy of logits[:, :-1] against ids[:, 1:],
/// traced with `nn::cross_entropy` on a graph pinned to the fixture's [2, 16] shape.
fn causal_lm_loss(
    dir: &str,
    forward: &dyn Fn(&mut rustral_frontend::ForwardCtx) -> rustral_frontend::Result<Vec<rustral_frontend::Tensor>>,
) -> f64 {
    use rustral_frontend::ShapePolicy;
    let options =
        TraceOptions { shape: ShapePolicy::symbolic().pin("batch", 2).pin("seq", 16), ..TraceOptions::default() };
    let traced = trace(options, forward).unwrap();
    let params = ParamStore::load_safetensors(&fixture(dir).join("model.safetensors"), &traced.params, &[]).unwrap();
    run(&traced, &feeds(&params, vec![("input_ids", ids(&input_ids(dir)))])).to_vec()[0]
}

fn fixture_loss(dir: &str) -> f64 {
    let io: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(fixture(dir).join("io.json")).unwrap()).unwrap();
    io["loss"].as_f64().unwrap()
}

#[test]
fn gpt2_and_llama_losses_match_transformers() {
    use rustral_frontend::nn::cross_entropy;
    let gpt2 = Gpt2 { config: Gpt2Config::from_file(&fixture("tiny-gpt2").join("config.json")).unwrap() };
    let loss = causal_lm_loss("tiny-gpt2", &|ctx| {
        let x = gpt2.input(ctx)?;
        let logits = gpt2.forward(ctx, &x)?;
        Ok(vec![cross_entropy(ctx, &logits.slice(1, 0, 15usize)?, &x.slice(1, 1, 16usize)?)?])
    });
    println!("gpt2 loss {loss} vs {}", fixture_loss("tiny-gpt2"));
    assert!((loss - fixture_loss("tiny-gpt2")).abs() < 1e-5);
    let llama = Llama { config: LlamaConfig::from_file(&fixture("tiny-llama").join("config.json")).unwrap() };
    let loss = causal_lm_loss("tiny-llama", &|ctx| {
        let x = llama.input(ctx)?;
        let logits = llama.forward(ctx, &x)?;
        Ok(vec![cross_entropy(ctx, &logits.slice(1, 0, 15usize)?, &x.slice(1, 1, 16usize)?)?])
    });
    println!("llama loss {loss} vs {}", fixture_loss("tiny-llama"));
    assert!((loss - fixture_loss("tiny-llama")).abs() < 1e-5);
}
