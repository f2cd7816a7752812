//! Rust model files: each is built in its own small cargo project under the user's cache
//! directory, against this Rustral's sources without the compiler half (so the build compiles
//! only the IR, the frontend and the models), offline, in one target directory shared by all
//! model files. The built program traces the model, under a time and memory bound, and
//! writes it as JSON; the trace then carries on in this process. A second build of an edited
//! file recompiles only that file.

use crate::fail::Fail;
use rustral::frontend::Traced;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// Build and run `file`'s model, pinning `pins`.
pub fn trace(file: &Path, pins: &[(String, usize)], quiet: bool, bounds: Bounds) -> Result<Traced, Fail> {
    let label = file.display().to_string();
    let file = file.canonicalize().map_err(|e| Fail::user(format!("{label}: {e}")))?;
    let built_as = file.to_string_lossy().to_string();
    let source = rustral_source()?;
    let cache = cache_dir()?;
    let name = format!("rustral-model-{:016x}", fnv1a(file.to_string_lossy().as_bytes()));
    let project = cache.join("model-build").join(&name);
    let target = cache.join("target");
    std::fs::create_dir_all(project.join("src")).map_err(|e| io_fail(&project, e))?;
    write_if_changed(&project.join("Cargo.toml"), &manifest(&name, &source))?;
    write_if_changed(&project.join("src/main.rs"), &main_rs(&file))?;
    let lock = project.join("Cargo.lock");
    if !lock.exists() {
        // The sources' lock file pins the versions already in the registry cache, so the
        // offline build finds every crate.
        let _ = std::fs::copy(source.join("Cargo.lock"), &lock);
    }

    let start = Instant::now();
    if !quiet {
        eprintln!("building {label} (cargo, offline; the first build of any model file takes a minute or two)");
    }
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut build = Command::new(cargo);
    build
        .args(["build", "--offline", "--color", "auto", "--manifest-path"])
        .arg(project.join("Cargo.toml"))
        .env("CARGO_TARGET_DIR", &target)
        .stdout(Stdio::null());
    if quiet {
        build.arg("--quiet");
    }
    let status = build.status().map_err(|e| Fail::user(format!("cannot run cargo to build {label}: {e}")))?;
    if !status.success() {
        return Err(Fail::user(format!("{label}: the model file does not build (cargo's messages are above)")));
    }
    if !quiet {
        eprintln!("built {label} in {:.1} s; tracing", start.elapsed().as_secs_f64());
    }

    let binary = target.join("debug").join(format!("{name}{}", std::env::consts::EXE_SUFFIX));
    // Files of this process's trace: two runs may trace the same model file at once.
    let id = std::process::id();
    let out = project.join(format!("trace-{id}.json"));
    let mut run = bounded(&binary, bounds.memory);
    run.arg("--trace-out").arg(&out);
    for (dim, size) in pins {
        run.arg("--shape").arg(format!("{dim}={size}"));
    }
    // The model's own prints go to files and then to stderr: stdout is the report's.
    let (printed, errors) = (project.join(format!("stdout-{id}.txt")), project.join(format!("stderr-{id}.txt")));
    let file = |p: &Path| std::fs::File::create(p).map_err(|e| io_fail(p, e));
    run.stdout(file(&printed)?).stderr(file(&errors)?);
    let mut child =
        run.spawn().map_err(|e| Fail::Internal(format!("cannot run the built model {}: {e}", binary.display())))?;
    let status = wait(&mut child, bounds.time).map_err(|e| io_fail(&binary, e))?;
    let read = |p: &Path| {
        let text = std::fs::read_to_string(p).unwrap_or_default();
        let _ = std::fs::remove_file(p);
        text
    };
    let printed = read(&printed);
    if !printed.is_empty() && !quiet {
        eprint!("{label} printed: {printed}");
    }
    let stderr = read(&errors);
    let Some(status) = status else {
        return Err(Fail::user(format!(
            "{label}: tracing did not finish within {} s (a model whose trace never ends? --trace-timeout SECS allows more)",
            bounds.time.as_secs()
        )));
    };
    if stderr.contains("memory allocation of") {
        return Err(Fail::user(format!(
            "{label}: tracing ran out of memory within {} (--max-memory SIZE allows more): {}",
            crate::memory::human(bounds.memory.unwrap_or(0)),
            stderr.trim_end()
        )));
    }
    if !status.success() {
        return Err(Fail::user(format!("{label}: tracing failed: {}", stderr.trim_end())));
    }
    let json = std::fs::read_to_string(&out).map_err(|e| Fail::Internal(format!("trace of {label}: {e}")));
    let _ = std::fs::remove_file(&out);
    let json = json?;
    let mut traced =
        Traced::from_json(&json).map_err(|e| Fail::Internal(format!("trace of {label} does not read back: {e}")))?;
    relabel_locs(&mut traced.graph, &built_as, &label);
    Ok(traced)
}

/// Name the model file in source locations as the user did (`examples/models/mlp.rs`, not
/// the absolute path the build saw).
fn relabel_locs(g: &mut rustral::ir::Graph, built_as: &str, label: &str) {
    let ids: Vec<rustral::ir::NodeId> = g.node_ids().collect();
    for id in ids {
        let Some(node) = g.node(id) else { continue };
        if node.loc.iter().any(|l| l.file == built_as) {
            let loc = node
                .loc
                .iter()
                .map(|l| {
                    if l.file == built_as {
                        rustral::ir::SourceLoc { file: label.to_string(), ..l.clone() }
                    } else {
                        l.clone()
                    }
                })
                .collect();
            g.set_loc(id, loc);
        }
    }
}

/// How long and how much memory a model file's trace may take.
pub struct Bounds {
    pub time: Duration,
    pub memory: Option<u64>,
}

/// `binary`, run with its address space limited to `memory` bytes where the shell can
/// (`ulimit -v`), so a runaway allocation is an allocation error, not the machine's memory.
fn bounded(binary: &Path, memory: Option<u64>) -> Command {
    match memory {
        Some(bytes) if cfg!(unix) => {
            let mut c = Command::new("sh");
            c.args(["-c", "ulimit -v \"$1\" && shift && exec \"$@\"", "sh"]).arg((bytes / 1024).max(1).to_string());
            c.arg(binary);
            c
        }
        _ => Command::new(binary),
    }
}

/// Wait for `child` at most `limit`: None (and the child killed) past it.
fn wait(child: &mut Child, limit: Duration) -> std::io::Result<Option<ExitStatus>> {
    let start = Instant::now();
    loop {
        if let Some(status) = child.try_wait()? {
            return Ok(Some(status));
        }
        if start.elapsed() > limit {
            child.kill()?;
            child.wait()?;
            return Ok(None);
        }
        std::thread::sleep(Duration::from_millis(20).min(limit / 10 + Duration::from_millis(1)));
    }
}

/// Where this Rustral's sources are: `RUSTRAL_SOURCE`, else where it was built from (which
/// `cargo install --path .` keeps).
fn rustral_source() -> Result<PathBuf, Fail> {
    let dir =
        std::env::var_os("RUSTRAL_SOURCE").map_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")), PathBuf::from);
    if dir.join("Cargo.toml").is_file() && dir.join("src/model_file.rs").is_file() {
        Ok(dir)
    } else {
        Err(Fail::user(format!(
            "model files are built against Rustral's sources, which are not at {} (set RUSTRAL_SOURCE to a checkout)",
            dir.display()
        )))
    }
}

/// `RUSTRAL_CACHE_DIR`, else `$XDG_CACHE_HOME/rustral`, else `~/.cache/rustral`.
fn cache_dir() -> Result<PathBuf, Fail> {
    if let Some(d) = std::env::var_os("RUSTRAL_CACHE_DIR") {
        return Ok(PathBuf::from(d));
    }
    if let Some(d) = std::env::var_os("XDG_CACHE_HOME") {
        return Ok(PathBuf::from(d).join("rustral"));
    }
    match std::env::var_os("HOME") {
        Some(home) => Ok(PathBuf::from(home).join(".cache").join("rustral")),
        None => Err(Fail::user("no cache directory: set RUSTRAL_CACHE_DIR or HOME")),
    }
}

fn manifest(name: &str, source: &Path) -> String {
    format!(
        "# Generated by rustral-compile; rewritten on every build.\n\
         [package]\nname = \"{name}\"\nversion = \"0.0.0\"\nedition = \"2024\"\npublish = false\n\n\
         [dependencies]\nrustral = {{ path = {source:?}, default-features = false }}\n\n\
         # Its own workspace, whatever folder the cache is in.\n[workspace]\n\n\
         [profile.dev]\ndebug = false\n",
        source = source.display().to_string()
    )
}

fn main_rs(file: &Path) -> String {
    format!(
        "// Generated by rustral-compile for {file}; rewritten on every build.\n\
         #[path = {path:?}]\nmod model;\n\n\
         fn main() {{\n    rustral::model_file::main(model::model)\n}}\n",
        file = file.display(),
        path = file.display().to_string()
    )
}

/// Write only when the text differs, so cargo's freshness check sees an unchanged file.
fn write_if_changed(path: &Path, text: &str) -> Result<(), Fail> {
    if std::fs::read_to_string(path).is_ok_and(|old| old == text) {
        return Ok(());
    }
    std::fs::write(path, text).map_err(|e| io_fail(path, e))
}

fn io_fail(path: &Path, e: std::io::Error) -> Fail {
    Fail::user(format!("{}: {e}", path.display()))
}

/// A stable hash of the model file's path (the project's name), the same on every run.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3))
}
