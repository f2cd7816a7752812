//! Data-parallel training: ranks that split a global batch follow the loss curve of one
//! process training on the whole batch (within 1e-5 relative per step: only the order of
//! summation differs), hold identical parameters, resume from a checkpoint on a different
//! number of ranks, show their gradient sums in the Program, and fail with a named error when
//! ranks disagree or one stalls. Ranks here are threads of this process
//! (`collective::local_group`); `tests/data_parallel_mpi.rs` runs the same under `mpirun`.

#[path = "../examples/training/mod.rs"]
mod training;

use rustral::frontend::ParamStore;
use rustral::prelude::*;
use rustral::runtime::collective::{Collective, local_group};
use rustral::train::{Optimizer, Schedule, Trainer};
use std::path::PathBuf;
use std::time::Duration;

/// Relative agreement of a data-parallel loss with one process's, per step.
const TOLERANCE: f64 = 1e-5;

fn digits_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fixtures/digits")
}

/// The digits MLP's training step, with AdamW and warmup + cosine over `total` steps.
fn digits_trainer(sizes: &[usize], total: usize) -> Trainer {
    let (train, _) = training::graphs(sizes);
    let options = CompileOptions { threads: 1, ..CompileOptions::default() };
    let schedule = Schedule::WarmupCosine { warmup: 5, total, min_factor: 0.05 };
    let params = ParamStore::init(&train.params, 0);
    Trainer::new(&train, "loss", Target::Cpu, &options, Optimizer::adamw(0.01), schedule, params).unwrap()
}

/// Global batches of 64 rows over the training set in a fixed order; the last is the 29 rows
/// left (1437 = 22 * 64 + 29), so ranks get unequal shares.
fn digits_batches(count: usize) -> Vec<[(&'static str, HostTensor); 2]> {
    let (x, y) = training::digits::read(&digits_dir().join("train.csv")).unwrap();
    let rows: Vec<usize> = (0..y.len()).collect();
    rows.chunks(64)
        .cycle()
        .take(count)
        .map(|r| {
            let (bx, by) = training::digits::batch(&x, &y, r);
            [("x", bx), ("y", by)]
        })
        .collect()
}

/// Run `f` as each rank of a `world`-rank group on its own thread; results in rank order.
fn ranks<T: Send + 'static>(
    world: usize,
    bucket_bytes: usize,
    f: impl Fn(Trainer) -> T + Send + Sync + Clone + 'static,
    make: impl Fn() -> Trainer + Send + Sync + Clone + 'static,
) -> Vec<T> {
    let group = local_group(world, Duration::from_secs(60)).unwrap();
    let handles: Vec<_> = group
        .into_iter()
        .map(|comm| {
            let (f, make) = (f.clone(), make.clone());
            std::thread::spawn(move || f(make().with_collective(comm, bucket_bytes).unwrap()))
        })
        .collect();
    handles.into_iter().map(|h| h.join().unwrap()).collect()
}

fn close(a: &[f64], b: &[f64]) -> Result<(), String> {
    assert_eq!(a.len(), b.len());
    for (i, (x, y)) in a.iter().zip(b).enumerate() {
        let rel = (x - y).abs() / x.abs().max(1e-12);
        if rel > TOLERANCE {
            return Err(format!("step {}: {x} against {y} (relative {rel:.2e})", i + 1));
        }
    }
    Ok(())
}

fn params_of(t: &mut Trainer) -> Vec<f64> {
    t.params().unwrap().iter().flat_map(|(_, v)| v.data.clone()).collect()
}

#[test]
fn two_and_three_ranks_follow_one_process_on_the_digits() {
    const STEPS: usize = 46;
    let batches = digits_batches(STEPS);
    let mut single = digits_trainer(&[64, 128, 10], STEPS);
    let one: Vec<f64> = batches.iter().map(|b| single.step(b).unwrap()).collect();
    let one_params = params_of(&mut single);
    for world in [2, 3] {
        let b = batches.clone();
        let runs = ranks(
            world,
            16 << 10,
            move |mut t| {
                let losses: Vec<f64> = b.iter().map(|batch| t.step(batch).unwrap()).collect();
                (losses, params_of(&mut t))
            },
            || digits_trainer(&[64, 128, 10], STEPS),
        );
        for (rank, (losses, params)) in runs.iter().enumerate() {
            close(losses, &one).unwrap_or_else(|e| panic!("{world} ranks, rank {rank}: {e}"));
            // Every rank holds the same parameters, bit for bit: they add the same sums.
            assert_eq!(params, &runs[0].1, "{world} ranks: rank {rank}'s parameters differ from rank 0's");
        }
        let worst = runs[0].1.iter().zip(&one_params).map(|(a, b)| (a - b).abs()).fold(0.0, f64::max);
        println!(
            "{world} ranks: final loss {:.6} (one process {:.6}), worst parameter gap {worst:.2e}",
            runs[0].0[STEPS - 1],
            one[STEPS - 1]
        );
        assert!(worst < 1e-4, "{world} ranks: parameters drifted {worst:.2e} from one process's");
    }
}

#[test]
fn the_gradient_sums_are_buckets_in_the_program_started_during_the_backward_pass() {
    let runs = ranks(
        2,
        16 << 10,
        |t| {
            let program = t.session().program().unwrap();
            let grads: Vec<String> =
                program.outputs.iter().filter(|(n, _)| n.starts_with("grad.")).map(|(n, _)| n.clone()).collect();
            (program.collectives.clone(), grads, program.kernels.len(), t.parallel_record().unwrap())
        },
        || digits_trainer(&[64, 128, 10], 10),
    );
    let (collectives, grads, kernels, record) = &runs[0];
    // 64x128 weights are 32 KiB: more than one 16 KiB bucket.
    assert!(collectives.len() >= 2, "{collectives:?}");
    let summed: Vec<&String> = collectives.iter().flat_map(|c| &c.outputs).collect();
    assert!(summed.contains(&&"loss".to_string()));
    for g in grads {
        assert_eq!(summed.iter().filter(|s| **s == g).count(), 1, "{g} is summed once");
    }
    // Started in schedule order, the first while kernels remain to run.
    let afters: Vec<usize> = collectives.iter().map(|c| c.after.unwrap()).collect();
    assert!(afters.windows(2).all(|w| w[0] <= w[1]), "{afters:?}");
    assert!(afters[0] + 1 < *kernels, "the first bucket starts after kernel {} of {kernels}", afters[0]);
    assert_eq!(record.buckets.len(), collectives.len());
    assert_eq!((record.world, record.backend.as_str()), (2, "local"));
}

#[test]
fn a_two_rank_checkpoint_resumes_on_one_rank_on_the_same_trajectory() {
    const STEPS: usize = 12;
    let batches = digits_batches(STEPS);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("step6.safetensors");
    let (b, p) = (batches.clone(), path.clone());
    let runs = ranks(
        2,
        DEFAULT_BUCKET,
        move |mut t| {
            let mut losses: Vec<f64> = b[..6].iter().map(|batch| t.step(batch).unwrap()).collect();
            t.save_checkpoint(&p).unwrap();
            losses.extend(b[6..].iter().map(|batch| t.step(batch).unwrap()));
            losses
        },
        || digits_trainer(&[64, 128, 10], STEPS),
    );
    let mut resumed = digits_trainer(&[64, 128, 10], STEPS);
    resumed.load_checkpoint(&path).unwrap();
    assert_eq!(resumed.steps(), 6);
    let rest: Vec<f64> = batches[6..].iter().map(|b| resumed.step(b).unwrap()).collect();
    close(&rest, &runs[0][6..]).unwrap();
    // And a one-process checkpoint resumes on two ranks; rank 0 alone reads it (rank 1 is
    // given a path that does not exist: no shared file system needed).
    let mut single = digits_trainer(&[64, 128, 10], STEPS);
    for b in &batches[..6] {
        single.step(b).unwrap();
    }
    single.save_checkpoint(&path).unwrap();
    let (b, p) = (batches.clone(), path.clone());
    let again = ranks(
        2,
        DEFAULT_BUCKET,
        move |mut t| {
            let path = if t.rank() == 0 { p.clone() } else { p.with_file_name("elsewhere.safetensors") };
            t.load_checkpoint(&path).unwrap();
            assert_eq!(t.steps(), 6);
            b[6..].iter().map(|batch| t.step(batch).unwrap()).collect::<Vec<f64>>()
        },
        || digits_trainer(&[64, 128, 10], STEPS),
    );
    close(&again[1], &runs[0][6..]).unwrap();
}

const DEFAULT_BUCKET: usize = rustral::train::DEFAULT_BUCKET_BYTES;

#[test]
fn ranks_that_compiled_different_steps_fail_at_start_on_every_rank() {
    let group = local_group(2, Duration::from_secs(60)).unwrap();
    let handles: Vec<_> = group
        .into_iter()
        .map(|comm: Collective| {
            std::thread::spawn(move || {
                let hidden = if comm.rank() == 0 { 128 } else { 96 };
                digits_trainer(&[64, hidden, 10], 10).with_collective(comm, DEFAULT_BUCKET).err().map(|e| e.to_string())
            })
        })
        .collect();
    for h in handles {
        let err = h.join().unwrap().expect("a mismatch is an error");
        assert!(err.contains("the compiled training step's hash differs on 1 rank(s)"), "{err}");
    }
}

#[test]
fn a_stalled_rank_ends_the_others_step_with_a_timeout_naming_the_collective() {
    let mut group = local_group(2, Duration::from_millis(1500)).unwrap();
    let stalled = group.pop().unwrap();
    let batches = digits_batches(1);
    // Rank 1 joins (the start-up checks pass), then never steps.
    let (stop, stopped) = std::sync::mpsc::channel::<()>();
    let h = std::thread::spawn(move || {
        let _rank1 = digits_trainer(&[64, 128, 10], 10).with_collective(stalled, DEFAULT_BUCKET).unwrap();
        stopped.recv().unwrap();
    });
    let mut t = digits_trainer(&[64, 128, 10], 10).with_collective(group.pop().unwrap(), DEFAULT_BUCKET).unwrap();
    let start = std::time::Instant::now();
    let err = t.step(&batches[0]).unwrap_err().to_string();
    assert!(start.elapsed() < Duration::from_secs(20));
    assert!(err.contains("rank 0 of 2: `all_reduce.0` timed out after 1.5 s"), "{err}");
    stop.send(()).unwrap();
    h.join().unwrap();
}

#[test]
fn a_batch_smaller_than_the_group_is_an_error() {
    let runs = ranks(
        3,
        DEFAULT_BUCKET,
        |mut t| {
            let x = HostTensor::new(DType::F32, &[2, 64], vec![0.0; 128]).unwrap();
            let y = HostTensor::new(DType::I64, &[2], vec![0.0; 2]).unwrap();
            t.step(&[("x", x), ("y", y)]).unwrap_err().to_string()
        },
        || digits_trainer(&[64, 128, 10], 10),
    );
    for err in runs {
        assert!(err.contains("a global batch of 2 rows cannot be split over 3 ranks"), "{err}");
    }
}

#[test]
fn a_rank_whose_step_fails_leaves_its_group_with_named_errors() {
    let group = local_group(2, Duration::from_millis(1500)).unwrap();
    let batches = digits_batches(2);
    let handles: Vec<_> = group
        .into_iter()
        .map(|comm| {
            let b = batches.clone();
            std::thread::spawn(move || {
                let mut t = digits_trainer(&[64, 128, 10], 10).with_collective(comm, DEFAULT_BUCKET).unwrap();
                let first = if t.rank() == 1 {
                    // A label out of range: this rank's step fails before its sums.
                    let x = b[0][0].1.clone();
                    let y = HostTensor::new(DType::I64, &[64], vec![99.0; 64]).unwrap();
                    t.step(&[("x", x), ("y", y)])
                } else {
                    t.step(&b[0])
                };
                let second = t.step(&b[1]);
                (first.map_err(|e| e.to_string()), second.map_err(|e| e.to_string()))
            })
        })
        .collect();
    let results: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    let (first0, second0) = &results[0];
    let (first1, second1) = &results[1];
    // Rank 0 waited for rank 1 in its first sum; both are out of step after it.
    assert!(first0.as_ref().unwrap_err().contains("`all_reduce.0` timed out after 1.5 s"), "{first0:?}");
    assert!(first1.is_err(), "{first1:?}");
    assert!(second0.as_ref().unwrap_err().contains("out of step with the others"), "{second0:?}");
    assert!(
        second1.as_ref().unwrap_err().contains("out of step with the others: step 1 failed on rank 1"),
        "{second1:?}"
    );
}
