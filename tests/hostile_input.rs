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
    stdout(cli().args(["examples/ir/gelu_mlp.rir", "--target", "wgsl", "-o", d, "-q"]));
    let program: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("wgsl/program.json")).unwrap()).unwrap();
    let kernels = program["kernels"].as_array().unwrap().len();
    assert!(before > kernels, "the first program is the larger ({before} shaders vs {kernels})");
    assert_eq!(shaders(dir.path()), kernels, "one shader per kernel of the new program");
}
