//! `rustral-compile` as users run it: the shipped model files on every built target with
//! `--check` (the reference interpreter is the oracle), what each --emit writes, and one clear
//! message with exit status 1 for each kind of user error. Model files are built in a cache
//! under cargo's test tmpdir, so only the first test run pays for building their dependencies.

use common::cli::{cli, root, stdout, user_error};

mod common;

#[test]
fn example_model_files_match_the_reference_on_every_target() {
    let mut targets = vec!["cpu", "reference", "candle-cpu"];
    if common::wgsl_available() {
        targets.push("wgsl");
    }
    for file in ["mlp.rs", "layer_norm.rs", "gpt2_block.rs"] {
        for &target in &targets {
            for level in ["-O0", "-O2"] {
                let path = format!("examples/models/{file}");
                let out = stdout(cli().args([&path, "--target", target, level, "--check", "-q"]));
                assert!(out.contains("check passed"), "{file} {target} {level}:\n{out}");
            }
        }
    }
}

#[test]
fn built_in_models_match_the_reference() {
    for model in ["mlp", "minilm", "gpt2", "llama"] {
        // The MLP has no sequence dim (and naming a dim a model lacks is an error).
        let shape = if model == "mlp" { "batch=3" } else { "seq=5" };
        let out = stdout(cli().args(["--model", model, "--shape", shape, "--check", "-q"]));
        assert!(out.contains("check passed"), "{model}:\n{out}");
    }
}

/// The hand-written LayerNorm becomes one fused `layer_norm` at -O2 and stays primitive at -O0.
#[test]
fn opt_ir_shows_the_fused_layer_norm() {
    let fused = stdout(cli().args(["examples/models/layer_norm.rs", "--emit", "opt-ir", "-q"]));
    assert!(fused.contains("= layer_norm %0, %1, %2 {eps=1e-5}"), "{fused}");
    assert!(!fused.contains("= reduce_mean"), "{fused}");
    let plain = stdout(cli().args(["examples/models/layer_norm.rs", "--emit", "opt-ir", "-O0", "-q"]));
    assert!(plain.contains("= reduce_mean") && !plain.contains("= layer_norm"), "{plain}");
}

/// --emit ir of a text IR file is that file's canonical text: it parses back to the same graph.
#[test]
fn emitted_ir_parses_back_to_the_input_graph() {
    let text = stdout(cli().args(["examples/ir/gelu_mlp.rir", "--emit", "ir", "-q"]));
    let original = std::fs::read_to_string(root().join("examples/ir/gelu_mlp.rir")).unwrap();
    let a = rustral::ir::parse(&text).expect("emitted IR parses");
    let b = rustral::ir::parse(&original).unwrap();
    assert_eq!(rustral::ir::print(&a), rustral::ir::print(&b));
}

/// --explain-fusion on two hand-written GELUs: the one with its 0.5 applied last fuses, the
/// one with 0.044 for 0.044715 is reported as a near miss naming the constant; stats.json
/// holds the same per-region facts, and the fused program still matches the interpreter.
#[test]
fn explain_fusion_reports_regions_rules_and_near_misses() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    let file = "examples/ir/gelu_spellings.rir";
    let out = stdout(cli().args([file, "--explain-fusion", "--emit", "stats", "-o", d, "--check", "-q"]));
    assert!(out.contains("check passed"), "{out}");
    let text = std::fs::read_to_string(dir.path().join("explain-fusion.txt")).unwrap();
    let gelu = text.split("\nfuse-silu:").next().unwrap().split("fuse-gelu:").nth(1).expect("a fuse-gelu section");
    assert!(gelu.starts_with(" 2 regions, 1 rebuilt,") && gelu.contains("fused by gelu-tanh x1"), "{text}");
    let row = |region: &str| gelu.lines().find(|l| l.trim_start().starts_with(region)).unwrap_or_default().to_string();
    assert!(row("mlp.0").contains(" saturated "), "{text}");
    assert!(row("mlp.0").trim_end().ends_with("yes") && row("mlp.1").trim_end().ends_with("no"), "{text}");
    let near = "near miss in mlp.1: gelu-tanh wants ?c = 0.044715, found 0.044";
    assert!(gelu.lines().any(|l| l.trim() == near), "{text}");
    assert!(gelu.lines().any(|l| l.trim_start().starts_with("gelu-tanh ") && l.contains(" family ")), "{text}");

    let stats: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("stats.json")).unwrap()).unwrap();
    let pass = stats["passes"].as_array().unwrap().iter().find(|p| p["pass"] == "fuse-gelu").unwrap();
    let regions = pass["egg"]["explained"].as_array().unwrap();
    assert_eq!(regions.len(), 2, "{pass}");
    assert_eq!((regions[0]["region"].as_str(), regions[0]["rebuilt"].as_bool()), (Some("mlp.0"), Some(true)));
    assert_eq!(regions[0]["rules"]["gelu-tanh"]["applied"], 1, "{pass}");
    assert_eq!(regions[1]["near_misses"][0]["found"], "0.044", "{pass}");
    assert_eq!(stats["fused"]["gelu"], 1, "{stats}");

    // Without -o the report goes to stderr, leaving stdout to --emit.
    let run = cli().args([file, "--explain-fusion", "--emit", "opt-ir", "-q"]).output().unwrap();
    assert!(run.status.success());
    let (err, outp) = (String::from_utf8_lossy(&run.stderr), String::from_utf8_lossy(&run.stdout));
    assert!(err.contains("near miss in mlp.1") && outp.starts_with("graph \"gelu_spellings\""), "{err}\n{outp}");
    let plain = stdout(cli().args(["examples/ir/gelu_mlp.rir", "-O0", "--explain-fusion", "-o", d, "-q"]));
    assert!(plain.is_empty());
    let text = std::fs::read_to_string(dir.path().join("explain-fusion.txt")).unwrap();
    assert_eq!(text, "no fusion pass ran (fusion runs at -O2)\n");
}

#[test]
fn out_dir_holds_every_emit_and_the_run_timings() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    let emits = "ir,opt-ir,dot,stats,program,model-explorer";
    stdout(cli().args(["examples/ir/gelu_mlp.rir", "--emit", emits, "-o", d, "--run", "--repeat", "3", "-q"]));
    for f in ["model.ir", "model.opt.ir", "model.dot", "stats.json", "program.json", "model.me.json"] {
        assert!(dir.path().join(f).is_file(), "{f} missing");
    }
    let stats: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("stats.json")).unwrap()).unwrap();
    assert_eq!(stats["run"]["repeat"], 3);
    assert!(stats["run"]["median_ms"].as_f64().unwrap() > 0.0);
    assert!(stats["fused"]["gelu"].as_u64().unwrap() >= 1, "{stats}");
    let program: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("program.json")).unwrap()).unwrap();
    assert_eq!(program["program"]["kernels"].as_array().unwrap().len() as u64, stats["kernels"].as_u64().unwrap());
    assert!(std::fs::read_to_string(dir.path().join("model.dot")).unwrap().starts_with("digraph"));

    // Model Explorer's JSON: one node per node of the optimised IR and per output, every edge
    // from a node that exists, the fused epilogue styled, modules as namespaces.
    let opt = rustral::ir::parse(&std::fs::read_to_string(dir.path().join("model.opt.ir")).unwrap()).unwrap();
    let me: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("model.me.json")).unwrap()).unwrap();
    let nodes = me["graphs"][0]["nodes"].as_array().unwrap();
    assert_eq!(nodes.len(), opt.len() + opt.outputs().len());
    let ids: std::collections::HashSet<&str> = nodes.iter().map(|n| n["id"].as_str().unwrap()).collect();
    for n in nodes {
        for e in n["incomingEdges"].as_array().unwrap() {
            assert!(ids.contains(e["sourceNodeId"].as_str().unwrap()), "{n}");
        }
    }
    let epilogue = nodes.iter().find(|n| n["label"] == "matmul_epilogue").expect("the fused epilogue");
    assert_eq!(epilogue["namespace"], "mlp/c_fc");
    assert!(epilogue["style"]["backgroundColor"].is_string(), "{epilogue}");
    assert_eq!(epilogue["incomingEdges"].as_array().unwrap().len(), 3);

    // On the Candle target, stats.json says which ops used candle's own kernels.
    stdout(cli().args(["examples/models/layer_norm.rs", "--target", "candle-cpu", "--emit", "stats", "-o", d, "-q"]));
    let stats: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("stats.json")).unwrap()).unwrap();
    assert_eq!(stats["candle"]["native"]["layer_norm"], 1, "{stats}");
}

/// `--grad`: the loss's gradients with respect to every parameter, checked against finite
/// differences in f64 with `--check`, the backward graph fused at O2; a non-scalar first output
/// is a user error.
#[test]
fn grad_differentiates_the_first_output_and_checks_against_finite_differences() {
    let out = stdout(cli().args(["examples/models/mlp_loss.rs", "--grad", "--check", "--shape", "batch=6", "-q"]));
    for p in ["fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"] {
        assert!(out.contains(&format!("gradcheck grad.{p}: ")), "{out}");
    }
    assert!(!out.contains("BEYOND") && out.contains("check passed"), "{out}");
    let ir = stdout(cli().args(["examples/models/mlp_loss.rs", "--grad", "--emit", "opt-ir", "-q"]));
    assert!(ir.contains("output \"grad.fc1.weight\""), "{ir}");
    assert!(ir.contains("fused_elementwise") && ir.contains("matmul_epilogue"), "{ir}");
    user_error(cli().args(["examples/models/mlp.rs", "--grad"]), &["must be a float scalar"]);
}

/// `--target wgsl -o DIR`: the program folder (program.json, one shader per kernel, the
/// parameters) and, in stats.json, the adapter and how many dispatches a run makes.
#[test]
fn the_wgsl_target_writes_a_program_folder() {
    if !common::wgsl_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    stdout(cli().args(["examples/models/gpt2_block.rs", "--target", "wgsl", "-o", d, "-q"]));
    let wgsl = dir.path().join("wgsl");
    let program: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(wgsl.join("program.json")).unwrap()).unwrap();
    let kernels = program["kernels"].as_array().unwrap();
    assert!(kernels.iter().any(|k| k["op"] == "attention"), "{program}");
    for k in kernels {
        let shader = std::fs::read_to_string(wgsl.join(format!("{}.wgsl", k["name"].as_str().unwrap()))).unwrap();
        assert!(shader.contains("@compute"), "{shader}");
    }
    assert!(wgsl.join("params.safetensors").is_file());
    stdout(cli().args(["examples/models/gpt2_block.rs", "--target", "wgsl", "--emit", "stats", "-o", d, "-q"]));
    let stats: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("stats.json")).unwrap()).unwrap();
    assert_eq!(stats["wgsl"]["dispatches"], stats["dispatches"], "{stats}");
    assert!(stats["wgsl"]["adapter"].as_str().unwrap().len() > 3, "{stats}");
}

/// Outputs saved as .npy, fed back as an input of another model, and checked there.
#[test]
fn npy_inputs_and_outputs() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    stdout(cli().args(["examples/models/layer_norm.rs", "--shape", "batch=3", "--save-outputs", d, "-q"]));
    let saved = dir.path().join("out0.npy");
    let feed = format!("x={}", saved.display());
    let out = stdout(cli().args(["examples/models/layer_norm.rs", "--input", &feed, "--check", "-q"]));
    assert!(out.contains("dims: batch=3, seq=2"), "the input's shape binds the dims:\n{out}");
    assert!(out.contains("check passed"), "{out}");
}

#[test]
fn check_beyond_tolerance_exits_3() {
    let out = cli().args(["examples/models/gpt2_block.rs", "--check", "--tolerance", "0", "-q"]).output().unwrap();
    assert_eq!(out.status.code(), Some(3), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stderr).contains("beyond tolerance"));
}

#[test]
fn user_errors_are_one_clear_message() {
    user_error(cli().arg("no/such/model.rir"), &["no/such/model.rir: no such file"]);
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.rir");
    std::fs::write(&bad, "graph \"g\" {\n  %0: f32[2] = input \"x\"\n  %1: f32[2] = frobnicate %0\n}\n").unwrap();
    user_error(cli().arg(&bad), &["bad.rir:3:16: expected an op name, found 'frobnicate'"]);
    user_error(
        cli().args(["examples/ir/gelu_mlp.rir", "--disable-pass", "fuse-magic"]),
        &["unknown pass \"fuse-magic\"", "valid passes:", "fuse-layer-norm"],
    );
    user_error(cli().args(["examples/ir/gelu_mlp.rir", "--emit", "wgsl", "-o", "x"]), &["add --target wgsl"]);
    user_error(cli().args(["examples/ir/gelu_mlp.rir", "--target", "wgsl", "--emit", "wgsl"]), &["give -o DIR"]);
    #[cfg(not(feature = "cuda"))]
    user_error(cli().args(["examples/ir/gelu_mlp.rir", "--target", "candle-cuda"]), &["the `cuda` cargo feature"]);
    user_error(cli().args(["examples/ir/gelu_mlp.rir", "--emit", "ir,opt-ir"]), &["need -o DIR"]);
    user_error(cli().args(["examples/ir/gelu_mlp.rir", "--webgpu-limits", "chrome"]), &["add --target wgsl"]);
    user_error(
        cli().args(["examples/ir/gelu_mlp.rir", "--target", "wgsl", "--webgpu-limits", "no/such.json"]),
        &["--webgpu-limits no/such.json", "a profile is one of default, chrome, native, or a JSON file of limits"],
    );
    let small = dir.path().join("small.json");
    std::fs::write(&small, r#"{"maxStorageBuffersPerShaderStage": 2, "adapter": "a small one"}"#).unwrap();
    user_error(
        cli().args(["examples/ir/gelu_mlp.rir", "--target", "wgsl", "--webgpu-limits", small.to_str().unwrap()]),
        &["kernel k000_", "small.json WebGPU limits allow 2 (maxStorageBuffersPerShaderStage"],
    );

    let shape_error = dir.path().join("shape_error.rs");
    std::fs::write(
        &shape_error,
        "use rustral::prelude::*;\n\
         pub fn model(ctx: &mut ForwardCtx) -> rustral::Result<Vec<Tensor>> {\n\
         \x20   let x = ctx.input(\"x\", &[Dim::sym(\"batch\"), Dim::fixed(8)], DType::F32)?;\n\
         \x20   let y = ctx.scope(\"encoder.layer.0\", |ctx| {\n\
         \x20       let w = ctx.param(\"weight\", &[Dim::fixed(4), Dim::fixed(3)], Init::Zeros)?;\n\
         \x20       x.matmul(&w)\n\
         \x20   })?;\n\
         \x20   Ok(vec![y])\n\
         }\n",
    )
    .unwrap();
    // The error points at the model's line and column: `x.matmul(&w)` on line 6, `matmul` at 11.
    let at = format!("tracing failed: {}:6:11: type error in `matmul` at encoder.layer.0", shape_error.display());
    user_error(cli().arg(&shape_error).arg("-q"), &[&at, "f32[batch, 8], f32[4, 3]"]);

    let broken = dir.path().join("broken.rs");
    std::fs::write(
        &broken,
        "use rustral::prelude::*;\n\
         pub fn model(ctx: &mut ForwardCtx) -> rustral::Result<Vec<Tensor>> {\n\
         \x20   let x = ctx.input(\"x\", &[Dim::fixed(8)], DType::F32)?\n\
         \x20   Ok(vec![x])\n\
         }\n",
    )
    .unwrap();
    // Cargo's own message, pointing into the user's file.
    user_error(cli().arg(&broken).arg("-q"), &["expected `;`", "broken.rs:3:", "the model file does not build"]);
}

/// A model file whose LayerNorm and GELU are written out one op a line (lines 6-12 and
/// 13-15), so where each fused kernel comes from is known. Kernels show them as runs
/// (`model.rs:6-12`), the IR and program.json as every `file:line:col`.
const TRACED_LINES: &str = "use rustral::prelude::*;\n\
pub fn model(ctx: &mut ForwardCtx) -> rustral::Result<Vec<Tensor>> {\n\
\x20   let x = ctx.input(\"x\", &[Dim::sym(\"batch\"), Dim::fixed(16)], DType::F32)?;\n\
\x20   let w = ctx.param(\"ln.weight\", &[Dim::fixed(16)], Init::Normal { std: 1.0 })?;\n\
\x20   let b = ctx.param(\"ln.bias\", &[Dim::fixed(16)], Init::Normal { std: 0.5 })?;\n\
\x20   let m = x.mean(&[-1], true)?;\n\
\x20   let d = x.sub(&m)?;\n\
\x20   let v = d.square()?.mean(&[-1], true)?;\n\
\x20   let r = v.add_scalar(1e-5)?.rsqrt()?;\n\
\x20   let y = d.mul(&r)?;\n\
\x20   let y = y.mul(&w)?;\n\
\x20   let y = y.add(&b)?;\n\
\x20   let c = y.mul(&y)?.mul(&y)?.mul_scalar(0.044715)?.add(&y)?;\n\
\x20   let t = c.mul_scalar(0.7978845608028654)?.tanh()?.add_scalar(1.0)?;\n\
\x20   Ok(vec![y.mul(&t)?.mul_scalar(0.5)?])\n\
}\n";

/// `TRACED_LINES` as `model.rs` in a new temporary folder.
fn traced_lines_model() -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("model.rs");
    std::fs::write(&model, TRACED_LINES).unwrap();
    (dir, model)
}

/// Every kernel names the model lines it computes: the fused IR, the WGSL kernels' comments
/// and program.json, the CPU profile lines; `--check-kernels` checks each fused kernel against
/// the primitives it replaced and passes.
#[test]
fn kernels_name_the_model_lines_they_compute() {
    let (dir, model) = traced_lines_model();
    let file = model.to_str().unwrap();
    let (ln, gelu) = (format!("{file}:6-12"), format!("{file}:13-15"));

    let ir = stdout(cli().args([file, "--emit", "opt-ir", "-q"]));
    let line_of =
        |op: &str| ir.lines().find(|l| l.contains(&format!("= {op} "))).unwrap_or_else(|| panic!("{op}:\n{ir}"));
    for l in 6..=12 {
        assert!(line_of("layer_norm").contains(&format!("\"{file}\":{l}:")), "line {l}:\n{ir}");
    }
    assert!(!line_of("layer_norm").contains(&format!("\"{file}\":13:")), "{ir}");
    for l in 13..=15 {
        assert!(line_of("gelu").contains(&format!("\"{file}\":{l}:")), "line {l}:\n{ir}");
    }

    let out = stdout(cli().args([file, "--run", "--profile", "--repeat", "3", "-q"]));
    let profiled =
        |op: &str| out.lines().find(|l| l.contains(&format!(" {op} "))).unwrap_or_else(|| panic!("{op}:\n{out}"));
    assert!(out.contains("profile: 2 kernels"), "{out}");
    assert!(profiled("layer_norm").ends_with(&ln), "{out}");
    assert!(profiled("gelu").ends_with(&gelu), "{out}");

    let out = stdout(cli().args([file, "--check-kernels", "-q"]));
    assert!(out.contains("check-kernels passed"), "{out}");
    assert!(out.contains("layer-norm (fuse-layer-norm): 1,") && out.contains("gelu-tanh (fuse-gelu): 1,"), "{out}");

    if common::wgsl_available() {
        let d = dir.path().join("out");
        stdout(cli().args([file, "--target", "wgsl", "-o", d.to_str().unwrap(), "-q"]));
        let wgsl = d.join("wgsl");
        let program: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(wgsl.join("program.json")).unwrap()).unwrap();
        for k in program["kernels"].as_array().unwrap() {
            let name = k["name"].as_str().unwrap();
            let shader = std::fs::read_to_string(wgsl.join(format!("{name}.wgsl"))).unwrap();
            let (want, lines) = match k["op"].as_str().unwrap() {
                "layer_norm" => (&ln, 6..=12),
                "gelu" => (&gelu, 13..=15),
                _ => continue,
            };
            assert!(shader.contains(&format!("// source: {want}\n")), "{name}:\n{shader}");
            let loc: Vec<&str> = k["loc"].as_array().unwrap().iter().map(|l| l.as_str().unwrap()).collect();
            for line in lines {
                assert!(loc.iter().any(|l| l.starts_with(&format!("{file}:{line}:"))), "{name}: {loc:?}");
            }
        }
    }
}

/// `--emit html`: one self-contained page whose embedded data holds the IR after every pass
/// with its diff, and every kernel with its model lines, code, time and check; the graph is
/// drawn with the fused nodes marked. With RUSTRAL_WEB_DUMP set the page is also left there
/// for web/test/chromium.mjs, which renders it in headless Chromium and checks what it shows.
#[test]
fn emit_html_writes_a_self_contained_explorer() {
    let (dir, model) = traced_lines_model();
    let file = model.to_str().unwrap();
    let d = dir.path().join("out");
    stdout(cli().args([file, "--emit", "html", "-o", d.to_str().unwrap(), "-q"]));
    let page = std::fs::read_to_string(d.join("explorer.html")).unwrap();
    for external in ["src=\"http", "href=\"http", "<link ", "import(", "fetch("] {
        assert!(!page.contains(external), "the page loads nothing ({external})");
    }
    let start = page.find("<script type=\"application/json\" id=\"data\">").unwrap();
    let json = &page[start..];
    let json = &json[json.find('>').unwrap() + 1..json.find("</script>").unwrap()];
    let data: serde_json::Value = serde_json::from_str(json).unwrap();
    let stages = data["stages"].as_array().unwrap();
    assert_eq!(stages[0]["pass"], "traced");
    let ln = stages.iter().find(|s| s["pass"] == "fuse-layer-norm").unwrap();
    let added = |l: &str| l.starts_with('+') && l.contains("= layer_norm %0, %1, %2 {eps=1e-5}");
    assert!(ln["diff"].as_str().unwrap().lines().any(added), "{ln}");
    assert!(stages.iter().any(|s| s["diff"] == ""), "an unchanged pass has an empty diff");
    let kernels = data["kernels"].as_array().unwrap();
    let kernel = |op: &str| kernels.iter().find(|k| k["op"] == op).unwrap_or_else(|| panic!("{op}: {data}"));
    assert_eq!(kernel("layer_norm")["source"], format!("{file}:6-12"));
    assert_eq!(kernel("gelu")["source"], format!("{file}:13-15"));
    for k in kernels {
        assert!(k["ms"].as_f64().is_some_and(|ms| ms >= 0.0), "profiled: {k}");
        assert_eq!(k["check"]["ok"], true, "checked: {k}");
        assert!(k["code"].as_str().unwrap().starts_with("CPU kernel: "), "{k}");
    }
    assert_eq!(page.matches("<g class=\"node fused\"").count(), 2, "two fused nodes drawn");
    if let Some(web) = std::env::var_os("RUSTRAL_WEB_DUMP") {
        let to = std::path::Path::new(&web).join("explorer");
        std::fs::create_dir_all(&to).unwrap();
        std::fs::copy(d.join("explorer.html"), to.join("explorer.html")).unwrap();
    }
}
