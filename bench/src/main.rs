//! `rustral-bench`: the pass-ablation harness.
//!
//! `cargo run --release -p rustral-bench -- ablate [--models ...] [--targets cpu] [--repeats N]`
//! runs the matrix workload x target x pass set and writes one validated manifest per run;
//! `cargo run --release -p rustral-bench -- report DIR` turns a folder of manifests into
//! `report.md` and SVG charts.

use clap::{Parser, Subcommand};
use rustral_bench::{ablate, manifest, report, workloads};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

#[derive(Parser)]
#[command(name = "rustral-bench", about = "Pass ablations: what each pass buys, measured and recorded")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the ablation matrix and write one manifest per run.
    Ablate {
        /// Workloads (default: all but the heavy ones): layer_norm, softmax, cross_entropy,
        /// gelu_tanh, attention, elementwise_chain, gemm_1024, gpt2_block, minilm_l6; heavy,
        /// measured only when named: resnet18, vit_b16.
        #[arg(long, value_delimiter = ',')]
        models: Vec<String>,
        /// Targets: cpu, candle-cpu.
        #[arg(long, value_delimiter = ',', default_values_t = ["cpu".to_string()])]
        targets: Vec<String>,
        /// Timed runs per manifest (more for short runs: at least 200 ms of timing).
        #[arg(long, default_value_t = 10)]
        repeats: usize,
        /// Threads (default: all cores).
        #[arg(long)]
        threads: Option<usize>,
        /// Pipelines (default: all): O0, O2, and O2-PASS for each fusion pass switched off
        /// (O2-fuse-attention, ...), so a quick run can time O2 alone.
        #[arg(long, value_delimiter = ',')]
        sets: Vec<String>,
        /// Where manifests go.
        #[arg(short, long, default_value = "bench/results/manifests")]
        out: PathBuf,
    },
    /// Time prefill and decode of GPT-2-small- and LLaMA-sized LMs (rustral::generate), one
    /// manifest per model, phase and target; checkpoints are written to --dir once (seeded
    /// weights) for bench/python/generate_bench.py to time Hugging Face on.
    Generate {
        /// Models (default: all): gpt2_small, llama_135m.
        #[arg(long, value_delimiter = ',')]
        models: Vec<String>,
        /// Targets: cpu, candle-cpu, wgsl.
        #[arg(long, value_delimiter = ',', default_values_t = ["cpu".to_string(), "candle-cpu".to_string()])]
        targets: Vec<String>,
        /// Prompt tokens.
        #[arg(long, default_value_t = 128)]
        prompt: usize,
        /// New tokens per generation.
        #[arg(long, default_value_t = 32)]
        new_tokens: usize,
        /// Generations timed per target (after a warm-up).
        #[arg(long, default_value_t = 3)]
        repeats: usize,
        /// Threads (default: all cores).
        #[arg(long)]
        threads: Option<usize>,
        /// Where the checkpoints are (written when missing).
        #[arg(long, default_value = "bench/results/lm")]
        dir: PathBuf,
        /// Also time this GGUF chat model (SmolLM2-135M-Instruct Q4_1, from
        /// scripts/fetch-smollm2.sh) with its weights quantized, as the `smollm2_q4_1` rows that
        /// bench/python/llama_cpp_bench.py times llama.cpp on.
        #[arg(long)]
        gguf: Option<PathBuf>,
        /// Where manifests go.
        #[arg(short, long, default_value = "bench/results/manifests")]
        out: PathBuf,
    },
    /// Compile time against graph size (1k to 100k nodes, GPT-2 of 12 to 2,000 layers): each
    /// point in a fresh process; writes compile_scaling.md and .json.
    Scaling {
        /// Families (default: all): clusters, chain, layer_norms, gpt2_layers.
        #[arg(long, value_delimiter = ',')]
        families: Vec<String>,
        /// Only sizes up to this (a quick run).
        #[arg(long)]
        max_size: Option<usize>,
        /// Where the report goes.
        #[arg(short, long, default_value = "bench/results")]
        out: PathBuf,
        /// Measure one point in this process and print it as JSON (what the harness runs).
        #[arg(long, num_args = 2, value_names = ["FAMILY", "SIZE"], hide = true)]
        point: Option<Vec<String>>,
    },
    /// Render report.md and the charts from a folder of manifests.
    Report {
        /// The manifests.
        dir: PathBuf,
        /// Where the report goes (default: beside the manifests' folder).
        #[arg(short, long)]
        out: Option<PathBuf>,
    },
}

fn main() -> ExitCode {
    match run(Cli::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> Result<(), String> {
    match cli.command {
        Command::Ablate { models, targets, repeats, threads, sets, out } => {
            let chosen: Vec<workloads::Workload> = if models.is_empty() {
                workloads::defaults()
            } else {
                models
                    .iter()
                    .map(|m| {
                        workloads::by_name(m).ok_or_else(|| {
                            let known: Vec<&str> = workloads::all().iter().map(|w| w.name).collect();
                            format!("unknown workload {m:?}; known: {}", known.join(", "))
                        })
                    })
                    .collect::<Result<_, _>>()?
            };
            if let Some(t) = targets.iter().find(|t| !ablate::TARGETS.contains(&t.as_str())) {
                return Err(format!("unknown target {t:?} (known: {})", ablate::TARGETS.join(", ")));
            }
            let threads = threads.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
            std::fs::create_dir_all(&out).map_err(|e| format!("{}: {e}", out.display()))?;
            let start = Instant::now();
            let mut all_sets = ablate::pass_sets();
            if let Some(s) = sets.iter().find(|s| !all_sets.iter().any(|p| &p.label == *s)) {
                let known: Vec<&str> = all_sets.iter().map(|p| p.label.as_str()).collect();
                return Err(format!("unknown pipeline {s:?}; known: {}", known.join(", ")));
            }
            if !sets.is_empty() {
                all_sets.retain(|p| sets.contains(&p.label));
            }
            let sets = all_sets;
            for w in &chosen {
                for target in &targets {
                    for m in ablate::measure(target, w, &sets, threads, repeats, 200.0)? {
                        let label = &m.pipeline.label;
                        let file = out.join(format!("{}__{}__{}t__{label}.json", w.name, target, threads));
                        manifest::write(&m, &file)?;
                        eprintln!(
                            "{:>20} {:>6} {}t {:<26} median {:>10.3} ms  (95% CI {:.3}..{:.3}, n={}, {} kernels)",
                            w.name,
                            target,
                            threads,
                            label,
                            m.stats.median_ms,
                            m.stats.ci95_ms[0],
                            m.stats.ci95_ms[1],
                            m.stats.n,
                            m.program.kernels
                        );
                    }
                }
            }
            eprintln!("ablation done in {:.1} s; manifests in {}", start.elapsed().as_secs_f64(), out.display());
            Ok(())
        }
        Command::Generate { models, targets, prompt, new_tokens, repeats, threads, dir, gguf, out } => {
            use rustral_bench::generate;
            let threads = threads.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
            std::fs::create_dir_all(&out).map_err(|e| format!("{}: {e}", out.display()))?;
            let settings = generate::Settings { prompt, new_tokens, repeats, threads };
            let mut rows: Vec<Option<&generate::LmWorkload>> = vec![];
            let workloads = generate::lm_workloads();
            rows.extend(workloads.iter().filter(|w| models.is_empty() || models.iter().any(|m| m == w.name)).map(Some));
            if gguf.is_some() {
                rows.push(None);
            }
            for row in rows {
                let folder = match row {
                    Some(w) => Some(generate::checkpoint(w, &dir)?),
                    None => None,
                };
                let name = row.map_or(generate::GGUF_ROW, |w| w.name);
                for target in &targets {
                    // A model a target cannot hold (GPT-2's 154 MB embedding is over WebGPU's
                    // default 128 MiB binding; quantized ops on WGSL) is reported and skipped,
                    // not fatal to the rest.
                    let result = match (row, &folder, &gguf) {
                        (Some(w), Some(folder), _) => generate::measure(w, folder, target, &settings),
                        (_, _, Some(path)) => generate::measure_gguf(path, target, &settings),
                        _ => unreachable!("a row is a workload or the GGUF file"),
                    };
                    let measured = match result {
                        Ok(m) => m,
                        Err(e) => {
                            eprintln!("{name} on {target}: skipped: {e}");
                            continue;
                        }
                    };
                    for m in measured {
                        let file = out.join(format!("{}__{}__{}t__O2.json", m.workload.name, target, threads));
                        manifest::write(&m, &file)?;
                        eprintln!(
                            "{:>20} {:>10} {}t median {:>10.3} ms ({:.1} tokens/s), n={}",
                            m.workload.name,
                            target,
                            threads,
                            m.stats.median_ms,
                            if m.workload.name.ends_with("_prefill") { prompt as f64 } else { 1.0 } * 1e3
                                / m.stats.median_ms,
                            m.stats.n
                        );
                    }
                }
            }
            Ok(())
        }
        Command::Scaling { families, max_size, out, point } => scaling(families, max_size, &out, point),
        Command::Report { dir, out } => {
            let manifests = report::load(&dir)?;
            let out = out.unwrap_or_else(|| dir.parent().map_or_else(|| dir.clone(), |p| p.to_path_buf()));
            report::render(&manifests, &out)?;
            eprintln!("{} manifests -> {}", manifests.len(), out.join("report.md").display());
            Ok(())
        }
    }
}

fn scaling(
    families: Vec<String>,
    max_size: Option<usize>,
    out: &std::path::Path,
    point: Option<Vec<String>>,
) -> Result<(), String> {
    use rustral_bench::scaling;
    let find = |name: &str| {
        scaling::family(name).ok_or_else(|| {
            let known: Vec<&str> = scaling::families().iter().map(|f| f.name).collect();
            format!("unknown family {name:?}; known: {}", known.join(", "))
        })
    };
    if let Some(point) = point {
        let size = point[1].parse().map_err(|e| format!("size {:?}: {e}", point[1]))?;
        let p = scaling::measure(&find(&point[0])?, size)?;
        println!("{}", serde_json::to_string(&p).map_err(|e| e.to_string())?);
        return Ok(());
    }
    let chosen: Vec<scaling::Family> = if families.is_empty() {
        scaling::families()
    } else {
        families.iter().map(|f| find(f)).collect::<Result<_, _>>()?
    };
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let mut points = Vec::new();
    for f in &chosen {
        for &size in f.sizes.iter().filter(|&&s| max_size.is_none_or(|m| s <= m)) {
            // Three fresh processes; the one with the median total stands for the point
            // (this machine's timings are noisy).
            let mut runs = Vec::new();
            for _ in 0..3 {
                let run = std::process::Command::new(&exe)
                    .args(["scaling", "--point", f.name, &size.to_string()])
                    .output()
                    .map_err(|e| format!("{}: {e}", exe.display()))?;
                if !run.status.success() {
                    return Err(format!("{} n={size}: {}", f.name, String::from_utf8_lossy(&run.stderr)));
                }
                let p: scaling::Point =
                    serde_json::from_slice(&run.stdout).map_err(|e| format!("{} n={size}: {e}", f.name))?;
                runs.push(p);
            }
            runs.sort_by(|a, b| a.us_per_node().total_cmp(&b.us_per_node()));
            let p = runs.swap_remove(1);
            eprintln!("{}", p.line());
            points.push(p);
        }
    }
    let machine = rustral_bench::manifest::Machine::this();
    std::fs::create_dir_all(out).map_err(|e| format!("{}: {e}", out.display()))?;
    let md = out.join("compile_scaling.md");
    std::fs::write(&md, scaling::render(&points, &machine)).map_err(|e| format!("{}: {e}", md.display()))?;
    let json = serde_json::json!({ "machine": machine, "points": points });
    let path = out.join("compile_scaling.json");
    std::fs::write(&path, serde_json::to_string_pretty(&json).map_err(|e| e.to_string())? + "\n")
        .map_err(|e| format!("{}: {e}", path.display()))?;
    eprintln!("report in {}", md.display());
    Ok(())
}
