//! A run manifest per training run (`schemas/run-manifest.schema.json`): the machine, the build,
//! the target, the model's configuration, the optimizer and schedule, the dataset's checksum,
//! and the loss and wall time of every step, so a run can be compared and reproduced.

use super::{Optimizer, Schedule};
use rustral_runtime::provenance::{Build, Machine};
use serde::Serialize;
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::path::Path;

/// The schema every manifest is checked against before it is written.
pub const SCHEMA: &str = include_str!("../../schemas/run-manifest.schema.json");

/// One training run.
#[derive(Clone, Debug, Serialize)]
pub struct RunManifest {
    /// Always `rustral-run-manifest`.
    pub format: &'static str,
    /// Layout version (1).
    pub version: u32,
    /// What was trained (`train_digits`).
    pub name: String,
    /// The machine.
    pub machine: Machine,
    /// The build.
    pub build: Build,
    /// The target (`cpu`, `wgsl`, ...).
    pub target: String,
    /// Optimisation level of the compiled step.
    pub level: String,
    /// The model's configuration and anything else the caller records (layer sizes, epochs,
    /// batch size).
    pub config: serde_json::Value,
    /// The optimizer.
    pub optimizer: OptimizerRecord,
    /// The learning-rate schedule.
    pub schedule: serde_json::Value,
    /// The data trained on.
    pub dataset: Vec<DatasetRecord>,
    /// Every step.
    pub steps: Vec<StepRecord>,
    /// Seconds from the first step to the last.
    pub wall_seconds: f64,
    /// The data-parallel run this rank was part of (absent for one process).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parallel: Option<super::ParallelRecord>,
}

/// The optimizer and its hyperparameters.
#[derive(Clone, Debug, Serialize)]
pub struct OptimizerRecord {
    /// `sgd`, `adam` or `adamw`.
    pub name: String,
    /// By name.
    pub hyperparameters: BTreeMap<String, f64>,
}

/// A data file and its SHA-256.
#[derive(Clone, Debug, Serialize)]
pub struct DatasetRecord {
    /// The file's path as given.
    pub path: String,
    /// Hex SHA-256 of its bytes.
    pub sha256: String,
    /// Its size in bytes.
    pub bytes: u64,
}

/// One step.
#[derive(Clone, Debug, Serialize)]
pub struct StepRecord {
    /// 1-based step number.
    pub step: usize,
    /// The loss before the update.
    pub loss: f64,
    /// Seconds since the run's first step began, at the end of this one.
    pub seconds: f64,
}

impl DatasetRecord {
    /// Checksum a data file.
    pub fn of(path: &Path) -> std::io::Result<DatasetRecord> {
        let bytes = std::fs::read(path)?;
        Ok(DatasetRecord {
            path: path.display().to_string(),
            sha256: format!("{:x}", Sha256::digest(&bytes)),
            bytes: bytes.len() as u64,
        })
    }
}

impl RunManifest {
    /// A manifest for a run starting now, on this machine and build (`root`: the checkout).
    pub fn new(
        name: &str,
        target: &str,
        level: &str,
        config: serde_json::Value,
        optimizer: Optimizer,
        schedule: Schedule,
        root: &Path,
    ) -> RunManifest {
        let schedule = match schedule {
            Schedule::Constant => serde_json::json!({ "kind": "constant" }),
            Schedule::WarmupCosine { warmup, total, min_factor } => {
                serde_json::json!({ "kind": "warmup_cosine", "warmup": warmup, "total": total, "min_factor": min_factor })
            }
        };
        RunManifest {
            format: "rustral-run-manifest",
            version: 1,
            name: name.into(),
            machine: Machine::this(),
            build: Build::this(root),
            target: target.into(),
            level: level.into(),
            config,
            optimizer: OptimizerRecord {
                name: optimizer.name().into(),
                hyperparameters: optimizer.describe().into_iter().map(|(k, v)| (k.to_string(), v)).collect(),
            },
            schedule,
            dataset: vec![],
            steps: vec![],
            wall_seconds: 0.0,
            parallel: None,
        }
    }

    /// Record a step.
    pub fn step(&mut self, loss: f64, seconds: f64) {
        self.steps.push(StepRecord { step: self.steps.len() + 1, loss, seconds });
        self.wall_seconds = seconds;
    }

    /// Record the trainer's data-parallel run so far (rank, world, transport, buckets, time
    /// spent communicating); nothing for a single process.
    pub fn record_parallel(&mut self, trainer: &super::Trainer) {
        self.parallel = trainer.parallel_record();
    }

    /// Where this rank writes a manifest meant for `path`: rank 0 (and a single process)
    /// there, rank r beside it as `{stem}.rank{r}.json`, so ranks never write one file.
    pub fn path_for_rank(&self, path: &Path) -> std::path::PathBuf {
        match &self.parallel {
            Some(p) if p.rank > 0 => {
                let stem = path.file_stem().map_or_else(String::new, |s| s.to_string_lossy().into_owned());
                path.with_file_name(format!("{stem}.rank{}.json", p.rank))
            }
            _ => path.to_path_buf(),
        }
    }

    /// Check against the schema, then write as pretty JSON (each rank of a data-parallel run
    /// to its own file: see [`RunManifest::path_for_rank`]).
    pub fn write(&self, path: &Path) -> Result<(), String> {
        let path = &self.path_for_rank(path);
        let value = serde_json::to_value(self).map_err(|e| e.to_string())?;
        validate(&value).map_err(|e| format!("run manifest for {} does not validate:\n{e}", path.display()))?;
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        }
        let text = serde_json::to_string_pretty(&value).map_err(|e| e.to_string())? + "\n";
        std::fs::write(path, text).map_err(|e| format!("{}: {e}", path.display()))
    }
}

/// Check a manifest against the schema; the errors, one per line, name the failing path.
pub fn validate(value: &serde_json::Value) -> Result<(), String> {
    let schema: serde_json::Value = serde_json::from_str(SCHEMA).expect("the bundled schema is JSON");
    let validator = jsonschema::validator_for(&schema).expect("the bundled schema compiles");
    let errors: Vec<String> = validator.iter_errors(value).map(|e| format!("{}: {e}", e.instance_path())).collect();
    if errors.is_empty() { Ok(()) } else { Err(errors.join("\n")) }
}
