//! Text generation through the compiler. One KV-cache trace of a causal LM (see
//! `rustral_frontend::KvCache`) gives two programs that share the parameters and the caches:
//! `prefill` (the prompt, `seq` symbolic) and `decode` (one token, `seq` pinned to 1), each
//! compiled once per [`Generator`]. The caches are run state on the target (CPU memory, candle
//! tensors, wgpu buffers), written in place by `update_slice` and never copied to the host;
//! each step brings back only the last position's logits, and tokens are chosen on the host
//! ([`sampling`]) so that every target picks the same ones from the same logits.
//!
//! Left out for now: batches of several prompts (left padding), speculative decoding.

mod gguf;
pub mod sampling;
pub mod text;

pub use gguf::{GgufModel, load_gguf};

use crate::{CompileOptions, Error, Result, Session, State, Target};
use rustral_frontend::{ParamSpec, ParamStore, QuantFormat, TraceOptions, Traced, trace_named};
use rustral_ir::Graph;
use rustral_models::{Gpt2, Gpt2Config, Llama, LlamaConfig};
use rustral_runtime::HostTensor;
use sampling::{Sampler, SamplingConfig};
use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::time::{Duration, Instant};

/// A causal LM the generator can run.
#[derive(Clone, Debug)]
pub enum CausalLm {
    /// GPT-2 (`GPT2LMHeadModel` checkpoints).
    Gpt2(Gpt2Config),
    /// LLaMA and its relatives (`LlamaForCausalLM` checkpoints: SmolLM2, TinyLlama, ...).
    Llama(LlamaConfig),
}

impl CausalLm {
    /// `kind` (`gpt2` or `llama`) from its Hugging Face `config.json`.
    pub fn from_config(kind: &str, config: &Path) -> Result<CausalLm> {
        let read = |e: rustral_models::ConfigError| Error::Usage(e.to_string());
        match kind {
            "gpt2" => Ok(CausalLm::Gpt2(Gpt2Config::from_file(config).map_err(read)?)),
            "llama" => Ok(CausalLm::Llama(LlamaConfig::from_file(config).map_err(read)?)),
            other => Err(Error::Usage(format!("unknown model kind {other:?} (expected gpt2 or llama)"))),
        }
    }

    /// The positions the model has (GPT-2's position table; LLaMA's `max_position_embeddings`,
    /// 2048 when the config does not say).
    pub fn positions(&self) -> usize {
        match self {
            CausalLm::Gpt2(c) => c.n_positions,
            CausalLm::Llama(c) => c.max_position_embeddings.unwrap_or(2048),
        }
    }

    /// The vocabulary size.
    pub fn vocab(&self) -> usize {
        match self {
            CausalLm::Gpt2(c) => c.vocab_size,
            CausalLm::Llama(c) => c.vocab_size,
        }
    }

    /// Trace `input_ids -> logits`, with a KV cache of `capacity` positions or without one.
    pub fn trace(&self, capacity: Option<usize>) -> Result<Traced> {
        self.trace_quantized(capacity, &BTreeMap::new())
    }

    /// As [`CausalLm::trace`], with the named parameters bound in block formats (their
    /// layers trace `quant_matmul` and `dequantize`).
    pub fn trace_quantized(
        &self,
        capacity: Option<usize>,
        quantized: &BTreeMap<String, QuantFormat>,
    ) -> Result<Traced> {
        let options = TraceOptions {
            kv_cache: capacity,
            name: self.name().into(),
            quantized: quantized.clone(),
            ..TraceOptions::default()
        };
        Ok(trace_named(options, |ctx| {
            let logits = match self {
                CausalLm::Gpt2(c) => {
                    let m = Gpt2 { config: c.clone() };
                    let ids = m.input(ctx)?;
                    m.forward(ctx, &ids)?
                }
                CausalLm::Llama(c) => {
                    let m = Llama { config: c.clone() };
                    let ids = m.input(ctx)?;
                    m.forward(ctx, &ids)?
                }
            };
            Ok(vec![("logits".to_string(), logits)])
        })?)
    }

    fn name(&self) -> &'static str {
        match self {
            CausalLm::Gpt2(_) => "gpt2",
            CausalLm::Llama(_) => "llama",
        }
    }

    /// The parameter declarations (names and shapes), to load a checkpoint against.
    pub fn params(&self) -> Result<Vec<ParamSpec>> {
        Ok(self.trace(None)?.params)
    }
}

/// How to build a generator.
#[derive(Clone, Debug)]
pub struct GeneratorOptions {
    /// Where the programs run.
    pub target: Target,
    /// How they are compiled.
    pub compile: CompileOptions,
    /// Positions the KV cache holds (prompt plus generated tokens); the model's positions when
    /// None.
    pub capacity: Option<usize>,
    /// Use the KV cache (prefill + decode programs); false reruns the whole sequence through
    /// the plain forward program at every step (the baseline the cache is checked against).
    pub cached: bool,
    /// Parameters bound in block formats (from [`load_gguf`]); empty for f32 checkpoints.
    pub quantized: BTreeMap<String, QuantFormat>,
}

impl Default for GeneratorOptions {
    fn default() -> GeneratorOptions {
        GeneratorOptions {
            target: Target::Cpu,
            compile: CompileOptions::default(),
            capacity: None,
            cached: true,
            quantized: BTreeMap::new(),
        }
    }
}

/// What to generate.
#[derive(Clone, Debug, PartialEq)]
pub struct GenerationConfig {
    /// Stop after this many new tokens.
    pub max_new_tokens: usize,
    /// How tokens are chosen.
    pub sampling: SamplingConfig,
    /// Stop after generating any of these ids (the model's EOS).
    pub eos_ids: Vec<i64>,
}

impl Default for GenerationConfig {
    fn default() -> GenerationConfig {
        GenerationConfig { max_new_tokens: 20, sampling: SamplingConfig::default(), eos_ids: vec![] }
    }
}

/// Why generation ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    /// `max_new_tokens` were generated.
    Length,
    /// An EOS id was generated (it is the last id).
    Eos,
    /// The callback asked to stop (a stop string).
    Callback,
    /// The cache (or the model's positions) is full.
    ContextFull,
}

/// One generation: ids and timings.
#[derive(Clone, Debug)]
pub struct Generation {
    /// The prompt.
    pub prompt_ids: Vec<i64>,
    /// The generated ids.
    pub ids: Vec<i64>,
    /// Prompt processing to the first token's logits.
    pub prefill: Duration,
    /// Each later step, from feeding a token to its logits.
    pub decode_steps: Vec<Duration>,
    /// Why it ended.
    pub stop: StopReason,
}

impl Generation {
    /// Decode steps per second (0 with none).
    pub fn decode_tokens_per_s(&self) -> f64 {
        let total: f64 = self.decode_steps.iter().map(Duration::as_secs_f64).sum();
        if total > 0.0 { self.decode_steps.len() as f64 / total } else { 0.0 }
    }

    /// Prompt tokens per second in the prefill.
    pub fn prefill_tokens_per_s(&self) -> f64 {
        self.prompt_ids.len() as f64 / self.prefill.as_secs_f64().max(1e-12)
    }
}

/// The compiled programs of one model on one target.
enum Programs {
    /// Prefill and decode over a KV cache of `capacity` positions, with the caches' shapes.
    Cached { prefill: Box<Session>, decode: Box<Session>, capacity: usize, caches: Vec<(String, Vec<usize>)> },
    /// The plain forward program, rerun on the whole sequence each step.
    Uncached(Box<Session>),
}

/// A causal LM compiled for generation: compile once, generate many times.
pub struct Generator {
    model: CausalLm,
    programs: Programs,
    compilations: usize,
}

impl Generator {
    /// Trace `model`, compile its programs for `options.target` and bind `params`.
    pub fn new(model: CausalLm, params: &ParamStore, options: &GeneratorOptions) -> Result<Generator> {
        let positions = model.positions();
        let host = crate::session::host_params(params)?;
        let mut compilations = 0;
        let mut compile = |graph: &Graph, beside: Option<&Session>| -> Result<Session> {
            compilations += 1;
            let mut s = match beside {
                Some(other) => Session::compile_beside(graph, other, &options.compile)?,
                None => Session::compile(graph, options.target.clone(), &options.compile)?,
            };
            s.bind_host(&host)?;
            Ok(s)
        };
        let programs = if options.cached {
            let capacity = options.capacity.unwrap_or(positions);
            if capacity == 0 || capacity > positions {
                return Err(Error::Usage(format!(
                    "a KV cache of {capacity} positions: the model has 1 to {positions}"
                )));
            }
            let traced = model.trace_quantized(Some(capacity), &options.quantized)?;
            let prefill_graph = pinned(&traced.graph, &[("batch", 1)])?;
            let decode_graph = pinned(&traced.graph, &[("batch", 1), ("seq", 1)])?;
            let prefill = compile(&prefill_graph, None)?;
            let decode = compile(&decode_graph, Some(&prefill))?;
            let caches = prefill_graph
                .inputs()
                .into_iter()
                .filter(|(name, _)| name.starts_with(rustral_frontend::PAST))
                .map(|(name, id)| {
                    let ty = &prefill_graph.node(id).expect("inputs are nodes").ty;
                    let shape = ty.shape.0.iter().map(|d| d.as_static().unwrap_or(1)).collect();
                    (name, shape)
                })
                .collect();
            Programs::Cached { prefill: Box::new(prefill), decode: Box::new(decode), capacity, caches }
        } else {
            let traced = model.trace_quantized(None, &options.quantized)?;
            Programs::Uncached(Box::new(compile(&pinned(&traced.graph, &[("batch", 1)])?, None)?))
        };
        Ok(Generator { model, programs, compilations })
    }

    /// Programs compiled so far: 2 with a KV cache (prefill and decode), 1 without, however
    /// many tokens are generated.
    pub fn compilations(&self) -> usize {
        self.compilations
    }

    /// The model.
    pub fn model(&self) -> &CausalLm {
        &self.model
    }

    /// The most tokens a sequence (prompt and generated) can have.
    pub fn capacity(&self) -> usize {
        match &self.programs {
            Programs::Cached { capacity, .. } => *capacity,
            Programs::Uncached(_) => self.model.positions(),
        }
    }

    /// Generate from `prompt`; `on_token` sees each new id as it is chosen and returns false
    /// to stop (a stop string seen).
    pub fn generate(
        &self,
        prompt: &[i64],
        config: &GenerationConfig,
        on_token: &mut dyn FnMut(i64) -> bool,
    ) -> Result<Generation> {
        config.sampling.check().map_err(Error::Usage)?;
        self.check_prompt(prompt)?;
        let capacity = self.capacity();
        let mut sampler = Sampler::new(config.sampling.clone());
        let mut sequence = prompt.to_vec();
        let mut out = Generation {
            prompt_ids: prompt.to_vec(),
            ids: vec![],
            prefill: Duration::ZERO,
            decode_steps: vec![],
            stop: StopReason::Length,
        };
        let mut state = self.fresh_state()?;
        while out.ids.len() < config.max_new_tokens {
            // Every fed token needs a cache row (a position) of its own.
            if sequence.len() > capacity {
                out.stop = StopReason::ContextFull;
                break;
            }
            let start = Instant::now();
            let logits = self.step(&sequence, out.ids.len(), state.as_mut())?;
            let elapsed = start.elapsed();
            if out.ids.is_empty() {
                out.prefill = elapsed;
            } else {
                out.decode_steps.push(elapsed);
            }
            let id = sampler.next(&logits, &sequence);
            out.ids.push(id);
            sequence.push(id);
            if config.eos_ids.contains(&id) {
                out.stop = StopReason::Eos;
                break;
            }
            if !on_token(id) {
                out.stop = StopReason::Callback;
                break;
            }
        }
        Ok(out)
    }

    /// The logits of the token after `prompt` (one prefill, nothing generated): what a
    /// sampler would choose from first.
    pub fn logits(&self, prompt: &[i64]) -> Result<Vec<f32>> {
        self.check_prompt(prompt)?;
        let mut state = self.fresh_state()?;
        self.step(prompt, 0, state.as_mut())
    }

    /// A prompt has tokens, each in the vocabulary, and fits the positions available.
    fn check_prompt(&self, prompt: &[i64]) -> Result<()> {
        let vocab = self.model.vocab() as i64;
        if prompt.is_empty() {
            return Err(Error::Usage("the prompt has no tokens".into()));
        }
        if let Some(bad) = prompt.iter().find(|&&id| !(0..vocab).contains(&id)) {
            return Err(Error::Usage(format!("prompt id {bad} is outside the vocabulary (0..{vocab})")));
        }
        let capacity = self.capacity();
        if prompt.len() > capacity {
            return Err(Error::Usage(format!(
                "the prompt has {} tokens, more than the {capacity} positions available",
                prompt.len()
            )));
        }
        Ok(())
    }

    /// Empty caches for a new sequence (None without a cache).
    fn fresh_state(&self) -> Result<Option<State>> {
        Ok(match &self.programs {
            Programs::Cached { prefill, caches, .. } => Some(zero_caches(prefill, caches)?),
            Programs::Uncached(_) => None,
        })
    }

    /// The last position's logits after `sequence`, of which `generated` are new: the prefill
    /// on the first step, a decode step of the last token after.
    fn step(&self, sequence: &[i64], generated: usize, state: Option<&mut State>) -> Result<Vec<f32>> {
        let ids = |ids: &[i64]| HostTensor::i64(&[1, ids.len()], ids).expect("shape fits");
        let outputs = match (&self.programs, state) {
            (Programs::Cached { prefill, decode, .. }, Some(state)) => {
                let (session, fed, position) = if generated == 0 {
                    (prefill, sequence, 0)
                } else {
                    (decode, &sequence[sequence.len() - 1..], sequence.len() - 1)
                };
                let position = HostTensor::scalar(rustral_ir::DType::I64, position as f64);
                session.run_state(
                    &[("input_ids", ids(fed)), (rustral_frontend::POSITION, position)],
                    state,
                    &["logits"],
                )?
            }
            (Programs::Uncached(session), _) => session.run(&[("input_ids", ids(sequence))])?,
            (Programs::Cached { .. }, None) => unreachable!("cached programs run with state"),
        };
        let logits = outputs.into_iter().find(|(n, _)| n == "logits").map(|(_, t)| t);
        let logits = logits.ok_or_else(|| Error::Usage("the program has no `logits` output".into()))?;
        let vocab = self.model.vocab();
        let values = logits.to_vec();
        if values.len() < vocab {
            return Err(Error::Usage(format!("logits of {} values for a vocabulary of {vocab}", values.len())));
        }
        Ok(values[values.len() - vocab..].iter().map(|&v| v as f32).collect())
    }
}

/// `graph` with the named dims pinned, verified.
fn pinned(graph: &Graph, dims: &[(&str, usize)]) -> Result<Graph> {
    let binding: BTreeMap<String, usize> = dims.iter().map(|(n, v)| (n.to_string(), *v)).collect();
    let mut g = graph.clone();
    g.pin_dims(&binding);
    rustral_ir::verify(&g).map_err(rustral_ir::IrError::from)?;
    Ok(g)
}

/// Zero caches of the given shapes, on the session's target.
fn zero_caches(session: &Session, caches: &[(String, Vec<usize>)]) -> Result<State> {
    let values: HashMap<String, HostTensor> = caches
        .iter()
        .map(|(name, shape)| {
            let n = shape.iter().product();
            (name.clone(), HostTensor::f32(shape, &vec![0.0; n]).expect("shape fits"))
        })
        .collect();
    session.new_state(values)
}

/// Load a Hugging Face checkpoint (`model.safetensors`) for `model`.
pub fn load_weights(model: &CausalLm, weights: &Path) -> Result<ParamStore> {
    Ok(ParamStore::load_safetensors(weights, &model.params()?, &[])?)
}
