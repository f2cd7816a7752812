//! Data-parallel training under `mpirun` (Open MPI on loopback; feature `mpi`): the training
//! examples' own code, started as 2 ranks that split each global batch, follows the loss curve
//! of one process training on the whole batch (within 1e-5 relative per step); a 2-rank
//! checkpoint resumes on one process on the same trajectory; ranks that compiled different
//! steps, or a rank that stalls, end the run with a named error instead of a hang.
//!
//! Each case starts this test binary under `mpirun -np 2`, running only the ignored
//! `rank_entry` test, which reads the case from `RUSTRAL_DP_CASE` and writes what it measured
//! to `RUSTRAL_DP_OUT`.

#[path = "../examples/training/mod.rs"]
mod training;

use rustral::frontend::ParamStore;
use rustral::prelude::*;
use rustral::train::{Optimizer, Schedule, Trainer};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// Relative agreement of a data-parallel loss with one process's, per step.
const TOLERANCE: f64 = 1e-5;
/// Steps of the char-GPT case.
const GPT_STEPS: usize = 30;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn gpt_text() -> String {
    std::fs::read_to_string(root().join("examples/data/char_gpt.txt")).unwrap()
}

fn try_digits_trainer(hidden: usize) -> rustral::Result<Trainer> {
    let (train, _) = training::graphs(&[64, hidden, 10]);
    let options = CompileOptions { threads: 1, ..CompileOptions::default() };
    let schedule = Schedule::WarmupCosine { warmup: 5, total: 12, min_factor: 0.05 };
    let params = ParamStore::init(&train.params, 0);
    Trainer::new(&train, "loss", Target::Cpu, &options, Optimizer::adamw(0.01), schedule, params)
}

fn digits_trainer(hidden: usize) -> Trainer {
    try_digits_trainer(hidden).unwrap()
}

fn digits_batches() -> Vec<[(&'static str, HostTensor); 2]> {
    let (x, y) = training::digits::read(&root().join("fixtures/digits/train.csv")).unwrap();
    let rows: Vec<usize> = (0..y.len()).collect();
    // Batches of 50: ranks of 25 rows each.
    rows.chunks(50)
        .take(12)
        .map(|r| {
            let (bx, by) = training::digits::batch(&x, &y, r);
            [("x", bx), ("y", by)]
        })
        .collect()
}

fn write_losses(path: &Path, losses: &[f64]) {
    std::fs::write(path, serde_json::to_string(losses).unwrap()).unwrap();
}

fn read_losses(path: &Path) -> Vec<f64> {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))).unwrap()
}

/// One rank of a case; `mpirun` starts it. Ignored in plain test runs.
#[test]
#[ignore = "a rank of the mpirun tests, started by them"]
fn rank_entry() {
    let case = std::env::var("RUSTRAL_DP_CASE").expect("RUSTRAL_DP_CASE");
    let out = PathBuf::from(std::env::var("RUSTRAL_DP_OUT").expect("RUSTRAL_DP_OUT"));
    let rank: usize = std::env::var("OMPI_COMM_WORLD_RANK").unwrap().parse().unwrap();
    match case.as_str() {
        "digits" => {
            let dir = root().join("fixtures/digits");
            let (acc, mut manifest) =
                training::digits::train_net(&dir, training::digits::MLP, Target::Cpu, 2, false).unwrap();
            manifest.config["test_accuracy"] = serde_json::json!(acc);
            manifest.write(&out.join("digits.json")).unwrap();
        }
        "char_gpt" => {
            let outcome = training::char_gpt::train(&gpt_text(), GPT_STEPS, "The ", false).unwrap();
            assert_eq!(outcome.parallel.as_ref().map(|p| (p.rank, p.world)), Some((rank, 2)));
            write_losses(&out.join(format!("char_gpt.rank{rank}.json")), &outcome.losses);
        }
        "resume" => {
            let mut t = digits_trainer(128);
            assert_eq!((t.rank(), t.world()), (rank, 2), "a rank of the launcher's world");
            let batches = digits_batches();
            let mut losses: Vec<f64> = batches[..6].iter().map(|b| t.step(b).unwrap()).collect();
            t.save_checkpoint(&out.join("step6.safetensors")).unwrap();
            losses.extend(batches[6..].iter().map(|b| t.step(b).unwrap()));
            write_losses(&out.join(format!("resume.rank{rank}.json")), &losses);
        }
        "mismatch" => {
            let err = try_digits_trainer(if rank == 0 { 128 } else { 96 }).err().expect("a mismatch is an error");
            panic!("rank {rank}: {err}");
        }
        "stall" => {
            let mut t = digits_trainer(128);
            if rank == 1 {
                std::thread::sleep(std::time::Duration::from_secs(300));
            }
            let err = t.step(&digits_batches()[0]).unwrap_err();
            panic!("rank {rank}: {err}");
        }
        other => panic!("unknown case {other}"),
    }
}

/// Start the rank entry as 2 ranks with `case`, at most `limit` seconds; the output and
/// whether it ended in time.
fn mpirun(case: &str, out: &Path, env: &[(&str, &str)], limit: u64) -> Output {
    let exe = std::env::current_exe().unwrap();
    let mut cmd = Command::new("timeout");
    cmd.arg(limit.to_string()).arg("mpirun").args(["--oversubscribe", "-np", "2"]);
    if Command::new("id").arg("-u").output().is_ok_and(|o| o.stdout.starts_with(b"0\n")) {
        cmd.arg("--allow-run-as-root");
    }
    cmd.arg(exe).args(["--ignored", "--exact", "rank_entry", "--nocapture", "--test-threads", "1"]);
    cmd.env("RUSTRAL_DP_CASE", case).env("RUSTRAL_DP_OUT", out);
    // Containers often forbid the shared-memory transport's cross-process copies.
    cmd.env("OMPI_MCA_btl_vader_single_copy_mechanism", "none");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let output = cmd.output().expect("mpirun runs (scripts/ensure-mpi.sh installs Open MPI)");
    assert_ne!(output.status.code(), Some(124), "mpirun ran past {limit} s: {}", text(&output));
    output
}

fn text(o: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

fn close(what: &str, a: &[f64], b: &[f64]) {
    assert_eq!(a.len(), b.len(), "{what}: step counts");
    for (i, (x, y)) in a.iter().zip(b).enumerate() {
        let rel = (x - y).abs() / x.abs().max(1e-12);
        assert!(rel <= TOLERANCE, "{what}, step {}: {x} against one process's {y} (relative {rel:.2e})", i + 1);
    }
}

#[test]
fn the_digits_example_on_two_mpi_ranks_follows_one_process() {
    let dir = tempfile::tempdir().unwrap();
    let o = mpirun("digits", dir.path(), &[], 600);
    assert!(o.status.success(), "{}", text(&o));
    let (_, single) =
        training::digits::train_net(&root().join("fixtures/digits"), training::digits::MLP, Target::Cpu, 2, false)
            .unwrap();
    let one: Vec<f64> = single.steps.iter().map(|s| s.loss).collect();
    for file in ["digits.json", "digits.rank1.json"] {
        let m: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(dir.path().join(file)).unwrap()).unwrap();
        rustral::train::validate_manifest(&m).unwrap();
        let losses: Vec<f64> = m["steps"].as_array().unwrap().iter().map(|s| s["loss"].as_f64().unwrap()).collect();
        close(file, &losses, &one);
        let p = &m["parallel"];
        assert_eq!((p["backend"].as_str(), p["world"].as_u64()), (Some("mpi"), Some(2)), "{file}");
        assert!(!p["buckets"].as_array().unwrap().is_empty(), "{file}: the Program's buckets are recorded");
        println!("{file}: final loss {:.6} (one process {:.6})", losses.last().unwrap(), one.last().unwrap());
    }
}

#[test]
fn the_char_gpt_example_on_two_mpi_ranks_follows_one_process() {
    let dir = tempfile::tempdir().unwrap();
    let o = mpirun("char_gpt", dir.path(), &[], 600);
    assert!(o.status.success(), "{}", text(&o));
    let one = training::char_gpt::train(&gpt_text(), GPT_STEPS, "The ", false).unwrap().losses;
    let ranks: Vec<Vec<f64>> =
        (0..2).map(|r| read_losses(&dir.path().join(format!("char_gpt.rank{r}.json")))).collect();
    assert_eq!(ranks[0], ranks[1], "every rank sees the same global loss");
    close("char_gpt", &ranks[0], &one);
}

#[test]
fn a_two_rank_mpi_checkpoint_resumes_on_one_process() {
    let dir = tempfile::tempdir().unwrap();
    let o = mpirun("resume", dir.path(), &[], 600);
    assert!(o.status.success(), "{}", text(&o));
    let two = read_losses(&dir.path().join("resume.rank0.json"));
    let mut t = digits_trainer(128);
    t.load_checkpoint(&dir.path().join("step6.safetensors")).unwrap();
    let rest: Vec<f64> = digits_batches()[6..].iter().map(|b| t.step(b).unwrap()).collect();
    close("resumed on one process", &rest, &two[6..]);
}

#[test]
fn mpi_ranks_that_compiled_different_steps_both_fail_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let o = mpirun("mismatch", dir.path(), &[("RUSTRAL_COLLECTIVE_TIMEOUT", "60")], 300);
    let out = text(&o);
    assert!(!o.status.success(), "{out}");
    for rank in 0..2 {
        assert!(
            out.contains(&format!(
                "rank {rank}: rank {rank} of 2: the compiled training step's hash differs on 1 rank(s)"
            )),
            "{out}"
        );
    }
}

#[test]
fn a_stalled_mpi_rank_ends_the_run_with_a_timeout_not_a_hang() {
    let dir = tempfile::tempdir().unwrap();
    let start = std::time::Instant::now();
    let o = mpirun("stall", dir.path(), &[("RUSTRAL_COLLECTIVE_TIMEOUT", "3")], 240);
    let out = text(&o);
    assert!(!o.status.success(), "{out}");
    assert!(out.contains("rank 0: mpi rank 0 of 2: `all_reduce.0` timed out after 3.0 s"), "{out}");
    println!("the stalled run ended after {:.1} s", start.elapsed().as_secs_f64());
}
