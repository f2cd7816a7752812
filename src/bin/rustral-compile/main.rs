//! `rustral-compile`: a model in (a Rust model file, text or JSON IR, or a built-in model), IR,
//! pictures, statistics, a lowered program and a checked run out. `--help` has examples.

mod args;
mod emit;
mod fail;
mod html;
mod inspect;
mod load;
mod memory;
mod model_file;
mod run;

use args::{Args, Emit, TargetName};
use clap::Parser;
use fail::Fail;
use rustral::frontend::ParamStore;
use rustral::passes::OptLevel;
use rustral::{CompileOptions, Session, Target};
use std::process::ExitCode;
use std::time::Instant;

fn main() -> ExitCode {
    // A panic is a bug: one line saying so, exit status 2, no backtrace.
    std::panic::set_hook(Box::new(|info| {
        eprintln!("internal error (a bug in rustral-compile; please report it): {info}");
    }));
    // Usage errors are user errors (exit 1, as documented), not clap's 2 (our internal-error code).
    let args = match Args::try_parse() {
        Ok(args) => args,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() { ExitCode::from(1) } else { ExitCode::SUCCESS };
        }
    };
    match std::panic::catch_unwind(|| compile(&args)) {
        Ok(Ok(())) => ExitCode::SUCCESS,
        Ok(Err(fail)) => {
            eprintln!("{fail}");
            ExitCode::from(fail.code())
        }
        Err(_) => ExitCode::from(2),
    }
}

/// `--threads` beyond this many per core only adds scheduling (10,000 threads never finished).
const MAX_THREADS_PER_CORE: usize = 8;

fn compile(args: &Args) -> Result<(), Fail> {
    let args = &args.implied();
    let target = target(args.target)?;
    if args.emit.contains(&Emit::Wgsl) && args.target != TargetName::Wgsl {
        return Err(Fail::user("--emit wgsl writes the WGSL target's program: add --target wgsl"));
    }
    let mut emits = args.emit.clone();
    if args.target == TargetName::Wgsl && args.out_dir.is_some() && emits.is_empty() {
        // What the WGSL target is for: the program folder.
        emits.push(Emit::Wgsl);
    }
    if emits.contains(&Emit::Wgsl) && args.out_dir.is_none() {
        return Err(Fail::user("--emit wgsl writes a folder: give -o DIR"));
    }
    emits.sort();
    emits.dedup();
    if args.out_dir.is_none() && emits.len() > 1 {
        return Err(Fail::user("several kinds of --emit need -o DIR (only one can go to stdout)"));
    }
    let quiet = args.quiet;
    let say = |message: String| {
        if !quiet {
            eprintln!("{message}");
        }
    };

    let start = Instant::now();
    let loaded = load::load(args)?;
    let level = match args.opt.as_str() {
        "0" => OptLevel::O0,
        "1" => OptLevel::O1,
        _ => OptLevel::O2,
    };
    let mut options = CompileOptions { level, disabled: args.disable.clone(), ..CompileOptions::default() };
    options.dump_each = args.print_after_all || emits.contains(&Emit::Html);
    options.contracts = args.check_kernels;
    if let Some(t) = args.threads {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let most = MAX_THREADS_PER_CORE * cores;
        if t == 0 || t > most {
            return Err(Fail::user(format!(
                "--threads {t}: give 1 to {most} ({MAX_THREADS_PER_CORE} per core; this machine has {cores})"
            )));
        }
        options.threads = t;
    }
    if args.webgpu_limits != "default" && args.target != TargetName::Wgsl {
        return Err(Fail::user("--webgpu-limits sets what the WGSL target compiles for: add --target wgsl"));
    }
    #[cfg(feature = "wgsl")]
    {
        options.webgpu_limits = match args.webgpu_limits.as_str() {
            "native" => rustral::runtime::wgpu::Gpu::new().map_err(|e| Fail::user(e.to_string()))?.profile(),
            spec => rustral::lowering::wgsl::Profile::resolve(spec).map_err(Fail::user)?,
        };
    }
    let differentiated;
    let traced = if args.grad {
        // As `Trainer` builds its step: the forward graph fused first (above -O0), so fused
        // ops' own gradient rules apply (cross-entropy's softmax - onehot), then differentiated.
        let loss = loaded.traced.graph.outputs().first().map(|o| o.name.clone()).unwrap_or_default();
        let names: Vec<String> =
            loaded.traced.params.iter().filter(|p| p.dtype.is_float()).map(|p| p.name.clone()).collect();
        let graph = rustral::train::training_graph(&loaded.traced.graph, &loss, &names, &options)
            .map_err(|e| Fail::user(e.to_string()))?;
        differentiated = rustral::frontend::Traced { graph, params: loaded.traced.params.clone() };
        &differentiated
    } else {
        &loaded.traced
    };
    say(format!(
        "traced {}: {} nodes, {} parameters ({:.2} s)",
        loaded.label,
        traced.graph.len(),
        traced.params.len(),
        start.elapsed().as_secs_f64()
    ));

    let budget = memory::Budget::new(args.max_memory);
    let param_bytes = parameter_bytes(&traced.params);
    memory::Budget::check(budget.as_ref(), &format!("the {} parameters", traced.params.len()), param_bytes)?;

    let start = Instant::now();
    let mut session = Session::compile(&traced.graph, target, &options)?;
    say(format!(
        "compiled -O{} for {}: {} nodes{} ({:.2} s)",
        args.opt,
        other_name(args.target),
        session.graph().len(),
        session.program().map_or(String::new(), |p| format!(
            ", {} kernels, {} dispatches per run",
            p.kernels.len(),
            session.dispatches().unwrap_or(0)
        )),
        start.elapsed().as_secs_f64()
    ));

    let store = match &args.weights {
        Some(path) => ParamStore::load_safetensors(path, &traced.params, loaded.ignore)
            .map_err(|e| Fail::user(format!("{}: {e}", path.display())))?,
        None => ParamStore::init(&traced.params, args.seed),
    };
    session.bind(&store)?;

    let out = emit::Out::new(args.out_dir.as_deref())?;
    if args.print_after_all {
        emit::passes(&out, &session)?;
    }
    if args.explain_fusion {
        emit::explain_fusion(&out, &session)?;
    }
    let to_stdout = args.out_dir.is_none() && !emits.is_empty();
    for &e in &emits {
        if e != Emit::Stats && e != Emit::Html {
            emit::write(&out, e, traced, &session, args)?;
        }
    }

    let mut run_stats = None;
    if args.run || args.check || args.check_kernels || args.profile || args.save_outputs.is_some() {
        let memory = (budget.as_ref(), param_bytes.unwrap_or(u64::MAX));
        let compiled = (&session, &options);
        run_stats = Some(execute(args, traced, &loaded.traced.graph, compiled, &store, to_stdout, memory)?);
    }
    if emits.contains(&Emit::Stats) {
        emit::stats(&out, &session, args, run_stats.as_ref())?;
    }
    if emits.contains(&Emit::Html) {
        let measured = html::Measured {
            profile: run_stats.as_ref().and_then(|r| r.profile.as_deref()),
            checks: run_stats.as_ref().and_then(|r| r.kernel_checks.as_deref()),
            tolerance: args.tolerance,
        };
        let page = html::page(&traced.graph, &session, other_name(args.target), &measured);
        out.put(Emit::Html.file_name(), &page)?;
    }
    if let Some(dir) = &args.out_dir {
        say(format!("wrote {}", dir.display()));
    }
    match run_stats.and_then(|r| r.check_failure) {
        Some(message) => Err(Fail::Check(message)),
        None => Ok(()),
    }
}

/// What a run measured, for the summary and stats.json.
pub struct RunStats {
    pub times_ms: Vec<f64>,
    pub binding: std::collections::BTreeMap<String, usize>,
    pub errors: Vec<(String, f64, f64)>,
    pub check_failure: Option<String>,
    /// `--profile`'s kernels.
    pub profile: Option<Vec<inspect::ProfileRow>>,
    /// `--check-kernels`' kernels.
    pub kernel_checks: Option<Vec<rustral::check_kernels::KernelCheck>>,
}

fn execute(
    args: &Args,
    traced: &rustral::frontend::Traced,
    forward: &rustral::ir::Graph,
    (session, options): (&Session, &CompileOptions),
    store: &ParamStore,
    to_stdout: bool,
    (budget, param_bytes): (Option<&memory::Budget>, u64),
) -> Result<RunStats, Fail> {
    // The report goes to stdout unless an emit already does.
    let report = |line: String| {
        if to_stdout {
            eprintln!("{line}");
        } else {
            println!("{line}");
        }
    };
    let (feeds, binding) = run::inputs(&traced.graph, args, budget)?;
    // --check evaluates the graph this run compiled (with --grad, the training graph).
    let checks = (args.check, args.check_kernels);
    run_memory(session, &traced.graph, &binding, checks, param_bytes, &feeds, budget)?;
    let refs: Vec<(&str, rustral::runtime::HostTensor)> = feeds.iter().map(|(n, t)| (n.as_str(), t.clone())).collect();
    let (outputs, times) = session.run_timed(&refs, args.repeat as usize)?;
    let mut times_ms: Vec<f64> = times.iter().map(|t| t.as_secs_f64() * 1e3).collect();
    times_ms.sort_by(f64::total_cmp);
    let dims: Vec<String> = binding.iter().map(|(k, v)| format!("{k}={v}")).collect();
    if !dims.is_empty() {
        report(format!("dims: {}", dims.join(", ")));
    }
    for (name, t) in &outputs {
        report(run::summary(name, t));
    }
    let (min, median, max) = (times_ms[0], times_ms[times_ms.len() / 2], times_ms[times_ms.len() - 1]);
    report(format!(
        "time: min {min:.3} ms, median {median:.3} ms, max {max:.3} ms over {} run(s) after one warm-up",
        times_ms.len()
    ));
    if let Some(dir) = &args.save_outputs {
        for (name, t) in &outputs {
            run::save(dir, name, t)?;
        }
    }
    let mut stats =
        RunStats { times_ms, binding, errors: vec![], check_failure: None, profile: None, kernel_checks: None };
    if args.profile {
        let runs = args.repeat as usize;
        match inspect::profile(session, &refs, runs)? {
            Some(rows) => {
                inspect::profile_lines(&rows, runs).into_iter().for_each(&report);
                stats.profile = Some(rows);
            }
            None => report(format!("profile: the {} target keeps no per-kernel times", other_name(args.target))),
        }
    }
    let mut kernels_failure = None;
    if args.check_kernels {
        let params = rustral::host_params(store)?;
        let (checks, unchecked) = inspect::check_kernels(session, options, &params, &refs)?;
        let (lines, failure) = inspect::check_lines(&checks, &unchecked, args.tolerance);
        lines.into_iter().for_each(&report);
        stats.kernel_checks = Some(checks);
        kernels_failure = failure;
    }
    if args.check {
        let mut all: std::collections::HashMap<String, rustral::runtime::HostTensor> = feeds.into_iter().collect();
        for (name, v) in store.iter() {
            let t = rustral::runtime::HostTensor::new(v.dtype, &v.shape, v.data.clone())
                .map_err(|e| Fail::Internal(format!("parameter {name}: {e}")))?;
            all.insert(name.clone(), t);
        }
        let want = rustral::runtime::reference::evaluate(&traced.graph, &all)?;
        stats.errors = run::errors(&want, &outputs)?;
        let mut worst = Vec::new();
        if args.grad {
            let loss = forward.outputs().first().map(|o| o.name.clone()).unwrap_or_default();
            let grads: Vec<(String, rustral::runtime::HostTensor)> = outputs
                .iter()
                .filter_map(|(n, t)| n.strip_prefix("grad.").map(|p| (p.to_string(), t.clone())))
                .collect();
            let checked = rustral::gradcheck::check(forward, &loss, &all, &grads, 4, 1e-6)?;
            let mut per: std::collections::BTreeMap<&str, f64> = Default::default();
            for c in &checked {
                let e = (c.gradient - c.finite_difference).abs() / (1.0 + c.finite_difference.abs());
                let w = per.entry(c.name.as_str()).or_default();
                *w = w.max(if e.is_nan() { f64::INFINITY } else { e });
            }
            for (name, e) in per {
                let ok = e <= args.tolerance;
                report(format!(
                    "gradcheck grad.{name}: max |grad - finite difference| / (1 + |fd|) {e:.3e} over sampled elements ({})",
                    if ok { "ok" } else { "BEYOND TOLERANCE" }
                ));
                if !ok {
                    worst.push(format!("grad.{name} against finite differences ({e:.3e})"));
                }
            }
        }
        for (name, abs, rel) in &stats.errors {
            let ok = *rel <= args.tolerance;
            report(format!(
                "check {name}: max abs error {abs:.3e}, max error / (1 + |reference|) {rel:.3e} ({})",
                if ok { "ok" } else { "BEYOND TOLERANCE" }
            ));
            if !ok {
                worst.push(format!("{name} ({rel:.3e})"));
            }
        }
        if worst.is_empty() {
            report(format!("check passed: every output within {:e} of the reference interpreter", args.tolerance));
        } else {
            stats.check_failure = Some(format!(
                "{} beyond tolerance {:e} against the reference interpreter",
                worst.join(", "),
                args.tolerance
            ));
        }
    }
    if let Some(f) = kernels_failure {
        let kernels = format!("fused kernels beyond tolerance {:e} of their primitives: {f}", args.tolerance);
        stats.check_failure = Some(match stats.check_failure.take() {
            Some(outputs) => format!("{outputs}; {kernels}"),
            None => kernels,
        });
    }
    Ok(stats)
}

/// Bytes the parameters take here (host values and the target's copy); None past 2^64.
fn parameter_bytes(params: &[rustral::frontend::ParamSpec]) -> Option<u64> {
    params.iter().try_fold(0u64, |sum, p| {
        let n = p.shape.iter().try_fold(memory::held(p.dtype), |n, &d| n.checked_mul(d as u64))?;
        sum.checked_add(n)
    })
}

/// The run's memory under its binding, checked before the run allocates it: parameters,
/// inputs, the memory plan's peak (at least the largest value of the compiled graph) and,
/// with --check, the reference interpreter's f64 values of the unoptimised graph.
fn run_memory(
    session: &Session,
    forward: &rustral::ir::Graph,
    binding: &std::collections::BTreeMap<String, usize>,
    (check, check_kernels): (bool, bool),
    param_bytes: u64,
    feeds: &run::Feeds,
    budget: Option<&memory::Budget>,
) -> Result<(), Fail> {
    // Bytes of every value of `g`, each element `per` bytes (its dtype's size when None).
    let bytes = |g: &rustral::ir::Graph, per: Option<u64>| -> Vec<Option<u64>> {
        g.node_ids()
            .filter_map(|id| g.node(id))
            .map(|n| memory::tensor_bytes(&n.ty.shape, binding, per.unwrap_or(n.ty.dtype.size_bytes() as u64)))
            .collect()
    };
    let largest = bytes(session.graph(), None).into_iter().try_fold(0u64, |m, b| Some(m.max(b?)));
    let planned = session.program().map(|p| p.plan.report(&p.buffers, binding).planned_peak_bytes as u64);
    let inputs: u64 = feeds.iter().map(|(_, t)| t.data.len() as u64 * memory::held(t.dtype)).sum();
    let reference =
        if check { bytes(forward, Some(8)).into_iter().try_fold(0u64, |s, b| s.checked_add(b?)) } else { Some(0) };
    // --check-kernels keeps every fused kernel's result and operands (on the host and the
    // target) and evaluates the largest contract's primitives in f64.
    let kernels = if check_kernels {
        let g = session.graph();
        let held = |id| g.node(id).and_then(|n| memory::tensor_bytes(&n.ty.shape, binding, memory::held(n.ty.dtype)));
        let kept = session
            .contracts()
            .keys()
            .flat_map(|&id| std::iter::once(id).chain(g.operands(id)))
            .try_fold(0u64, |s, id| s.checked_add(held(id)?));
        let widest = session.contracts().values().try_fold(0u64, |m, c| {
            Some(m.max(bytes(&c.replaced, Some(8)).into_iter().try_fold(0u64, |s, b| s.checked_add(b?))?))
        });
        kept.zip(widest).and_then(|(k, w)| k.checked_add(w))
    } else {
        Some(0)
    };
    let need = [largest.map(|l| l.max(planned.unwrap_or(0))), reference, kernels, Some(inputs), Some(param_bytes)]
        .into_iter()
        .try_fold(0u64, |s, b| s.checked_add(b?));
    let dims: Vec<String> = binding.iter().map(|(k, v)| format!("{k}={v}")).collect();
    let with = if dims.is_empty() { "these inputs".to_string() } else { dims.join(", ") };
    let checking = if check_kernels { " and checking every fused kernel" } else { "" };
    let what = format!("running with {with}{checking}");
    memory::Budget::check(budget, &what, need)
}

/// The session target for a name, or which cargo feature would build it.
fn target(t: TargetName) -> Result<Target, Fail> {
    let missing = |feature: &str| {
        Fail::user(format!(
            "target {} is not built into this rustral-compile: reinstall with the `{feature}` cargo feature \
             (cargo install --path . --features {feature})",
            other_name(t)
        ))
    };
    let device_fail = |e: String| Fail::user(format!("target {}: no device: {e}", other_name(t)));
    // Which of the two a build uses depends on its features.
    let _ = (&missing, &device_fail);
    match t {
        TargetName::Cpu => Ok(Target::Cpu),
        TargetName::Reference => Ok(Target::Reference),
        #[cfg(feature = "candle")]
        TargetName::CandleCpu => Ok(Target::Candle(rustral::runtime::candle::Device::Cpu)),
        #[cfg(not(feature = "candle"))]
        TargetName::CandleCpu => Err(missing("candle")),
        #[cfg(feature = "cuda")]
        TargetName::CandleCuda => {
            rustral::runtime::candle::Device::new_cuda(0).map(Target::Candle).map_err(|e| device_fail(e.to_string()))
        }
        #[cfg(not(feature = "cuda"))]
        TargetName::CandleCuda => Err(missing("cuda")),
        #[cfg(feature = "metal")]
        TargetName::CandleMetal => {
            rustral::runtime::candle::Device::new_metal(0).map(Target::Candle).map_err(|e| device_fail(e.to_string()))
        }
        #[cfg(not(feature = "metal"))]
        TargetName::CandleMetal => Err(missing("metal")),
        #[cfg(feature = "wgsl")]
        TargetName::Wgsl => Ok(Target::Wgsl),
        #[cfg(not(feature = "wgsl"))]
        TargetName::Wgsl => Err(missing("wgsl")),
    }
}

fn other_name(t: TargetName) -> &'static str {
    match t {
        TargetName::Cpu => "cpu",
        TargetName::Reference => "reference",
        TargetName::Wgsl => "wgsl",
        TargetName::CandleCpu => "candle-cpu",
        TargetName::CandleCuda => "candle-cuda",
        TargetName::CandleMetal => "candle-metal",
    }
}
