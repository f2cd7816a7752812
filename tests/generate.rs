//! Text generation against Hugging Face: greedy ids of `generate(do_sample=False)` on the tiny
//! GPT-2 and LLaMA fixtures (`fixtures/generate/make_generate.py` made them), on every target,
//! with and without the KV cache; seeded sampling reproducible and equal across targets; the
//! logits processors against HF's; tokenizer and chat template against HF's rendering.

use rustral::generate::sampling::{SamplingConfig, penalize, probabilities};
use rustral::generate::text::{Message, StreamDecoder, TextTokenizer};
use rustral::generate::{CausalLm, GenerationConfig, Generator, GeneratorOptions, load_weights};
use rustral::{CompileOptions, Target};
use std::path::PathBuf;

mod common;

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fixtures")
}

/// `(model kind, directory)` of each fixture model in `greedy.json`.
fn model_dir(name: &str) -> (&'static str, PathBuf) {
    match name {
        "tiny-gpt2" => ("gpt2", fixtures().join("tiny-gpt2")),
        "gpt2-wide" => ("gpt2", fixtures().join("generate/gpt2-wide")),
        "tiny-llama" => ("llama", fixtures().join("tiny-llama")),
        other => panic!("no fixture model {other}"),
    }
}

fn greedy_cases() -> Vec<(String, Vec<i64>, Vec<i64>)> {
    let text = std::fs::read_to_string(fixtures().join("generate/greedy.json")).unwrap();
    let g: serde_json::Value = serde_json::from_str(&text).unwrap();
    let mut cases = vec![];
    for (model, runs) in g["models"].as_object().unwrap() {
        for run in runs.as_array().unwrap() {
            let ids = |k: &str| run[k].as_array().unwrap().iter().map(|v| v.as_i64().unwrap()).collect::<Vec<_>>();
            cases.push((model.clone(), ids("prompt_ids"), ids("ids")));
        }
    }
    cases
}

fn generator(model: &str, target: Target, cached: bool) -> Generator {
    let (kind, dir) = model_dir(model);
    let lm = CausalLm::from_config(kind, &dir.join("config.json")).unwrap();
    let params = load_weights(&lm, &dir.join("model.safetensors")).unwrap();
    let options = GeneratorOptions {
        target,
        compile: CompileOptions { threads: 2, ..CompileOptions::default() },
        capacity: None,
        cached,
        ..GeneratorOptions::default()
    };
    Generator::new(lm, &params, &options).unwrap()
}

fn targets() -> Vec<(&'static str, Target)> {
    vec![
        ("cpu", Target::Cpu),
        ("candle-cpu", Target::Candle(rustral::runtime::candle::Device::Cpu)),
        ("wgsl", Target::Wgsl),
    ]
}

fn greedy(g: &Generator, prompt: &[i64], n: usize) -> Vec<i64> {
    let config = GenerationConfig { max_new_tokens: n, ..GenerationConfig::default() };
    g.generate(prompt, &config, &mut |_| true).unwrap().ids
}

#[test]
fn greedy_ids_match_transformers_on_every_target_cached_and_uncached() {
    for model in ["tiny-gpt2", "gpt2-wide", "tiny-llama"] {
        for (target_name, target) in targets() {
            for cached in [true, false] {
                let g = generator(model, target.clone(), cached);
                for (m, prompt, expected) in greedy_cases().into_iter().filter(|(m, ..)| m == model) {
                    let got = greedy(&g, &prompt, expected.len());
                    assert_eq!(got, expected, "{m} on {target_name} (cached {cached}), prompt {prompt:?}");
                }
                assert_eq!(g.compilations(), if cached { 2 } else { 1 }, "compiled once, however many steps");
            }
        }
    }
}

#[test]
fn seeded_sampling_is_reproducible_and_the_same_on_every_target() {
    let sampling = SamplingConfig { temperature: 0.9, top_k: 20, top_p: 0.9, repetition_penalty: 1.1, seed: 3 };
    let config = GenerationConfig { max_new_tokens: 16, sampling, eos_ids: vec![] };
    let prompt = [45, 39, 24];
    let mut runs = vec![];
    for (name, target) in targets() {
        let g = generator("gpt2-wide", target, true);
        let ids = g.generate(&prompt, &config, &mut |_| true).unwrap().ids;
        assert_eq!(ids, g.generate(&prompt, &config, &mut |_| true).unwrap().ids, "{name}: the same seed twice");
        runs.push((name, ids));
    }
    for (name, ids) in &runs[1..] {
        assert_eq!(ids, &runs[0].1, "{name} against {}", runs[0].0);
    }
    let g = generator("gpt2-wide", Target::Cpu, true);
    let other = GenerationConfig { sampling: SamplingConfig { seed: 4, ..config.sampling.clone() }, ..config.clone() };
    assert_ne!(g.generate(&prompt, &other, &mut |_| true).unwrap().ids, runs[0].1, "another seed");
    let greedy_ids = greedy(&g, &prompt, 16);
    assert_ne!(greedy_ids, runs[0].1, "sampling differs from greedy");
}

#[test]
fn eos_and_the_callback_stop_generation_and_the_cache_bounds_it() {
    let g = generator("gpt2-wide", Target::Cpu, true);
    let (_, prompt, expected) = greedy_cases().into_iter().find(|(m, ..)| m == "gpt2-wide").unwrap();
    let eos = GenerationConfig { max_new_tokens: 20, eos_ids: vec![expected[3]], ..GenerationConfig::default() };
    let out = g.generate(&prompt, &eos, &mut |_| true).unwrap();
    assert_eq!(out.ids, expected[..=expected.iter().position(|&t| t == expected[3]).unwrap()].to_vec());
    assert_eq!(out.stop, rustral::generate::StopReason::Eos);
    let mut seen = 0;
    let out = g.generate(&prompt, &GenerationConfig::default(), &mut |_| {
        seen += 1;
        seen < 4
    });
    assert_eq!(out.unwrap().ids, expected[..4].to_vec());
    // 32 positions: a 30-token prompt leaves room for 3 tokens (the last fed at position 31).
    let long: Vec<i64> = (0..30).map(|i| (i * 7) % 100).collect();
    let out = g
        .generate(&long, &GenerationConfig { max_new_tokens: 10, ..GenerationConfig::default() }, &mut |_| true)
        .unwrap();
    assert_eq!((out.ids.len(), out.stop), (3, rustral::generate::StopReason::ContextFull));
    let uncached = generator("gpt2-wide", Target::Cpu, false);
    assert_eq!(greedy(&uncached, &long, 10), out.ids, "the uncached program stops at the same place");
    let too_long: Vec<i64> = vec![1; 33];
    let err = g.generate(&too_long, &GenerationConfig::default(), &mut |_| true).unwrap_err().to_string();
    assert!(err.contains("33 tokens") && err.contains("32 positions"), "{err}");
    let err = g.generate(&[100], &GenerationConfig::default(), &mut |_| true).unwrap_err().to_string();
    assert!(err.contains("outside the vocabulary"), "{err}");
}

/// HF's `RepetitionPenaltyLogitsProcessor`, `TemperatureLogitsWarper`, `TopKLogitsWarper` and
/// `TopPLogitsWarper`, applied in `generate`'s order, then softmax: within 1e-6.
#[test]
fn logits_processing_matches_transformers() {
    let text = std::fs::read_to_string(fixtures().join("generate/processors.json")).unwrap();
    let f: serde_json::Value = serde_json::from_str(&text).unwrap();
    let floats = |v: &serde_json::Value| v.as_array().unwrap().iter().map(|x| x.as_f64().unwrap()).collect::<Vec<_>>();
    let logits = floats(&f["logits"]);
    let previous: Vec<i64> = f["previous_ids"].as_array().unwrap().iter().map(|v| v.as_i64().unwrap()).collect();
    for case in f["cases"].as_array().unwrap() {
        let config = SamplingConfig {
            temperature: case["temperature"].as_f64().unwrap(),
            top_k: case["top_k"].as_u64().unwrap() as usize,
            top_p: case["top_p"].as_f64().unwrap(),
            repetition_penalty: case["repetition_penalty"].as_f64().unwrap(),
            seed: 0,
        };
        let mut scores = logits.clone();
        penalize(&mut scores, &previous, config.repetition_penalty);
        let got = probabilities(&scores, &config);
        for (i, (g, e)) in got.iter().zip(floats(&case["probs"])).enumerate() {
            assert!((g - e).abs() < 1e-6, "{config:?}: token {i}: {g} vs transformers' {e}");
        }
    }
}

#[test]
fn tokenizer_and_chat_template_match_transformers() {
    let dir = fixtures().join("generate/tokenizer");
    let tok = TextTokenizer::from_file(&dir.join("tokenizer.json")).unwrap();
    let chat: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("chat.json")).unwrap()).unwrap();
    let messages: Vec<Message> = chat["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| Message { role: m["role"].as_str().unwrap().into(), content: m["content"].as_str().unwrap().into() })
        .collect();
    let rendered = tok.render_chat(&messages).unwrap();
    assert_eq!(rendered, chat["rendered"].as_str().unwrap());
    let ids: Vec<i64> = chat["ids"].as_array().unwrap().iter().map(|v| v.as_i64().unwrap()).collect();
    assert_eq!(tok.encode(&rendered).unwrap(), ids);
    let text_ids: Vec<i64> = chat["text_ids"].as_array().unwrap().iter().map(|v| v.as_i64().unwrap()).collect();
    assert_eq!(tok.encode(chat["text"].as_str().unwrap()).unwrap(), text_ids);
    assert_eq!(tok.decode(&text_ids).unwrap(), chat["text"].as_str().unwrap());
    assert_eq!(tok.eos_id(), Some(1));
}

/// A byte-level BPE (GPT-2's kind) splits `é` into two tokens, one per UTF-8 byte: streaming
/// prints nothing after the first and the whole character after the second.
#[test]
fn streaming_never_splits_a_character() {
    use tokenizers::models::bpe::BPE;
    use tokenizers::pre_tokenizers::byte_level::ByteLevel;
    let alphabet = ByteLevel::alphabet();
    let mut chars: Vec<char> = alphabet.into_iter().collect();
    chars.sort_unstable();
    let vocab: tokenizers::models::bpe::Vocab =
        chars.iter().enumerate().map(|(i, c)| (c.to_string(), i as u32)).collect();
    let bpe = BPE::builder().vocab_and_merges(vocab, vec![]).build().unwrap();
    let mut t = tokenizers::Tokenizer::new(bpe);
    t.with_pre_tokenizer(Some(ByteLevel::default().add_prefix_space(false)));
    t.with_decoder(Some(ByteLevel::default()));
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tokenizer.json");
    t.save(&path, false).unwrap();
    let tok = TextTokenizer::from_file(&path).unwrap();
    let ids = tok.encode("aé!").unwrap();
    assert_eq!(ids.len(), 4, "a, two bytes of é, !");
    let mut stream = StreamDecoder::new(&tok);
    let pieces: Vec<String> = ids.iter().map(|&id| stream.push(id).unwrap()).collect();
    assert_eq!(pieces, ["a", "", "é", "!"]);
}

#[test]
fn a_template_feature_minijinja_lacks_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(fixtures().join("generate/tokenizer/tokenizer.json"), dir.path().join("tokenizer.json")).unwrap();
    let config = serde_json::json!({"chat_template": "{{ messages | no_such_filter }}", "eos_token": "<|im_end|>"});
    std::fs::write(dir.path().join("tokenizer_config.json"), config.to_string()).unwrap();
    let tok = TextTokenizer::from_file(&dir.path().join("tokenizer.json")).unwrap();
    let err = tok.render_chat(&[Message { role: "user".into(), content: "hi".into() }]).unwrap_err().to_string();
    assert!(err.contains("chat template") && err.contains("no_such_filter"), "{err}");
    std::fs::remove_file(dir.path().join("tokenizer_config.json")).unwrap();
    let tok = TextTokenizer::from_file(&dir.path().join("tokenizer.json")).unwrap();
    let err = tok.render_chat(&[]).unwrap_err().to_string();
    assert!(err.contains("chat_template"), "{err}");
}

/// A 1-D `<i8` (int64) .npy file.
fn write_npy(path: &std::path::Path, ids: &[i64]) {
    let data: Vec<u8> = ids.iter().flat_map(|v| v.to_le_bytes()).collect();
    std::fs::write(path, common::npy_bytes("<i8", &[ids.len() as u64], &data)).unwrap();
}

fn cli(args: &[&str]) -> assert_cmd::assert::Assert {
    assert_cmd::Command::cargo_bin("rustral-generate").unwrap().args(args).assert()
}

/// The command compiles the decode program once however many tokens it makes, and its ids
/// are Hugging Face's.
#[test]
fn rustral_generate_compiles_once_and_matches_transformers() {
    let dir = tempfile::tempdir().unwrap();
    let (_, prompt, expected) = greedy_cases().into_iter().find(|(m, ..)| m == "gpt2-wide").unwrap();
    let ids = dir.path().join("ids.npy");
    write_npy(&ids, &prompt);
    let model = fixtures().join("generate/gpt2-wide");
    let (config, weights) = (model.join("config.json"), model.join("model.safetensors"));
    let base = ["--model", "gpt2", "--config", config.to_str().unwrap(), "--weights", weights.to_str().unwrap()];
    for n in ["3", "20"] {
        let mut args = base.to_vec();
        args.extend(["--prompt-ids", ids.to_str().unwrap(), "--max-new-tokens", n, "--json", "--threads", "1"]);
        let out = cli(&args).success().get_output().stdout.clone();
        let json: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(json["compilations"], 2, "prefill and decode, once each, for {n} tokens");
        let got: Vec<i64> = json["ids"].as_array().unwrap().iter().map(|v| v.as_i64().unwrap()).collect();
        assert_eq!(got, expected[..n.parse::<usize>().unwrap()].to_vec());
        assert_eq!(json["decode_ms"].as_array().unwrap().len(), n.parse::<usize>().unwrap() - 1);
        assert!(json["prefill_ms"].as_f64().unwrap() > 0.0 && json["text"].is_null());
    }
    // Ids only, streamed, without a tokenizer.
    let mut args = base.to_vec();
    args.extend(["--prompt-ids", ids.to_str().unwrap(), "--max-new-tokens", "4"]);
    let out = String::from_utf8(cli(&args).success().get_output().stdout.clone()).unwrap();
    let shown: Vec<i64> = out.split_whitespace().map(|t| t.parse().unwrap()).collect();
    assert_eq!(shown, expected[..4].to_vec());
    // Clear errors: a text prompt without a tokenizer, a prompt past the positions, a chat
    // template that is missing.
    let mut args = base.to_vec();
    args.extend(["--prompt", "hello"]);
    let err = String::from_utf8(cli(&args).code(1).get_output().stderr.clone()).unwrap();
    assert!(err.contains("needs --tokenizer"), "{err}");
    write_npy(&ids, &[5; 40]);
    let mut args = base.to_vec();
    args.extend(["--prompt-ids", ids.to_str().unwrap()]);
    let err = String::from_utf8(cli(&args).code(1).get_output().stderr.clone()).unwrap();
    assert!(err.contains("40 tokens") && err.contains("32 positions"), "{err}");
    let tok_dir = tempfile::tempdir().unwrap();
    std::fs::copy(fixtures().join("generate/tokenizer/tokenizer.json"), tok_dir.path().join("tokenizer.json")).unwrap();
    let tok = tok_dir.path().join("tokenizer.json");
    let mut args = base.to_vec();
    args.extend(["--tokenizer", tok.to_str().unwrap(), "--chat", "--prompt", "hi"]);
    let err = String::from_utf8(cli(&args).code(1).get_output().stderr.clone()).unwrap();
    assert!(err.contains("chat_template"), "{err}");
}

/// A text prompt streams text; `--stop` ends generation at the first occurrence.
#[test]
fn rustral_generate_streams_text_and_stops_at_a_stop_string() {
    let model = fixtures().join("generate/gpt2-wide");
    let tok = fixtures().join("generate/tokenizer/tokenizer.json");
    let (config, weights) = (model.join("config.json"), model.join("model.safetensors"));
    let base = [
        "--model",
        "gpt2",
        "--config",
        config.to_str().unwrap(),
        "--weights",
        weights.to_str().unwrap(),
        "--tokenizer",
        tok.to_str().unwrap(),
        "--prompt",
        "Hello",
        "--max-new-tokens",
        "12",
        "--threads",
        "1",
    ];
    let mut args = base.to_vec();
    args.push("--json");
    let json: serde_json::Value = serde_json::from_slice(&cli(&args).success().get_output().stdout.clone()).unwrap();
    let text = json["text"].as_str().unwrap().to_string();
    let tokenizer = TextTokenizer::from_file(&tok).unwrap();
    let ids: Vec<i64> = json["ids"].as_array().unwrap().iter().map(|v| v.as_i64().unwrap()).collect();
    assert_eq!(text, tokenizer.decode(&ids).unwrap());
    let streamed = String::from_utf8(cli(&base).success().get_output().stdout.clone()).unwrap();
    assert_eq!(streamed, format!("{text}\n"), "the stream is the text, then a newline");
    let stop: String = text.chars().skip(3).take(2).collect();
    let mut args = base.to_vec();
    args.extend(["--stop", &stop, "--json"]);
    let json: serde_json::Value = serde_json::from_slice(&cli(&args).success().get_output().stdout.clone()).unwrap();
    let stopped = json["text"].as_str().unwrap();
    assert!(stopped.ends_with(&stop) && stopped.len() < text.len(), "{stopped:?} should end at {stop:?}");
    assert_eq!(json["stop"], "callback");
}

/// The passes keep one cache write per layer and key/value, fuse around them, and leave the
/// cache ops unfused: the O2 decode graph has 2 `update_slice` and 1 `cached_attention` per
/// layer, like the traced one.
#[test]
fn the_passes_keep_every_cache_write() {
    let (kind, dir) = model_dir("tiny-llama");
    let lm = CausalLm::from_config(kind, &dir.join("config.json")).unwrap();
    let traced = lm.trace(Some(16)).unwrap();
    let count =
        |g: &rustral::ir::Graph, name: &str| g.node_ids().filter(|&id| g.node(id).unwrap().op.name() == name).count();
    for level in [rustral::passes::OptLevel::O0, rustral::passes::OptLevel::O2] {
        let options = CompileOptions { level, ..CompileOptions::default() };
        let s = rustral::Session::compile(&traced.graph, Target::Cpu, &options).unwrap();
        assert_eq!(count(s.graph(), "update_slice"), 4, "{level:?}");
        assert_eq!(count(s.graph(), "cached_attention"), 2, "{level:?}");
        assert_eq!(s.carried().len(), 4, "{level:?}: every present.* carried");
    }
    assert_eq!(count(&traced.graph, "update_slice"), 4);
}
