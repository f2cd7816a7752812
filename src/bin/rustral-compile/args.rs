//! The command line.

use clap::{Parser, ValueEnum};
use std::path::PathBuf;

const EXAMPLES: &str = "\
Examples:
  rustral-compile examples/models/layer_norm.rs --emit opt-ir
      trace a Rust model file, optimise it, print the fused IR
  rustral-compile examples/models/gpt2_block.rs --run --check
      compile for the CPU, run on seeded inputs, compare with the reference interpreter
  rustral-compile examples/ir/gelu_mlp.rir -O0 --emit dot -o out/
      write the unoptimised graph as Graphviz (and SVG when `dot` is installed)
  rustral-compile --model minilm --config config.json --weights model.safetensors --shape batch=2 --shape seq=16 --run
      a built-in model with Hugging Face weights
  rustral-compile model.rs --disable-pass fuse-attention --emit stats --run --repeat 20
      what one pass buys: timings land in stats.json under `run`
  rustral-compile examples/ir/gelu_mlp.rir --explain-fusion
      which rules fired in each region, what they cost, and which spellings nearly fused
  rustral-compile examples/models/gpt2_block.rs --check-kernels --profile
      each fused kernel against the primitives it replaced, and where the time goes, by model line
  rustral-compile examples/models/gpt2_block.rs --emit html -o out/
      out/explorer.html: passes, diffs, the fused graph and every kernel with its lines and checks

Exit status: 0 success, 1 a user error (bad file, bad option, a model that does not trace),
2 an internal error (a bug: please report it), 3 --check or --check-kernels found errors beyond
tolerance.";

/// Compile a model: a Rust model file, text IR (.rir), JSON IR (.json) or a built-in model in;
/// IR, pictures, statistics, a program and a checked run out.
#[derive(Parser, Debug, Clone)]
#[command(name = "rustral-compile", version, after_help = EXAMPLES)]
pub struct Args {
    /// The model: a Rust file defining `pub fn model(ctx: &mut ForwardCtx) ->
    /// rustral::Result<Vec<Tensor>>`, a text IR file (.rir) or a JSON IR file (.json).
    #[arg(required_unless_present = "model", conflicts_with = "model")]
    pub input: Option<PathBuf>,

    /// A built-in model instead of a file.
    #[arg(long, value_enum)]
    pub model: Option<BuiltIn>,

    /// The built-in model's Hugging Face `config.json` (a small default config without it).
    #[arg(long, requires = "model", value_name = "FILE")]
    pub config: Option<PathBuf>,

    /// Where the program runs.
    #[arg(long, value_enum, default_value_t = TargetName::Cpu)]
    pub target: TargetName,

    /// The WebGPU limits --target wgsl compiles for: default (WebGPU's own, which every host
    /// gives), chrome (headless Chromium 156 on SwiftShader), native (this machine's adapter) or
    /// a JSON file of limits by WebGPU's names (web/tools/limits.html shows a browser's).
    #[arg(long = "webgpu-limits", value_name = "PROFILE", default_value = "default")]
    pub webgpu_limits: String,

    /// Optimisation level: -O0 (op by op), -O1 (clean-up), -O2 (fusion, the default).
    #[arg(short = 'O', value_name = "LEVEL", default_value = "2", value_parser = ["0", "1", "2"])]
    pub opt: String,

    /// Switch a pass off (repeatable); an unknown name lists the valid ones.
    #[arg(long = "disable-pass", value_name = "NAME")]
    pub disable: Vec<String>,

    /// Pin a symbolic dim to a size (repeatable), e.g. --shape batch=8.
    #[arg(long = "shape", value_name = "DIM=N", value_parser = parse_pin)]
    pub shapes: Vec<(String, usize)>,

    /// Threads for the CPU target (default: all cores).
    #[arg(long)]
    pub threads: Option<usize>,

    /// Memory this run may use (e.g. 8G, 512M, or bytes): parameters, inputs and the memory
    /// plan's peak are checked against it before anything is allocated. Default: the
    /// machine's available memory (MemAvailable).
    #[arg(long, value_name = "SIZE", value_parser = parse_bytes)]
    pub max_memory: Option<u64>,

    /// Seconds a model file's trace may take (its build is not counted).
    #[arg(long, value_name = "SECS", default_value_t = 600, value_parser = clap::value_parser!(u64).range(1..))]
    pub trace_timeout: u64,

    /// What to write (repeatable or a comma list). Without -o, a single textual emit goes to
    /// stdout.
    #[arg(long, value_enum, value_delimiter = ',')]
    pub emit: Vec<Emit>,

    /// Write emitted files into this folder (model.ir, model.opt.ir, model.dot and model.svg,
    /// stats.json, program.json).
    #[arg(short = 'o', long = "out-dir", value_name = "DIR")]
    pub out_dir: Option<PathBuf>,

    /// Write the IR after every pass (into -o DIR as after-NN-PASS.ir, else to stderr).
    #[arg(long)]
    pub print_after_all: bool,

    /// Explain what fusion did: for every fusion pass and region, the e-graph's size, the
    /// iterations, why saturation stopped, each rule's matches, applications and time, and the
    /// near misses (a family's pattern that failed one condition, e.g. GELU's 0.044715 written
    /// 0.044). Into -o DIR as explain-fusion.txt, else to stderr; stats.json holds the same.
    #[arg(long)]
    pub explain_fusion: bool,

    /// Run the compiled program on seeded inputs (or --input files) and print the outputs'
    /// shapes, a summary and min/median/max time.
    #[arg(long)]
    pub run: bool,

    /// Timed runs after one warm-up run.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    pub repeat: u32,

    /// Feed an input from a .npy file (repeatable): --input input_ids=ids.npy.
    #[arg(long = "input", value_name = "NAME=FILE", value_parser = parse_feed)]
    pub feeds: Vec<(String, PathBuf)>,

    /// Parameters from a safetensors file (Hugging Face names for the built-in models);
    /// seeded random parameters without it.
    #[arg(long, value_name = "FILE")]
    pub weights: Option<PathBuf>,

    /// Write each output as DIR/NAME.npy after the run.
    #[arg(long, value_name = "DIR")]
    pub save_outputs: Option<PathBuf>,

    /// Also run the reference interpreter on the unoptimised graph and compare every output
    /// (implies --run); with --grad, also compare gradients against central finite
    /// differences in f64; exit status 3 beyond tolerance.
    #[arg(long)]
    pub check: bool,

    /// Check every fused kernel against the primitives it replaced (implies --run): the
    /// target runs each kernel on the run's real values and the reference interpreter
    /// evaluates the replaced primitives in f64 on the same operands; prints the worst error
    /// per kernel (with its module and model lines) and per rule, and names the rules of any
    /// kernel beyond --tolerance (exit status 3).
    #[arg(long)]
    pub check_kernels: bool,

    /// Time every kernel (each kernel's median over --repeat profiled runs, after the timed
    /// runs) and print them slowest first with their module and the model lines they compute;
    /// stats.json holds them under `run.profile`.
    #[arg(long)]
    pub profile: bool,

    /// Differentiate the model's first output (a scalar loss) with respect to every parameter
    /// and compile the combined graph: outputs are the model's, then grad.<parameter>.
    #[arg(long)]
    pub grad: bool,

    /// Allowed error for --check: |got - want| <= tol * (1 + |want|) for every value.
    #[arg(long, default_value_t = 1e-4, value_name = "TOL")]
    pub tolerance: f64,

    /// Seed for random parameters and inputs.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,

    /// No progress messages.
    #[arg(short, long)]
    pub quiet: bool,
}

/// The built-in models.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum BuiltIn {
    /// A multilayer perceptron.
    Mlp,
    /// A BERT encoder with mean pooling (all-MiniLM-L6-v2's architecture).
    Minilm,
    /// GPT-2.
    Gpt2,
    /// LLaMA.
    Llama,
    /// ResNet (Hugging Face `ResNetModel`): `pixel_values` of 224x224 unless `--shape
    /// height=H --shape width=W` or an `--input pixel_values=` file gives the size.
    Resnet,
    /// ViT (Hugging Face `ViTModel`): `pixel_values` of the config's image size.
    Vit,
}

/// Target names as users type them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum TargetName {
    /// The CPU target (SIMD kernels, Cranelift-compiled fused elementwise kernels).
    Cpu,
    /// The reference interpreter (f64, slow; the oracle).
    Reference,
    /// WebGPU compute shaders.
    Wgsl,
    /// Candle on the CPU.
    CandleCpu,
    /// Candle on CUDA.
    CandleCuda,
    /// Candle on Metal.
    CandleMetal,
}

/// What --emit can write.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, ValueEnum)]
pub enum Emit {
    /// The traced IR, before any pass.
    Ir,
    /// The IR after the pass pipeline.
    OptIr,
    /// The optimised graph in Graphviz DOT.
    Dot,
    /// The optimised graph in Google Model Explorer's graph format (model.me.json): a graph
    /// collection with modules as nested namespaces and fused ops highlighted.
    ModelExplorer,
    /// Compile statistics as JSON (and the run's timings with --run).
    Stats,
    /// The lowered program: buffers, kernels, schedule and memory plan, as JSON.
    Program,
    /// The WGSL program folder.
    Wgsl,
    /// explorer.html: one self-contained page with the IR after every pass and its diff, the
    /// graph with its fused nodes, and every kernel with its model lines, code, profiled time
    /// and check against the primitives it replaced (implies --profile and --check-kernels).
    Html,
}

impl Emit {
    /// The file it is written to under -o.
    pub fn file_name(self) -> &'static str {
        match self {
            Emit::Ir => "model.ir",
            Emit::OptIr => "model.opt.ir",
            Emit::Dot => "model.dot",
            Emit::ModelExplorer => "model.me.json",
            Emit::Stats => "stats.json",
            Emit::Program => "program.json",
            Emit::Wgsl => "wgsl",
            Emit::Html => "explorer.html",
        }
    }
}

impl Args {
    /// The arguments with what they imply: the explorer page shows a profiled, checked run.
    pub fn implied(&self) -> Args {
        let mut args = self.clone();
        if args.emit.contains(&Emit::Html) {
            args.profile = true;
            args.check_kernels = true;
        }
        args
    }
}

fn parse_pin(s: &str) -> Result<(String, usize), String> {
    let (name, size) = s.split_once('=').ok_or_else(|| format!("expected DIM=N, found {s:?}"))?;
    let size = size.parse().map_err(|_| format!("{size:?} is not a size (in {s:?})"))?;
    if !rustral::ir::is_identifier(name) {
        return Err(format!("{name:?} is not a dim name"));
    }
    Ok((name.to_string(), size))
}

fn parse_feed(s: &str) -> Result<(String, PathBuf), String> {
    let (name, file) = s.split_once('=').ok_or_else(|| format!("expected NAME=FILE, found {s:?}"))?;
    Ok((name.to_string(), PathBuf::from(file)))
}

/// `SIZE` of --max-memory: bytes, or a number with K, M, G or T (powers of 1024, an optional
/// trailing B or iB).
fn parse_bytes(s: &str) -> Result<u64, String> {
    let t = s.trim().trim_end_matches("iB").trim_end_matches('B');
    let (number, unit) = match t.find(|c: char| c.is_ascii_alphabetic()) {
        Some(i) => t.split_at(i),
        None => (t, ""),
    };
    let scale: u64 = match unit.to_ascii_uppercase().as_str() {
        "" => 1,
        "K" => 1 << 10,
        "M" => 1 << 20,
        "G" => 1 << 30,
        "T" => 1 << 40,
        _ => return Err(format!("{s:?}: give bytes or a number with K, M, G or T")),
    };
    let n: f64 = number.trim().parse().map_err(|_| format!("{s:?}: give bytes or a number with K, M, G or T"))?;
    let bytes = n * scale as f64;
    if !(bytes.is_finite() && bytes >= 1.0 && bytes < u64::MAX as f64) {
        return Err(format!("{s:?}: give a size of at least one byte"));
    }
    Ok(bytes as u64)
}
