//! Gradients of the tiny GPT-2 and tiny LLaMA causal-LM losses, from the grad pass compiled for
//! the CPU target at O2, against PyTorch autograd (`fixtures/tiny-*/grads.safetensors`).
//! Tolerance: 1e-4 relative to the largest gradient of the model.

use rustral::frontend::nn::cross_entropy;
use rustral::frontend::{ForwardCtx, ParamStore, ShapePolicy, Tensor, TraceOptions, trace};
use rustral::models::{Gpt2, Gpt2Config, Llama, LlamaConfig};
use rustral::passes::grad::grad_output_name;
use rustral::prelude::*;
use rustral::train::training_graph;
use std::path::PathBuf;

fn fixture(dir: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fixtures").join(dir)
}

fn input_ids(dir: &str) -> HostTensor {
    let io: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(fixture(dir).join("io.json")).unwrap()).unwrap();
    let ids: Vec<f64> = io["input_ids"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|r| r.as_array().unwrap().iter().map(|v| v.as_f64().unwrap()))
        .collect();
    HostTensor::new(DType::I64, &[2, 16], ids).unwrap()
}

/// Trace `logits_of` with Hugging Face's causal LM loss, build the training step's graph as
/// `Trainer` does (fuse at O2, so the loss is one `cross_entropy` op differentiated by its own
/// rule, then differentiate with respect to every parameter), compile at O2 for the CPU target
/// and compare with PyTorch's gradients.
fn check(
    dir: &str,
    logits_of: &dyn Fn(&mut ForwardCtx, &Tensor) -> rustral::frontend::Result<Tensor>,
    input: &dyn Fn(&mut ForwardCtx) -> rustral::frontend::Result<Tensor>,
) {
    let options =
        TraceOptions { shape: ShapePolicy::symbolic().pin("batch", 2).pin("seq", 16), ..TraceOptions::default() };
    let traced = trace(options, |ctx| {
        let x = input(ctx)?;
        let logits = logits_of(ctx, &x)?;
        Ok(vec![cross_entropy(ctx, &logits.slice(1, 0, 15usize)?, &x.slice(1, 1, 16usize)?)?])
    })
    .unwrap();
    let names: Vec<String> = traced.params.iter().map(|p| p.name.clone()).collect();
    let g = training_graph(&traced.graph, "out0", &names, &CompileOptions::default()).unwrap();
    let mut s = Session::compile(&g, Target::Cpu, &CompileOptions::default()).unwrap();
    assert_eq!(s.stats().fused["cross_entropy"], 1, "the loss is one fused op");
    println!(
        "{dir}: {} nodes to differentiate, {} after grad and O2, fused {:?}",
        traced.graph.len(),
        s.graph().len(),
        s.stats().fused
    );
    let store = ParamStore::load_safetensors(&fixture(dir).join("model.safetensors"), &traced.params, &[]).unwrap();
    s.bind(&store).unwrap();
    let out = s.run(&[("input_ids", input_ids(dir))]).unwrap();
    let want = ParamStore::load_safetensors(&fixture(dir).join("grads.safetensors"), &traced.params, &[]).unwrap();
    let largest = want.iter().flat_map(|(_, v)| v.data.iter().map(|x| x.abs())).fold(0.0, f64::max);
    let mut worst: f64 = 0.0;
    for name in &names {
        let got = &out.iter().find(|(n, _)| *n == grad_output_name(name)).unwrap().1;
        let w = want.get(name).unwrap();
        assert_eq!(got.shape(), w.shape.as_slice(), "{name}");
        for (a, b) in got.to_vec().iter().zip(&w.data) {
            let e = (a - b).abs() / largest;
            assert!(e <= 1e-4, "{dir} {name}: {a} vs torch {b} ({e:.2e} of the largest gradient {largest})");
            worst = worst.max(e);
        }
    }
    println!("{dir}: {} gradients, worst error {worst:.2e} of the largest gradient ({largest:.3e})", names.len());
}

#[test]
fn tiny_gpt2_gradients_match_pytorch_autograd() {
    let gpt2 = Gpt2 { config: Gpt2Config::from_file(&fixture("tiny-gpt2").join("config.json")).unwrap() };
    check("tiny-gpt2", &|ctx, x| gpt2.forward(ctx, x), &|ctx| gpt2.input(ctx));
}

#[test]
fn tiny_llama_gradients_match_pytorch_autograd() {
    let llama = Llama { config: LlamaConfig::from_file(&fixture("tiny-llama").join("config.json")).unwrap() };
    check("tiny-llama", &|ctx, x| llama.forward(ctx, x), &|ctx| llama.input(ctx));
}
