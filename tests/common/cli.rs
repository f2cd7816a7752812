//! `rustral-compile` as a user runs it: the binary in the repo root, with a model-file build
//! cache under cargo's test tmpdir (only the first test run pays for building dependencies).

use assert_cmd::Command;
use std::path::{Path, PathBuf};

pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

pub fn cli() -> Command {
    let mut c = Command::cargo_bin("rustral-compile").expect("the binary is built");
    c.current_dir(root()).env("RUSTRAL_CACHE_DIR", Path::new(env!("CARGO_TARGET_TMPDIR")).join("rustral-cache"));
    c
}

/// Stdout of a run that must succeed (stderr shown when it does not).
pub fn stdout(c: &mut Command) -> String {
    let out = c.output().expect("runs");
    assert!(
        out.status.success(),
        "failed: {}\n{}",
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&out.stdout)
    );
    String::from_utf8(out.stdout).expect("utf-8")
}

/// Exit status 1 and a message on stderr containing every one of `needles`, no panic.
pub fn user_error(c: &mut Command, needles: &[&str]) {
    let out = c.output().expect("runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "stderr: {stderr}");
    for n in needles {
        assert!(stderr.contains(n), "{n:?} not in stderr:\n{stderr}");
    }
    assert!(!stderr.contains("panicked") && !stderr.contains("internal error"), "a panic: {stderr}");
}
