//! The entry point of a model file's build: `rustral-compile` generates a `main` that calls
//! [`main`] with the file's `model` function. It traces the model (with `--shape NAME=N`
//! arguments pinning symbolic dims) and writes the trace as JSON to the file `--trace-out`
//! names (on stdout without it, where a model's own prints would corrupt it); a trace error is
//! printed on stderr with exit code 1.

use rustral_frontend::{ForwardCtx, ShapePolicy, Tensor, TraceOptions, Traced, trace_model};

/// Trace `model` as the command line says and print it.
pub fn main(model: fn(&mut ForwardCtx) -> crate::Result<Vec<Tensor>>) {
    let mut policy = ShapePolicy::symbolic();
    let mut out: Option<std::path::PathBuf> = None;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        if arg == "--trace-out" {
            out = args.next().map(Into::into);
            continue;
        }
        let pin = if arg == "--shape" { args.next() } else { None };
        let Some((name, size)) = pin.as_deref().and_then(|p| p.split_once('=')) else {
            eprintln!("model file runner: unexpected argument {arg:?}");
            std::process::exit(2);
        };
        match size.parse() {
            Ok(n) => policy = policy.pin(name, n),
            Err(_) => {
                eprintln!("model file runner: --shape {name}={size}: not a size");
                std::process::exit(2);
            }
        }
    }
    let options = TraceOptions { shape: policy, ..TraceOptions::default() };
    match trace_model(options, model) {
        Ok(traced) => match out {
            Some(path) => {
                if let Err(e) = std::fs::write(&path, Traced::to_json(&traced)) {
                    eprintln!("model file runner: {}: {e}", path.display());
                    std::process::exit(2);
                }
            }
            None => print!("{}", Traced::to_json(&traced)),
        },
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(1);
        }
    }
}
