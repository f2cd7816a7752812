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

/// A pipeline of one workload, compiled, bound and ready to run.
struct Ready<'a> {
    set: &'a PassSet,
    passes: Vec<String>,
    prepared: Prepared,
    hosts: HashMap<String, rustral_runtime::HostTensor>,
    /// Candle's program and its uploaded inputs when the target is `candle-cpu`.
    candle: Option<(rustral_runtime::candle::CandleProgram, HashMap<String, rustral_runtime::candle::Tensor>)>,
    timings: Vec<f64>,
}

impl Ready<'_> {
    fn run(&mut self) -> Result<(), String> {
        match &mut self.candle {
            Some((program, on_device)) => program.run_device(on_device).map(|_| ()).map_err(|e| e.to_string()),
            None => self.prepared.program.run_storage(&self.prepared.inputs).map(|_| ()).map_err(|e| e.to_string()),
        }
    }
}

/// Runs shorter than this get an untimed run before each timed one, so that their inputs are
/// in cache as they would be back to back, whichever pipeline ran before.
const WARM_BELOW_MS: f64 = 20.0;

/// Time `workload` on `target` with `threads` threads under every pipeline in `sets`,
/// interleaved: one warm-up run each, then rounds in which every pipeline runs once (the order
/// rotated from round to round), at least `repeats` rounds and until every pipeline has
/// `min_ms` of timing (at most 1000 rounds); then, on the CPU target, one profiled run each.
/// Interleaving is what makes the ratios between pipelines trustworthy on a shared machine:
/// a slow minute (a neighbour, a frequency step) lands on all of them alike rather than on
/// whichever ran then, and the i-th timing of every manifest comes from the same round, so
/// ratios can be paired. `candle-cpu` is candle's CPU device, whose threads are rayon's global
/// pool, so `threads` is what RAYON_NUM_THREADS says; its inputs are uploaded once, outside the
/// timing, as for the CPU target, and it has no per-kernel profile.
pub fn measure(
    target: &str,
    workload: &Workload,
    sets: &[PassSet],
    threads: usize,
    repeats: usize,
    min_ms: f64,
) -> Result<Vec<Manifest>, String> {
    if !TARGETS.contains(&target) {
        return Err(format!("unknown target {target:?} (known: {})", TARGETS.join(", ")));
    }
    let traced = (workload.trace)();
    let mut ready = Vec::with_capacity(sets.len());
    for set in sets {
        let mut pm = PassManager::new(set.level).verify_each(false);
        for p in &set.disabled {
            pm = pm.disable(p).map_err(|e| e.to_string())?;
        }
        let passes: Vec<String> = pm.pipeline().iter().map(|s| s.to_string()).collect();
        let prepared: Prepared = prepare_with(&traced, pm, threads, workload.sizes, 1000);
        let hosts: HashMap<String, rustral_runtime::HostTensor> =
            prepared.inputs.iter().map(|(n, s)| (n.clone(), s.to_host())).collect();
        let candle = if target == "candle-cpu" {
            let mut candle = rustral_runtime::candle::CandleProgram::new(
                prepared.program.program().clone(),
                rustral_runtime::candle::Device::Cpu,
            );
            candle.bind_params(&prepared.params).map_err(|e| e.to_string())?;
            let on_device = candle.upload_inputs(&hosts).map_err(|e| e.to_string())?;
            Some((candle, on_device))
        } else {
            None
        };
        let mut r = Ready { set, passes, prepared, hosts, candle, timings: Vec::new() };
        r.run()?;
        ready.push(r);
    }
    let n = ready.len();
    let mut round = 0;
    while round < 1000 && (round < repeats || ready.iter().any(|r| r.timings.iter().sum::<f64>() < min_ms)) {
        for k in 0..n {
            let r = &mut ready[(round + k) % n];
            if r.timings.last().is_some_and(|t| *t < WARM_BELOW_MS) {
                r.run()?;
            }
            let t = Instant::now();
            r.run()?;
            r.timings.push(t.elapsed().as_secs_f64() * 1e3);
        }
        round += 1;
    }
    ready.into_iter().map(|r| manifest_of(target, workload, threads, r)).collect()
}

/// The manifest of one pipeline's timings (with its profiled run on the CPU target).
fn manifest_of(target: &str, workload: &Workload, threads: usize, r: Ready<'_>) -> Result<Manifest, String> {
    let Ready { set, passes, prepared: p, hosts, candle, timings } = r;
    let binding: BTreeMap<String, usize> = workload.sizes.iter().map(|(k, v)| (k.to_string(), *v)).collect();
    let (by_op, program, dispatches) = match &candle {
        None => {
            let (_, profile) = p.program.run_profiled(&hosts).map_err(|e| e.to_string())?;
            let mut by_op: BTreeMap<String, f64> = BTreeMap::new();
            for k in profile {
                *by_op.entry(k.op).or_default() += k.time.as_secs_f64() * 1e3;
            }
            (by_op, p.program.program().clone(), p.program.dispatches())
        }
        Some((candle, _)) => (BTreeMap::new(), p.program.program().clone(), candle.dispatches()),
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
