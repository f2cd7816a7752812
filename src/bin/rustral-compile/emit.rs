//! Writing what --emit and --print-after-all ask for: to files under -o DIR, else to stdout
//! (the IR after each pass to stderr).

use crate::RunStats;
use crate::args::{Args, Emit};
use crate::fail::Fail;
use rustral::Session;
use rustral::frontend::Traced;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// Where emitted text goes.
pub struct Out {
    dir: Option<PathBuf>,
}

impl Out {
    pub fn new(dir: Option<&Path>) -> Result<Out, Fail> {
        if let Some(d) = dir {
            folder(d, "-o")?;
        }
        Ok(Out { dir: dir.map(Path::to_path_buf) })
    }

    pub fn put(&self, file: &str, text: &str) -> Result<(), Fail> {
        match &self.dir {
            Some(d) => {
                let path = d.join(file);
                std::fs::write(&path, text).map_err(|e| Fail::user(format!("{}: {e}", path.display())))
            }
            None => {
                print!("{text}");
                Ok(())
            }
        }
    }
}

/// The IR after every pass, when --print-after-all asked for it.
pub fn passes(out: &Out, session: &Session) -> Result<(), Fail> {
    for (i, (pass, text)) in session.dumps().iter().enumerate() {
        match &out.dir {
            Some(_) => out.put(&format!("after-{:02}-{pass}.ir", i + 1), text)?,
            None => eprint!("; ---- IR after pass {} ({pass}) ----\n{text}", i + 1),
        }
    }
    Ok(())
}

/// The fusion report, when --explain-fusion asked for it.
pub fn explain_fusion(out: &Out, session: &Session) -> Result<(), Fail> {
    let text = rustral::passes::explain_fusion(session.stats());
    match &out.dir {
        Some(_) => out.put("explain-fusion.txt", &text),
        None => {
            eprint!("{text}");
            Ok(())
        }
    }
}

/// One --emit other than stats (which waits for the run).
pub fn write(out: &Out, e: Emit, traced: &Traced, session: &Session, args: &Args) -> Result<(), Fail> {
    match e {
        Emit::Ir => out.put(e.file_name(), &rustral::ir::print(&traced.graph)),
        Emit::OptIr => out.put(e.file_name(), &rustral::ir::print(session.graph())),
        Emit::Dot => {
            let dot = rustral::ir::to_dot(session.graph());
            out.put(e.file_name(), &dot)?;
            if let Some(dir) = &out.dir {
                svg(&dot, &dir.join("model.svg"));
            }
            Ok(())
        }
        Emit::ModelExplorer => out.put(e.file_name(), &rustral::ir::to_model_explorer(session.graph())),
        Emit::Program => {
            let Some(program) = session.program() else {
                return Err(Fail::user("--emit program needs a compiled target (--target cpu)"));
            };
            let binding: std::collections::BTreeMap<String, usize> = args.shapes.iter().cloned().collect();
            let report = program.plan.report(&program.buffers, &binding);
            let value = json!({
                "program": program,
                "memory": {
                    "binding": binding,
                    "note": "unbound symbolic dims count as 1",
                    "planned_peak_bytes": report.planned_peak_bytes,
                    "unplanned_bytes": report.unplanned_bytes,
                },
            });
            out.put(e.file_name(), &pretty(&value))
        }
        #[cfg(feature = "wgsl")]
        Emit::Wgsl => {
            let dir = out.dir.as_ref().expect("checked: --emit wgsl has -o").join(e.file_name());
            session.save_wgsl(&dir)?;
            Ok(())
        }
        #[cfg(not(feature = "wgsl"))]
        Emit::Wgsl => Ok(()),
        Emit::Stats | Emit::Html => Ok(()),
    }
}

/// Make `d` (an option's folder) unless it is one, with a clear error when it names a file.
pub fn folder(d: &Path, option: &str) -> Result<(), Fail> {
    if d.exists() && !d.is_dir() {
        return Err(Fail::user(format!("{option} {}: a file, where a folder is wanted", d.display())));
    }
    std::fs::create_dir_all(d).map_err(|e| Fail::user(format!("{option} {}: {e}", d.display())))
}

/// stats.json: the passes' statistics, the program's size and the run's timings.
pub fn stats(out: &Out, session: &Session, args: &Args, run: Option<&RunStats>) -> Result<(), Fail> {
    let mut value = serde_json::to_value(session.stats()).map_err(|e| Fail::Internal(e.to_string()))?;
    if let Some(program) = session.program() {
        value["kernels"] = json!(program.kernels.len());
        value["dispatches"] = json!(session.dispatches());
    }
    #[cfg(feature = "wgsl")]
    if let Some((program, adapter)) = session.wgsl() {
        let init = program.kernels.iter().filter(|k| k.phase == rustral::lowering::wgsl::Phase::Init).count();
        value["wgsl"] = json!({
            "adapter": adapter,
            "shaders": program.kernels.len(),
            "init_shaders": init,
            "dispatches": program.kernels.len() - init,
        });
    }
    #[cfg(feature = "candle")]
    if let Some(report) = session.candle_report() {
        value["candle"] = json!(report);
    }
    if let Some(r) = run {
        let n = r.times_ms.len();
        value["run"] = json!({
            "repeat": n,
            "threads": args.threads,
            "binding": r.binding,
            "min_ms": r.times_ms[0],
            "median_ms": r.times_ms[n / 2],
            "max_ms": r.times_ms[n - 1],
            "times_ms": r.times_ms,
            "check": r.errors.iter().map(|(name, abs, rel)| json!({"output": name, "max_abs": abs, "max_rel": rel})).collect::<Vec<Value>>(),
        });
        if let Some(p) = &r.profile {
            value["run"]["profile"] = crate::inspect::profile_json(p);
        }
        if let Some(c) = &r.kernel_checks {
            value["run"]["kernel_checks"] = crate::inspect::checks_json(c);
        }
    }
    out.put(Emit::Stats.file_name(), &pretty(&value))
}

fn pretty(v: &Value) -> String {
    let mut s = serde_json::to_string_pretty(v).expect("json values serialize");
    s.push('\n');
    s
}

/// model.svg beside model.dot when Graphviz is installed; nothing (and no error) when not.
fn svg(dot: &str, path: &Path) {
    use std::io::Write;
    let Ok(mut child) = Command::new("dot").arg("-Tsvg").arg("-o").arg(path).stdin(Stdio::piped()).spawn() else {
        return;
    };
    if let Some(mut stdin) = child.stdin.take() {
        let _ = stdin.write_all(dot.as_bytes());
    }
    let _ = child.wait();
}
