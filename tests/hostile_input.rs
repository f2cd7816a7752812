//! Hostile input to `rustral-compile`: malformed or extreme files, configs and options. Each
//! gives exit status 1 with one message naming what was wrong and where, or the right
//! answer: never a panic (exit 2), an abort, a silent wrong answer or an unbounded run.

use common::cli::{cli, stdout, user_error};

mod common;

fn write(dir: &tempfile::TempDir, name: &str, text: &str) -> String {
    let path = dir.path().join(name);
    std::fs::write(&path, text).unwrap();
    path.to_str().unwrap().to_string()
}

#[test]
fn usage_errors_exit_1_and_help_exits_0() {
    user_error(cli().args(["examples/ir/gelu_mlp.rir", "--no-such-flag"]), &["--no-such-flag"]);
    user_error(cli().args(["examples/ir/gelu_mlp.rir", "--opt-level", "9"]), &["--opt-level"]);
    user_error(cli().arg("--target"), &["--target"]);
    let help = stdout(cli().arg("--help"));
    assert!(help.contains("--webgpu-limits") && help.contains("Exit status"), "{help}");
    assert!(help.contains("--explain-fusion") && help.contains("model-explorer"), "{help}");
}

#[test]
fn threads_are_bounded_by_the_cores() {
    user_error(cli().args(["examples/ir/gelu_mlp.rir", "--threads", "0"]), &["--threads 0: give 1 to"]);
    user_error(cli().args(["examples/ir/gelu_mlp.rir", "--threads", "10000"]), &["--threads 10000", "per core"]);
    assert!(
        stdout(cli().args([
            "examples/ir/gelu_mlp.rir",
            "--threads",
            "2",
            "--shape",
            "batch=1",
            "--shape",
            "seq=2",
            "--check"
        ]))
        .contains("check passed")
    );
}

#[test]
fn options_that_would_be_ignored_are_errors() {
    user_error(
        cli().args(["examples/ir/gelu_mlp.rir", "--config", "fixtures/tiny-gpt2/config.json"]),
        &["--config", "give --model too"],
    );
    user_error(
        cli().args(["examples/ir/gelu_mlp.rir", "--shape", "batchh=2"]),
        &["--shape batchh=...", "has no dim \"batchh\"", "batch, seq"],
    );
    user_error(
        cli().args(["--model", "gpt2", "--config", "fixtures/tiny-gpt2/config.json", "--shape", "sequence=4"]),
        &["--shape sequence=...", "has no dim \"sequence\""],
    );
}

#[test]
fn output_folders_must_be_folders_and_names_stay_inside() {
    let dir = tempfile::tempdir().unwrap();
    let file = write(&dir, "a-file", "");
    user_error(
        cli().args(["examples/ir/gelu_mlp.rir", "--emit", "ir", "-o", &file]),
        &["a-file: a file, where a folder is wanted"],
    );
    user_error(
        cli().args(["examples/ir/gelu_mlp.rir", "--shape", "batch=1", "--shape", "seq=1", "--save-outputs", &file]),
        &["--save-outputs", "a file, where a folder is wanted"],
    );
    for name in ["../escaped", "/tmp/rustral-abs"] {
        let rir = write(
            &dir,
            "escape.rir",
            &format!(
                "graph \"g\" {{\n  %0: f32[2] = input \"x\"\n  %1: f32[2] = relu %0\n  output \"{name}\" = %1\n}}\n"
            ),
        );
        let out = dir.path().join("out");
        user_error(
            cli().args([rir.as_str(), "--save-outputs", out.to_str().unwrap()]),
            &["cannot be saved as a file name"],
        );
        assert!(!dir.path().join("escaped.npy").exists() && !std::path::Path::new("/tmp/rustral-abs.npy").exists());
    }
}

/// A folder written before by a larger program keeps none of its shaders.
#[test]
fn a_reused_program_folder_holds_only_the_new_program() {
    if !common::wgsl_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    stdout(cli().args(["examples/models/gpt2_block.rs", "--target", "wgsl", "-o", d, "-q"]));
    let shaders = |d: &std::path::Path| {
        std::fs::read_dir(d.join("wgsl"))
            .unwrap()
            .filter(|e| e.as_ref().unwrap().path().extension().is_some_and(|x| x == "wgsl"))
            .count()
    };
    let before = shaders(dir.path());
    std::fs::write(dir.path().join("wgsl/mine.wgsl"), "// the user's").unwrap();
    stdout(cli().args(["examples/ir/gelu_mlp.rir", "--target", "wgsl", "-o", d, "-q"]));
    assert!(dir.path().join("wgsl/mine.wgsl").is_file(), "a file that is not a kernel's stays");
    let program: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("wgsl/program.json")).unwrap()).unwrap();
    let kernels = program["kernels"].as_array().unwrap().len();
    assert!(before > kernels, "the first program is the larger ({before} shaders vs {kernels})");
    assert_eq!(shaders(dir.path()), kernels + 1, "one shader per kernel of the new program, and the user's");
}

/// `fixture` (a config.json under fixtures/) with `changes` applied, written into `dir`.
fn config(dir: &tempfile::TempDir, name: &str, fixture: &str, changes: serde_json::Value) -> String {
    let text = std::fs::read_to_string(common::cli::root().join("fixtures").join(fixture)).unwrap();
    let mut c: serde_json::Value = serde_json::from_str(&text).unwrap();
    for (k, v) in changes.as_object().unwrap() {
        c[k] = v.clone();
    }
    write(dir, name, &c.to_string())
}

/// Configs that would divide by zero, give NaN logits, overflow, or change the maths in a
/// way the model does not implement: an error naming the file and the key.
#[test]
fn configs_outside_what_the_model_computes_are_errors() {
    use serde_json::json;
    let dir = tempfile::tempdir().unwrap();
    let gpt2 = "tiny-gpt2/config.json";
    let llama = "tiny-llama/config.json";
    let bert = "minilm/model_files/config.json";
    let cases = [
        ("gpt2", gpt2, json!({"n_head": 0}), "n_head is 0"),
        ("gpt2", gpt2, json!({"n_head": 3}), "n_embd 64 is not a multiple of n_head 3"),
        ("gpt2", gpt2, json!({"layer_norm_epsilon": -1e-5}), "layer_norm_epsilon is -0.00001"),
        ("gpt2", gpt2, json!({"n_embd": 1u64 << 40}), "n_embd is 1099511627776"),
        ("gpt2", gpt2, json!({"scale_attn_by_inverse_layer_idx": true}), "scale_attn_by_inverse_layer_idx is true"),
        ("llama", llama, json!({"num_attention_heads": 0}), "num_attention_heads is 0"),
        ("llama", llama, json!({"num_key_value_heads": 3}), "not a multiple of num_key_value_heads 3"),
        ("llama", llama, json!({"rope_parameters": {"rope_theta": 0.0, "rope_type": "default"}}), "rope_theta is 0"),
        ("llama", llama, json!({"rope_scaling": {"rope_type": "llama3", "factor": 8.0}}), "rope_scaling is"),
        ("llama", llama, json!({"rms_norm_eps": -1.0}), "rms_norm_eps is -1"),
        ("minilm", bert, json!({"num_attention_heads": 0}), "num_attention_heads is 0"),
        (
            "minilm",
            bert,
            json!({"position_embedding_type": "relative_key"}),
            "position_embedding_type is \"relative_key\"",
        ),
    ];
    for (i, (model, fixture, change, needle)) in cases.into_iter().enumerate() {
        let path = config(&dir, &format!("c{i}.json"), fixture, change);
        user_error(
            cli().args(["--model", model, "--config", &path, "--run", "-q"]),
            &[&format!("c{i}.json: "), needle],
        );
    }
    // Unscaled RoPE spelt out is what the model computes.
    let path = config(&dir, "unscaled.json", llama, json!({"rope_scaling": {"rope_type": "default"}}));
    assert!(stdout(cli().args(["--model", "llama", "--config", &path, "--check", "-q"])).contains("check passed"));
}

/// A .npy file as numpy writes it (format 1.0): `descr`, `shape`, then `data` less `cut` bytes.
fn npy(dir: &tempfile::TempDir, name: &str, descr: &str, shape: &[u64], data: &[u8], cut: usize) -> String {
    let mut bytes = common::npy_bytes(descr, shape, data);
    bytes.truncate(bytes.len() - cut);
    let path = dir.path().join(name);
    std::fs::write(&path, bytes).unwrap();
    path.to_str().unwrap().to_string()
}

fn i64s(values: &[i64]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

fn f32s(values: &[f32]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

#[test]
fn npy_inputs_are_checked_before_they_are_read() {
    let dir = tempfile::tempdir().unwrap();
    let x = f32s(&[0.5; 96]);
    let mlp = "examples/ir/gelu_mlp.rir";
    let good = npy(&dir, "good.npy", "<f4", &[2, 3, 16], &x, 0);
    let summary = |path: &str| {
        let out = stdout(cli().args([mlp, "--input", &format!("x={path}"), "--check", "-q"]));
        assert!(out.contains("check passed"), "{out}");
        out.lines().find(|l| l.starts_with("y:")).unwrap().to_string()
    };
    // numpy's other layouts read as the same values: big-endian data.
    let values: Vec<f32> = (0..96).map(|i| i as f32 / 7.0).collect();
    let little = npy(&dir, "little.npy", "<f4", &[2, 3, 16], &f32s(&values), 0);
    let big: Vec<u8> = values.iter().flat_map(|v| v.to_be_bytes()).collect();
    let big = npy(&dir, "big-endian.npy", ">f4", &[2, 3, 16], &big, 0);
    assert_eq!(summary(&little), summary(&big));
    summary(&good);
    let cases = [
        (
            npy(&dir, "cut.npy", "<f4", &[2, 3, 16], &x, 8),
            "truncated: the header says <f4 [2, 3, 16] (384 bytes of data), the file holds 376",
        ),
        // 144 bytes whose header claims 2^40 elements: refused, not allocated.
        (npy(&dir, "claim.npy", "<f4", &[1 << 40], &[0; 16], 0), "truncated: the header says <f4 [1099511627776]"),
        (
            npy(&dir, "long.npy", "<f4", &[2, 3, 16], &f32s(&[0.5; 100]), 0),
            "400 bytes of data where the header's <f4 [2, 3, 16] holds 384",
        ),
        (npy(&dir, "bool.npy", "|b1", &[2, 3, 16], &[0; 96], 0), "holds |b1 values; the input is f32"),
        (write(&dir, "text.npy", "not numpy"), "not a .npy file"),
    ];
    for (path, needle) in &cases {
        user_error(cli().args([mlp, "--input", &format!("x={path}"), "--run", "-q"]), &[path, needle]);
    }
    let gpt2 = ["--model", "gpt2", "--config", "fixtures/tiny-gpt2/config.json"];
    let big = npy(&dir, "big.npy", "<i8", &[1, 2], &i64s(&[1 << 60, 1]), 0);
    user_error(
        cli().args(gpt2).args(["--input", &format!("input_ids={big}"), "--run", "-q"]),
        &["holds 1152921504606846976, beyond 2^53"],
    );
}

/// A prompt longer than GPT-2's position table (32 rows in the tiny config) is an error on
/// every target: the CPU kernels must not read past the table.
#[test]
fn a_prompt_longer_than_the_position_table_is_an_error_on_every_target() {
    let dir = tempfile::tempdir().unwrap();
    let ids = npy(&dir, "ids.npy", "<i8", &[1, 40], &i64s(&[1; 40]), 0);
    let mut targets = vec!["cpu", "reference", "candle-cpu"];
    if common::wgsl_available() {
        targets.push("wgsl");
    }
    for target in targets {
        let out = cli()
            .args(["--model", "gpt2", "--config", "fixtures/tiny-gpt2/config.json", "--target", target])
            .args(["--input", &format!("input_ids={ids}"), "--run", "-q"])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{target}: {stderr}");
        assert!(stderr.contains("past the end") || stderr.contains("out of range"), "{target}: {stderr}");
    }
    let ok = npy(&dir, "ok.npy", "<i8", &[1, 32], &i64s(&[1; 32]), 0);
    let gpt2 = ["--model", "gpt2", "--config", "fixtures/tiny-gpt2/config.json"];
    assert!(
        stdout(cli().args(gpt2).args(["--input", &format!("input_ids={ok}"), "--check", "-q"]))
            .contains("check passed")
    );
}

/// Sizes that overflow are type errors; sizes the machine cannot hold are refused before
/// anything is allocated, against --max-memory (or the machine's available memory).
#[test]
fn sizes_are_counted_before_anything_is_allocated() {
    let dir = tempfile::tempdir().unwrap();
    let rir = |n: &str| {
        format!("graph \"g\" {{\n  %0: f32[{n}] = input \"x\"\n  %1: f32[{n}] = relu %0\n  output \"y\" = %1\n}}\n")
    };
    let over = write(&dir, "over.rir", &rir("4294967296, 4294967296"));
    user_error(
        cli().args([over.as_str(), "--run", "-q"]),
        &["over.rir: the graph does not verify", "its element count overflows"],
    );
    let gpt2 = ["--model", "gpt2", "--config", "fixtures/tiny-gpt2/config.json"];
    user_error(
        cli().args(gpt2).args(["--shape", "batch=1152921504606846976", "--run", "-q"]),
        &["element count overflows"],
    );
    let big = write(&dir, "big.rir", &rir("100000, 100000"));
    user_error(
        cli().args([big.as_str(), "--run", "--max-memory", "64G", "-q"]),
        &["input x ([100000, 100000]) would need 111.8 GiB, beyond --max-memory (64.0 GiB)"],
    );
    user_error(
        cli().args(gpt2).args(["--shape", "batch=100000", "--run", "--max-memory", "256M", "-q"]),
        &["running with batch=100000, seq=2 would need", "beyond --max-memory (256.0 MiB)"],
    );
    // --check-kernels keeps every fused kernel's values: counted too (4 MiB to run, 63 to check).
    let small = ["--shape", "batch=512", "--shape", "seq=2", "--max-memory", "16M", "-q"];
    stdout(cli().args(gpt2).args(small).arg("--run"));
    user_error(
        cli().args(gpt2).args(small).arg("--check-kernels"),
        &["running with batch=512, seq=2 and checking every fused kernel would need", "beyond --max-memory (16.0 MiB)"],
    );
    let wide = config(&dir, "wide.json", "tiny-gpt2/config.json", serde_json::json!({"n_embd": 1 << 20, "n_head": 1}));
    user_error(
        cli().args(["--model", "gpt2", "--config", &wide, "--run", "--max-memory", "1G", "-q"]),
        &["the 28 parameters would need", "TiB, beyond --max-memory (1.0 GiB)"],
    );
    user_error(
        cli().args([big.as_str(), "--max-memory", "lots"]),
        &["\"lots\": give bytes or a number with K, M, G or T"],
    );
}

#[test]
fn ir_files_are_bounded_and_their_constants_exact() {
    let dir = tempfile::tempdir().unwrap();
    let deep = format!(
        "graph \"g\" {{\n  %0: f32[2] = input \"x\"\n  %1: f32[2] = reshape %0 {{shape={}{}}}\n  output \"y\" = %1\n}}\n",
        "[".repeat(100_000),
        "]".repeat(100_000)
    );
    let deep = write(&dir, "deep.rir", &deep);
    user_error(cli().args([deep.as_str(), "-q"]), &["deep.rir:3:", "nested at most 64 lists deep"]);
    for (values, needle) in [
        ("i32[2] = const [1.5, 2]", "value 0 (1.5) is not a i32 value"),
        ("i32[2] = const [1, 1e20]", "value 1 (100000000000000000000) is not a i32 value"),
        (
            "i64[1] = const [9007199254740993]",
            "expected a number an f64 holds exactly (integers within 2^53), not 9007199254740993",
        ),
        ("i64[1] = const [1e300]", "is not a i64 value (whole numbers within 2^53)"),
        ("bool[1] = const [2]", "is not a bool value (0 or 1)"),
    ] {
        let rir = write(&dir, "c.rir", &format!("graph \"g\" {{\n  %0: {values}\n  output \"y\" = %0\n}}\n"));
        user_error(cli().args([rir.as_str(), "--run", "-q"]), &["c.rir:", needle]);
    }
}

/// WGSL answers as the reference does at the edges: the mean of nothing is NaN, float to
/// int casts saturate, indices beyond i32 are refused, tensors past u32 indexing are refused.
#[test]
fn wgsl_answers_at_the_edges_as_the_reference_does() {
    if !common::wgsl_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let cast = write(
        &dir,
        "cast.rir",
        "graph \"g\" {\n  %0: f32[5] = input \"x\"\n  %1: i32[5] = cast %0 {to=i32}\n  output \"y\" = %1\n}\n",
    );
    let x = npy(&dir, "x.npy", "<f4", &[5], &f32s(&[3e9, -3e9, f32::NAN, -1.5, 2.5e9]), 0);
    let out = stdout(cli().args([cast.as_str(), "--target", "wgsl", "--input", &format!("x={x}"), "--check", "-q"]));
    assert!(out.contains("check passed"), "{out}");
    let mean = write(
        &dir,
        "mean.rir",
        "graph \"g\" {\n  %0: f32[3, 0] = input \"x\"\n  %1: f32[3] = reduce_mean %0 {axes=[1], keepdim=false}\n  output \"y\" = %1\n}\n",
    );
    let out = stdout(cli().args([mean.as_str(), "--target", "wgsl", "--check", "-q"]));
    assert!(out.contains("check passed") && out.contains("mean NaN"), "{out}");
    let gather = write(
        &dir,
        "gather.rir",
        "graph \"g\" {\n  %0: f32[4, 2] = input \"t\"\n  %1: i64[1] = input \"i\"\n  %2: f32[1, 2] = gather %0, %1 {axis=0}\n  output \"y\" = %2\n}\n",
    );
    let i = npy(&dir, "i.npy", "<i8", &[1], &i64s(&[(1 << 32) + 1]), 0);
    user_error(
        cli().args([gather.as_str(), "--target", "wgsl", "--input", &format!("i={i}"), "--run", "-q"]),
        &["value 0 is 4294967297, beyond i32"],
    );
    let huge = write(
        &dir,
        "huge.rir",
        "graph \"g\" {\n  %0: f32[5000000000] = input \"x\"\n  %1: f32[5000000000] = relu %0\n  output \"y\" = %1\n}\n",
    );
    user_error(cli().args([huge.as_str(), "--target", "wgsl", "-q"]), &["more than 2^32 - 1 elements"]);
}

/// Attention over zero keys is the reference's answer on every target, not a panic.
#[test]
fn attention_over_no_keys_answers_as_the_reference_does() {
    let dir = tempfile::tempdir().unwrap();
    let rir = write(
        &dir,
        "empty.rir",
        "graph \"g\" {\n  %0: f32[1, 2, 3, 4] = input \"q\"\n  %1: f32[1, 2, 0, 4] = input \"k\"\n  \
         %2: f32[1, 2, 0, 4] = input \"v\"\n  %3: f32[1, 2, 3, 4] = attention %0, %1, %2 {scale=0.5, causal=false}\n  \
         output \"y\" = %3\n}\n",
    );
    for target in ["cpu", "reference", "candle-cpu"] {
        let out = stdout(cli().args([rir.as_str(), "--target", target, "--check", "-q"]));
        assert!(out.contains("check passed"), "{target}: {out}");
    }
}

/// A model file as users write one, with `body` before it returns `x`.
fn model_file(dir: &tempfile::TempDir, name: &str, body: &str) -> String {
    write(
        dir,
        name,
        &format!(
            "use rustral::prelude::*;\n\
             pub fn model(ctx: &mut ForwardCtx) -> rustral::Result<Vec<Tensor>> {{\n\
             \x20   let x = ctx.input(\"x\", &[Dim::fixed(4)], DType::F32)?;\n\
             \x20   {body}\n\
             \x20   Ok(vec![x.relu()?])\n\
             }}\n"
        ),
    )
}

/// A model file's own prints do not break the trace; a trace that never ends or allocates
/// without bound is stopped with a clear error.
#[test]
fn model_file_traces_are_bounded_and_may_print() {
    let dir = tempfile::tempdir().unwrap();
    let chatty = model_file(&dir, "chatty.rs", "println!(\"hello from the model\");");
    let out = cli().args([chatty.as_str(), "--check"]).output().unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{stderr}");
    assert!(stdout.contains("check passed") && stderr.contains("chatty.rs printed: hello from the model"), "{stderr}");
    let endless = model_file(&dir, "endless.rs", "loop { std::hint::black_box(0); }");
    user_error(
        cli().args([endless.as_str(), "--trace-timeout", "3", "-q"]),
        &["endless.rs: tracing did not finish within 3 s"],
    );
    let greedy = model_file(&dir, "greedy.rs", "let v = vec![1u8; 64 << 30]; std::hint::black_box(&v);");
    user_error(
        cli().args([greedy.as_str(), "--max-memory", "2G", "-q"]),
        &["greedy.rs: tracing ran out of memory within 2.0 GiB"],
    );
}
