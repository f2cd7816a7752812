//! From the command line's input to a traced graph with its parameter declarations.

use crate::args::{Args, BuiltIn};
use crate::fail::Fail;
use crate::model_file;
use rustral::frontend::{Init, ParamSpec, ShapePolicy, TraceOptions, Traced, trace, trace_named};
use rustral::ir::Graph;
use rustral::models::{
    BERT_UNUSED_WEIGHTS, Bert, BertConfig, Gpt2, Gpt2Config, Llama, LlamaConfig, MlpConfig, MlpModel,
    RESNET_UNUSED_WEIGHTS, ResNet, ResNetConfig, Vit, VitConfig,
};
use std::collections::BTreeMap;
use std::path::Path;

/// A model ready to compile.
pub struct Loaded {
    /// What it is called in messages (a file path or `--model NAME`).
    pub label: String,
    pub traced: Traced,
    /// Checkpoint entries the model does not use (skipped when loading --weights).
    pub ignore: &'static [&'static str],
}

pub fn load(args: &Args) -> Result<Loaded, Fail> {
    let mut pins: BTreeMap<String, usize> = args.shapes.iter().cloned().collect();
    // ResNet's image size is not in its config: the model reads it from the pins, which an
    // `--input pixel_values=` file gives when --shape does not.
    let image_pins = args.model == Some(BuiltIn::Resnet);
    if image_pins {
        image_size_from_input(args, &mut pins)?;
    }
    let mut policy = ShapePolicy::symbolic();
    for (name, size) in &pins {
        policy = policy.pin(name, *size);
    }
    let options = TraceOptions { shape: policy, seed: args.seed, ..TraceOptions::default() };
    if let Some(model) = args.model {
        if !pins.is_empty() {
            // Traced once more with every dim symbolic (milliseconds) to know which it has.
            let open = TraceOptions { seed: args.seed, ..TraceOptions::default() };
            let open = built_in(model, args.config.as_deref(), open)?;
            let mut symbolic = pins.clone();
            if image_pins {
                symbolic.retain(|k, _| k != "height" && k != "width");
            }
            known_dims(&symbolic, &open.traced.graph, &open.label)?;
        }
        return built_in(model, args.config.as_deref(), options);
    }
    if args.config.is_some() {
        return Err(Fail::user("--config is the config.json of a built-in model: give --model too"));
    }
    let path = args.input.as_deref().expect("clap requires an input without --model");
    let label = path.display().to_string();
    if !path.is_file() {
        return Err(Fail::user(format!("{label}: no such file")));
    }
    let extension = path.extension().and_then(|e| e.to_str()).unwrap_or("");
    let traced = match extension {
        "rs" => {
            let memory = crate::memory::Budget::new(args.max_memory).map(|b| b.bytes());
            let bounds = model_file::Bounds { time: std::time::Duration::from_secs(args.trace_timeout), memory };
            model_file::trace(path, &args.shapes, args.quiet, bounds)?
        }
        "rir" | "ir" | "json" => {
            let text = std::fs::read_to_string(path).map_err(|e| Fail::user(format!("{label}: {e}")))?;
            let mut graph = if extension == "json" {
                rustral::ir::from_json(&text).map_err(|e| Fail::user(format!("{label}: {e}")))?
            } else {
                // `file:line:col: expected X, found Y`, as compilers print it.
                rustral::ir::parse(&text).map_err(|e| Fail::user(format!("{label}:{e}")))?
            };
            known_dims(&pins, &graph, &label)?;
            graph.pin_dims(&pins);
            rustral::ir::verify(&graph).map_err(|e| Fail::user(format!("{label}: the graph does not verify:\n{e}")))?;
            let params = param_specs(&graph, &label)?;
            Traced { graph, params }
        }
        _ => {
            return Err(Fail::user(format!(
                "{label}: unknown kind of input (expected a Rust model file .rs, text IR .rir or JSON IR .json)"
            )));
        }
    };
    Ok(Loaded { label, traced, ignore: &[] })
}

/// Every `--shape` names a symbolic dim of `g`: a misspelt dim would otherwise be ignored.
fn known_dims(pins: &BTreeMap<String, usize>, g: &Graph, label: &str) -> Result<(), Fail> {
    let dims = g.symbols();
    match pins.keys().find(|p| !dims.contains(*p)) {
        None => Ok(()),
        Some(p) if dims.is_empty() => Err(Fail::user(format!("--shape {p}=...: {label} has no symbolic dims"))),
        Some(p) => Err(Fail::user(format!(
            "--shape {p}=...: {label} has no dim {p:?} (its symbolic dims: {})",
            dims.into_iter().collect::<Vec<_>>().join(", ")
        ))),
    }
}

/// Parameter declarations for an IR file, which has types but no initialisers.
fn param_specs(g: &Graph, label: &str) -> Result<Vec<ParamSpec>, Fail> {
    g.params()
        .into_iter()
        .map(|(name, id)| {
            let ty = &g.node(id).expect("params exist").ty;
            let shape: Option<Vec<usize>> = ty.shape.dims().iter().map(|d| d.as_static()).collect();
            let shape = shape.ok_or_else(|| {
                Fail::user(format!("{label}: parameter {name:?} has a symbolic shape {ty}; pin it with --shape"))
            })?;
            Ok(ParamSpec { name, dtype: ty.dtype, shape, init: Init::Normal { std: 0.5 } })
        })
        .collect()
}

fn built_in(model: BuiltIn, config: Option<&Path>, options: TraceOptions) -> Result<Loaded, Fail> {
    let config_error = |e: rustral::models::ConfigError| Fail::user(e.to_string());
    let (name, traced, ignore): (&str, _, &'static [&'static str]) = match model {
        BuiltIn::Mlp => {
            if config.is_some() {
                return Err(Fail::user("--model mlp has no config file (its widths are 8, 16, 4)"));
            }
            let mlp = MlpModel { config: MlpConfig::default() };
            ("mlp", trace(options, |ctx| Ok(vec![mlp.trace(ctx)?])), &[])
        }
        BuiltIn::Minilm => {
            let config = config.map(BertConfig::from_file).transpose().map_err(config_error)?;
            let bert = Bert { config: config.unwrap_or_else(|| BertConfig::tiny(2)) };
            let traced = trace_named(options, |ctx| {
                let (ids, types, mask) = bert.inputs(ctx)?;
                let hidden = bert.forward(ctx, &ids, &types, &mask)?;
                let embeddings = bert.sentence_embedding(ctx, &hidden, &mask)?;
                Ok(vec![("last_hidden_state".into(), hidden), ("sentence_embedding".into(), embeddings)])
            });
            ("minilm", traced, BERT_UNUSED_WEIGHTS)
        }
        BuiltIn::Gpt2 => {
            let config = config.map(Gpt2Config::from_file).transpose().map_err(config_error)?;
            let gpt2 = Gpt2 { config: config.unwrap_or_else(|| Gpt2Config::tiny(2)) };
            let traced = trace_named(options, |ctx| {
                let ids = gpt2.input(ctx)?;
                Ok(vec![("logits".into(), gpt2.forward(ctx, &ids)?)])
            });
            ("gpt2", traced, &[])
        }
        BuiltIn::Llama => {
            let config = config.map(LlamaConfig::from_file).transpose().map_err(config_error)?;
            let llama = Llama { config: config.unwrap_or_else(|| LlamaConfig::tiny(2)) };
            let traced = trace_named(options, |ctx| {
                let ids = llama.input(ctx)?;
                Ok(vec![("logits".into(), llama.forward(ctx, &ids)?)])
            });
            ("llama", traced, &[])
        }
        BuiltIn::Resnet => {
            let config = config.map(ResNetConfig::from_file).transpose().map_err(config_error)?;
            let resnet = ResNet { config: config.unwrap_or_else(ResNetConfig::tiny) };
            let traced = trace_named(options, |ctx| {
                let pixels = resnet.input(ctx)?;
                let (hidden, pooled) = resnet.forward(ctx, &pixels)?;
                Ok(vec![("last_hidden_state".into(), hidden), ("pooler_output".into(), pooled)])
            });
            ("resnet", traced, RESNET_UNUSED_WEIGHTS)
        }
        BuiltIn::Vit => {
            let config = config.map(VitConfig::from_file).transpose().map_err(config_error)?;
            let vit = Vit { config: config.unwrap_or_else(VitConfig::tiny) };
            let traced = trace_named(options, |ctx| {
                let pixels = vit.input(ctx)?;
                let (hidden, pooled) = vit.forward(ctx, &pixels)?;
                Ok(vec![("last_hidden_state".into(), hidden), ("pooler_output".into(), pooled)])
            });
            ("vit", traced, &[])
        }
    };
    let traced = traced.map_err(|e| Fail::user(format!("--model {name}: {e}")))?;
    Ok(Loaded { label: format!("--model {name}"), traced, ignore })
}

/// Pin `height` and `width` to the `--input pixel_values=` file's when --shape does not.
fn image_size_from_input(args: &Args, pins: &mut BTreeMap<String, usize>) -> Result<(), Fail> {
    let Some((_, path)) = args.feeds.iter().find(|(name, _)| name == "pixel_values") else { return Ok(()) };
    let label = path.display().to_string();
    let mut file = std::fs::File::open(path).map_err(|e| Fail::user(format!("{label}: {e}")))?;
    let header = rustral::npy::header(&mut file).map_err(|e| Fail::user(format!("{label}: {e}")))?;
    let [_, _, h, w] = header.shape[..] else {
        return Err(Fail::user(format!(
            "{label}: pixel_values must be [batch, channels, height, width], found {:?}",
            header.shape
        )));
    };
    let size = |v: u64| usize::try_from(v).map_err(|_| Fail::user(format!("{label}: an image side of {v}")));
    pins.entry("height".into()).or_insert(size(h)?);
    pins.entry("width".into()).or_insert(size(w)?);
    Ok(())
}
