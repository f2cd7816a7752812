//! The ablation matrix: every workload on every target at O0, O2, and O2 with one fusion pass
//! switched off at a time, one manifest per run.

use crate::manifest::{self, Build, Machine, Manifest, Pipeline, ProgramInfo, WorkloadInfo};
use crate::stats::summarize;
use crate::workloads::Workload;
use crate::{Prepared, prepare_with};
use rustral_passes::{OptLevel, PassManager};
use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

/// The passes an ablation switches off one at a time: every fusion pass, as the passes'
/// family table lists them.
pub fn fusion_passes() -> Vec<&'static str> {
    rustral_passes::fuse::fusion_passes().into_iter().map(|(pass, _)| pass).collect()
}

/// One pipeline of the matrix.
pub struct PassSet {
    /// Report label.
    pub label: String,
    /// Level.
    pub level: OptLevel,
    /// Passes switched off.
    pub disabled: Vec<&'static str>,
}

/// O0, O2, then O2 without each fusion pass.
pub fn pass_sets() -> Vec<PassSet> {
    let mut sets = vec![
        PassSet { label: "O0".into(), level: OptLevel::O0, disabled: vec![] },
        PassSet { label: "O2".into(), level: OptLevel::O2, disabled: vec![] },
    ];
    for p in fusion_passes() {
        sets.push(PassSet { label: format!("O2-{p}"), level: OptLevel::O2, disabled: vec![p] });
    }
    sets
}

/// The targets `measure` knows.
pub const TARGETS: [&str; 2] = ["cpu", "candle-cpu"];

/// Run `f` once, then time it `repeats` times (more while under `min_ms` in all).
fn time(repeats: usize, min_ms: f64, mut f: impl FnMut() -> Result<(), String>) -> Result<Vec<f64>, String> {
    f()?;
    let mut timings = Vec::new();
    let start = Instant::now();
    while timings.len() < repeats || (start.elapsed().as_secs_f64() * 1e3 < min_ms && timings.len() < 1000) {
        let t = Instant::now();
        f()?;
        timings.push(t.elapsed().as_secs_f64() * 1e3);
    }
    Ok(timings)
}

/// Time `workload` under `set` on `target` with `threads` threads: one warm-up run, then
/// `repeats` timed runs (at least `min_ms` of timing in all when runs are short), then, on the
/// CPU target, one profiled run. `candle-cpu` is candle's CPU device, whose threads are rayon's
/// global pool, so `threads` is what RAYON_NUM_THREADS says; its inputs are uploaded once,
/// outside the timing, as for the CPU target, and it has no per-kernel profile.
pub fn measure(
    target: &str,
    workload: &Workload,
    set: &PassSet,
    threads: usize,
    repeats: usize,
    min_ms: f64,
) -> Result<Manifest, String> {
    let traced = (workload.trace)();
    let mut pm = PassManager::new(set.level).verify_each(false);
    for p in &set.disabled {
        pm = pm.disable(p).map_err(|e| e.to_string())?;
    }
    let passes: Vec<String> = pm.pipeline().iter().map(|s| s.to_string()).collect();
    let p: Prepared = prepare_with(&traced, pm, threads, workload.sizes, 1000);
    let hosts: HashMap<String, rustral_runtime::HostTensor> =
        p.inputs.iter().map(|(n, s)| (n.clone(), s.to_host())).collect();
    let binding: BTreeMap<String, usize> = workload.sizes.iter().map(|(k, v)| (k.to_string(), *v)).collect();
    let (timings, by_op, program, dispatches) = match target {
        "cpu" => {
            let timings =
                time(repeats, min_ms, || p.program.run_storage(&p.inputs).map(|_| ()).map_err(|e| e.to_string()))?;
            let (_, profile) = p.program.run_profiled(&hosts).map_err(|e| e.to_string())?;
            let mut by_op: BTreeMap<String, f64> = BTreeMap::new();
            for k in profile {
                *by_op.entry(k.op).or_default() += k.time.as_secs_f64() * 1e3;
            }
            (timings, by_op, p.program.program().clone(), p.program.dispatches())
        }
        "candle-cpu" => {
            let program = p.program.program().clone();
            let mut candle =
                rustral_runtime::candle::CandleProgram::new(program.clone(), rustral_runtime::candle::Device::Cpu);
            candle.bind_params(&p.params).map_err(|e| e.to_string())?;
            let on_device = candle.upload_inputs(&hosts).map_err(|e| e.to_string())?;
            let timings =
                time(repeats, min_ms, || candle.run_device(&on_device).map(|_| ()).map_err(|e| e.to_string()))?;
            let dispatches = candle.dispatches();
            (timings, BTreeMap::new(), program, dispatches)
        }
        other => return Err(format!("unknown target {other:?} (known: {})", TARGETS.join(", "))),
    };
    let report = program.plan.report(&program.buffers, &binding);
    let level = match set.level {
        OptLevel::O0 => "O0",
        OptLevel::O1 => "O1",
        OptLevel::O2 => "O2",
    };
    Ok(Manifest {
        schema_version: manifest::SCHEMA_VERSION,
        unix_time: SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs()),
        workload: WorkloadInfo {
            name: workload.name.into(),
            kind: workload.kind,
            description: workload.description.into(),
        },
        target: target.into(),
        threads,
        pipeline: Pipeline {
            label: set.label.clone(),
            level: level.into(),
            disabled: set.disabled.iter().map(|s| s.to_string()).collect(),
            passes,
        },
        stats: summarize(&timings),
        timings_ms: timings,
        program: ProgramInfo {
            kernels: program.kernels.len(),
            dispatches,
            kernel_ops: program.kernels.iter().fold(BTreeMap::new(), |mut m, k| {
                *m.entry(k.name.clone()).or_insert(0) += 1;
                m
            }),
            planned_peak_bytes: report.planned_peak_bytes,
            unplanned_bytes: report.unplanned_bytes,
        },
        kernel_ms_by_op: by_op,
        machine: Machine::this(),
        build: Build::this(Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))),
    })
}
