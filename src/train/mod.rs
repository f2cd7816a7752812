//! Training: the training step (forward, loss, gradients: the grad pass, compiled once for a
//! target at the chosen level) and an optimizer applied to its gradients. SGD with momentum,
//! Adam and AdamW, with constant or linear-warmup + cosine learning rates. Checkpoints hold the
//! parameters and the optimizer state (safetensors) and resume to the same trajectory bit for
//! bit on the CPU target.
//!
//! Parameters and optimizer state stay on the target between steps: on the CPU target the
//! optimizer updates the bound f32 parameters in place (in f64 arithmetic, chunks in
//! parallel), on the WGSL target an optimizer shader updates them on the device and only the
//! loss is read back; other targets rebind the updated values after each step.

mod manifest;
mod parallel;

pub use manifest::{DatasetRecord, OptimizerRecord, RunManifest, StepRecord, validate as validate_manifest};
pub use parallel::{BucketRecord, DEFAULT_BUCKET_BYTES, ParallelRecord};

use crate::{CompileOptions, Result, Session, Target};
use rayon::prelude::*;
use rustral_frontend::{ParamSpec, ParamStore, ParamValue, Traced};
use rustral_ir::DType;
use rustral_passes::grad::{grad, grad_output_name};
use rustral_runtime::{HostTensor, round_to};
use std::collections::BTreeMap;
use std::path::Path;

/// How parameters move against their gradients.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Optimizer {
    /// `v = momentum * v + g + wd * p; p -= lr * v`.
    Sgd {
        /// Learning rate (scaled by the schedule).
        lr: f64,
        /// Momentum (0 for plain SGD).
        momentum: f64,
        /// L2 weight decay added to the gradient.
        weight_decay: f64,
    },
    /// Adam (Kingma and Ba) with bias correction; `weight_decay` is L2 added to the gradient.
    Adam {
        /// Learning rate (scaled by the schedule).
        lr: f64,
        /// First-moment decay.
        beta1: f64,
        /// Second-moment decay.
        beta2: f64,
        /// Added to the root of the second moment.
        eps: f64,
        /// L2 weight decay added to the gradient.
        weight_decay: f64,
    },
    /// AdamW (Loshchilov and Hutter): Adam with weight decay applied to the parameter directly.
    AdamW {
        /// Learning rate (scaled by the schedule).
        lr: f64,
        /// First-moment decay.
        beta1: f64,
        /// Second-moment decay.
        beta2: f64,
        /// Added to the root of the second moment.
        eps: f64,
        /// Decoupled weight decay.
        weight_decay: f64,
    },
}

impl Optimizer {
    /// Adam with PyTorch's defaults and learning rate `lr`.
    pub fn adam(lr: f64) -> Optimizer {
        Optimizer::Adam { lr, beta1: 0.9, beta2: 0.999, eps: 1e-8, weight_decay: 0.0 }
    }

    /// AdamW with PyTorch's defaults (weight decay 0.01) and learning rate `lr`.
    pub fn adamw(lr: f64) -> Optimizer {
        Optimizer::AdamW { lr, beta1: 0.9, beta2: 0.999, eps: 1e-8, weight_decay: 0.01 }
    }

    /// The hyperparameters by name, for run manifests.
    pub fn describe(&self) -> BTreeMap<&'static str, f64> {
        match *self {
            Optimizer::Sgd { lr, momentum, weight_decay } => {
                [("lr", lr), ("momentum", momentum), ("weight_decay", weight_decay)].into()
            }
            Optimizer::Adam { lr, beta1, beta2, eps, weight_decay }
            | Optimizer::AdamW { lr, beta1, beta2, eps, weight_decay } => {
                [("lr", lr), ("beta1", beta1), ("beta2", beta2), ("eps", eps), ("weight_decay", weight_decay)].into()
            }
        }
    }

    /// The optimizer's name.
    pub fn name(&self) -> &'static str {
        match self {
            Optimizer::Sgd { .. } => "sgd",
            Optimizer::Adam { .. } => "adam",
            Optimizer::AdamW { .. } => "adamw",
        }
    }

    /// Update `p` in place from gradient `g` at step `t` (1-based) with learning-rate factor
    /// `f`; `m` and `v` are the state (momentum; first and second moments). Elementwise, so
    /// chunks update in parallel with the same result as in order.
    fn update(&self, t: usize, f: f64, p: &mut [f64], g: &[f64], m: &mut [f64], v: &mut [f64]) {
        const CHUNK: usize = 1 << 14;
        p.par_chunks_mut(CHUNK)
            .zip(g.par_chunks(CHUNK))
            .zip(m.par_chunks_mut(CHUNK).zip(v.par_chunks_mut(CHUNK)))
            .for_each(|((p, g), (m, v))| self.update_chunk(t, f, p, g, m, v));
    }

    fn update_chunk(&self, t: usize, f: f64, p: &mut [f64], g: &[f64], m: &mut [f64], v: &mut [f64]) {
        match *self {
            Optimizer::Sgd { lr, momentum, weight_decay } => {
                for i in 0..p.len() {
                    let gi = g[i] + weight_decay * p[i];
                    m[i] = momentum * m[i] + gi;
                    p[i] -= lr * f * m[i];
                }
            }
            Optimizer::Adam { lr, beta1, beta2, eps, weight_decay }
            | Optimizer::AdamW { lr, beta1, beta2, eps, weight_decay } => {
                let decoupled = matches!(self, Optimizer::AdamW { .. });
                let (c1, c2) = (1.0 - beta1.powi(t as i32), 1.0 - beta2.powi(t as i32));
                for i in 0..p.len() {
                    if decoupled {
                        p[i] -= lr * f * weight_decay * p[i];
                    }
                    let gi = if decoupled { g[i] } else { g[i] + weight_decay * p[i] };
                    m[i] = beta1 * m[i] + (1.0 - beta1) * gi;
                    v[i] = beta2 * v[i] + (1.0 - beta2) * gi * gi;
                    p[i] -= lr * f * (m[i] / c1) / ((v[i] / c2).sqrt() + eps);
                }
            }
        }
    }
}

/// The learning rate over the steps, as a factor of the optimizer's.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Schedule {
    /// Always 1.
    Constant,
    /// Linear from 0 to 1 over `warmup` steps, then a cosine down to `min_factor` at `total`.
    WarmupCosine {
        /// Warm-up steps.
        warmup: usize,
        /// Steps in all.
        total: usize,
        /// The factor at the end.
        min_factor: f64,
    },
}

impl Schedule {
    /// The factor at step `t` (1-based).
    pub fn factor(&self, t: usize) -> f64 {
        match *self {
            Schedule::Constant => 1.0,
            Schedule::WarmupCosine { warmup, total, min_factor } => {
                if t <= warmup {
                    t as f64 / warmup.max(1) as f64
                } else {
                    let progress = ((t - warmup) as f64 / (total.saturating_sub(warmup)).max(1) as f64).min(1.0);
                    min_factor + (1.0 - min_factor) * 0.5 * (1.0 + (std::f64::consts::PI * progress).cos())
                }
            }
        }
    }
}

/// The graph of a training step: `loss` and its gradient with respect to `wrt`. Above O0 the
/// forward graph is fused first, so fused ops' own gradient rules apply (softmax's needs no
/// max); the session then optimises the whole step again.
pub fn training_graph(
    forward: &rustral_ir::Graph,
    loss: &str,
    wrt: &[String],
    options: &CompileOptions,
) -> Result<rustral_ir::Graph> {
    let mut g = forward.clone();
    if options.level != rustral_passes::OptLevel::O0 {
        let mut pm = rustral_passes::PassManager::new(options.level);
        for name in &options.disabled {
            pm = pm.disable(name)?;
        }
        pm.run(&mut g)?;
    }
    Ok(grad(&g, loss, wrt)?)
}

/// A compiled training step with its parameters and optimizer state.
pub struct Trainer {
    session: Session,
    specs: Vec<ParamSpec>,
    params: ParamStore,
    /// Per parameter: (first state, second state).
    state: BTreeMap<String, (Vec<f64>, Vec<f64>)>,
    step: usize,
    optimizer: Optimizer,
    schedule: Schedule,
    loss: String,
    /// True when the parameters and optimizer state live on the device (the WGSL target) and
    /// `params` is behind it.
    on_device: bool,
    /// `params` is older than the device's.
    host_stale: bool,
    /// The step reads `rng_step` (it has dropout): each step feeds its number.
    rng_step: bool,
    /// Parameters the step writes rather than learns (batch norm's running statistics): each
    /// with its output `update.{name}`, copied into it after every step.
    updates: Vec<ParamSpec>,
    /// The data-parallel group this trainer is a rank of.
    parallel: Option<parallel::Parallel>,
}

impl Trainer {
    /// Differentiate output `loss` of `traced` with respect to every parameter, compile the
    /// step for `target`, and bind `params`. In a process an MPI launcher started (`mpirun`;
    /// feature `mpi`), the trainer is that rank of a data-parallel run: see
    /// [`Trainer::with_collective`].
    pub fn new(
        traced: &Traced,
        loss: &str,
        target: Target,
        options: &CompileOptions,
        optimizer: Optimizer,
        schedule: Schedule,
        params: ParamStore,
    ) -> Result<Trainer> {
        let written = |p: &ParamSpec| {
            let output = format!("{}{}", rustral_frontend::UPDATE, p.name);
            traced.graph.outputs().iter().any(|o| o.name == output)
        };
        let (updates, specs): (Vec<ParamSpec>, Vec<ParamSpec>) =
            traced.params.iter().filter(|p| p.dtype.is_float()).cloned().partition(written);
        let names: Vec<String> = specs.iter().map(|p| p.name.clone()).collect();
        let g = training_graph(&traced.graph, loss, &names, options)?;
        let rng_step = g.inputs().iter().any(|(name, _)| name == rustral_frontend::RNG_STEP);
        // The device step reads back only the loss: a step that writes parameters runs the
        // optimizer on the host, which reads every output.
        #[cfg(feature = "wgsl")]
        let on_device = matches!(target, Target::Wgsl) && updates.is_empty();
        #[cfg(not(feature = "wgsl"))]
        let on_device = false;
        let mut session = Session::compile(&g, target, options)?;
        session.bind(&params)?;
        let state = specs.iter().map(|p| (p.name.clone(), (vec![0.0; p.numel()], vec![0.0; p.numel()]))).collect();
        let mut trainer = Trainer {
            session,
            specs,
            params,
            state,
            step: 0,
            optimizer,
            schedule,
            loss: loss.into(),
            on_device,
            host_stale: false,
            rng_step,
            updates,
            parallel: None,
        };
        // The environment is read before MPI starts, so a bad setting fails this rank alone
        // and at once, not the others at their first collective's timeout.
        let bucket_bytes = parallel::bucket_bytes()?;
        if let Some(comm) = parallel::from_env()? {
            trainer.join(comm, bucket_bytes)?;
        }
        Ok(trainer)
    }

    /// One step on a batch (the graph's inputs by name): returns the loss before the update.
    /// Data-parallel, `batch` is the global batch: each rank runs its share of the rows and
    /// the loss returned is the global batch's.
    /// On the WGSL target the update runs on the device (in f32) and only the loss is read
    /// back; elsewhere the optimizer runs on the host in f64. A model with dropout gets the
    /// step's number as `rng_step` (unless the batch sets it), so each step draws new masks
    /// and a resumed run draws the same ones as an unbroken run.
    pub fn step(&mut self, batch: &[(&str, HostTensor)]) -> Result<f64> {
        let r = self.step_inner(batch);
        if let (Err(e), Some(par)) = (&r, &self.parallel) {
            // The other ranks may be waiting in this step's collectives: this rank is out of
            // step with them, and later steps fail at once (theirs at their timeout).
            par.comm.poison(&format!("step {} failed on rank {}: {e}", self.step + 1, par.comm.rank()));
        }
        r
    }

    fn step_inner(&mut self, batch: &[(&str, HostTensor)]) -> Result<f64> {
        let with_step: Vec<(&str, HostTensor)>;
        let batch = if self.rng_step && !batch.iter().any(|(n, _)| *n == rustral_frontend::RNG_STEP) {
            // Data-parallel, each rank draws its own masks (one stream per step and rank).
            let stream = self.step * self.world() + self.rank();
            let step = HostTensor::new(DType::I64, &[], vec![stream as f64]).expect("one value fills a scalar");
            with_step = batch.iter().cloned().chain([(rustral_frontend::RNG_STEP, step)]).collect();
            &with_step[..]
        } else {
            batch
        };
        // Data-parallel: this rank's rows of the global batch, and their share of it.
        let sharded;
        let (batch, weight) = if let Some(par) = &self.parallel {
            let (rows, weight) = par.shard(batch)?;
            sharded = rows;
            self.session.set_share_weight(weight);
            (&sharded[..], weight)
        } else {
            (batch, 1.0)
        };
        #[cfg(feature = "wgsl")]
        if self.on_device {
            let t = self.step + 1;
            let f = self.schedule.factor(t);
            let update = match self.optimizer {
                Optimizer::Sgd { lr, momentum, weight_decay } => rustral_runtime::wgpu::DeviceUpdate::Sgd {
                    lr: (lr * f) as f32,
                    momentum: momentum as f32,
                    weight_decay: weight_decay as f32,
                },
                Optimizer::Adam { lr, beta1, beta2, eps, weight_decay }
                | Optimizer::AdamW { lr, beta1, beta2, eps, weight_decay } => {
                    rustral_runtime::wgpu::DeviceUpdate::Adam {
                        lr: (lr * f) as f32,
                        beta1: beta1 as f32,
                        beta2: beta2 as f32,
                        eps: eps as f32,
                        weight_decay: weight_decay as f32,
                        c1: (1.0 - beta1.powi(t as i32)) as f32,
                        c2: (1.0 - beta2.powi(t as i32)) as f32,
                        decoupled: matches!(self.optimizer, Optimizer::AdamW { .. }),
                    }
                }
            };
            let pairs: Vec<(String, String)> =
                self.specs.iter().map(|p| (p.name.clone(), grad_output_name(&p.name))).collect();
            if let Some(loss) = self.session.step_on_device(batch, &self.loss, &pairs, update)? {
                self.step = t;
                self.host_stale = true;
                return Ok(loss);
            }
        }
        let mut out = self.session.run(batch)?;
        self.sum_after_run(&mut out, weight)?;
        let value = |name: &str| out.iter().find(|(n, _)| n == name).map(|(_, t)| t.to_vec());
        let loss = value(&self.loss).map_or(f64::NAN, |v| v[0]);
        self.step += 1;
        let factor = self.schedule.factor(self.step);
        for spec in &self.specs {
            let g = value(&grad_output_name(&spec.name)).expect("the step computes every gradient");
            let p = self.params.get(&spec.name).expect("bound parameters");
            let mut data = p.data.clone();
            let (m, v) = self.state.get_mut(&spec.name).expect("state per parameter");
            self.optimizer.update(self.step, factor, &mut data, &g, m, v);
            for x in &mut data {
                *x = round_to(spec.dtype, *x);
            }
            self.params.insert(&spec.name, ParamValue { dtype: spec.dtype, shape: spec.shape.clone(), data });
        }
        for spec in &self.updates {
            let name = format!("{}{}", rustral_frontend::UPDATE, spec.name);
            let data = value(&name).expect("the step computes every update");
            self.params.insert(&spec.name, ParamValue { dtype: spec.dtype, shape: spec.shape.clone(), data });
        }
        // In place where the target holds f32 parameters (no conversion of every tensor).
        let params = &self.params;
        let updated = self.session.update_params(|name, values| {
            if let Some(p) = params.get(name) {
                for (v, &x) in values.iter_mut().zip(&p.data) {
                    *v = x as f32;
                }
            }
        })?;
        if !updated {
            self.session.bind(&self.params)?;
        }
        Ok(loss)
    }

    /// The current parameters (read back from the device when they live there).
    pub fn params(&mut self) -> Result<&ParamStore> {
        self.sync_from_device()?;
        Ok(&self.params)
    }

    /// Bring the host's parameters and optimizer state up to the device's.
    fn sync_from_device(&mut self) -> Result<()> {
        #[cfg(feature = "wgsl")]
        if self.host_stale {
            let names: Vec<String> = self.specs.iter().map(|p| p.name.clone()).collect();
            if let (Some(values), Some(moments)) =
                (self.session.device_params(&names)?, self.session.device_moments(&names)?)
            {
                for ((spec, v), (m, s)) in self.specs.iter().zip(values).zip(moments) {
                    let data = v.into_iter().map(f64::from).collect();
                    self.params.insert(&spec.name, ParamValue { dtype: spec.dtype, shape: spec.shape.clone(), data });
                    let widen = |x: Vec<f32>| x.into_iter().map(f64::from).collect::<Vec<f64>>();
                    self.state.insert(spec.name.clone(), (widen(m), widen(s)));
                }
            }
            self.host_stale = false;
        }
        Ok(())
    }

    /// Steps taken.
    pub fn steps(&self) -> usize {
        self.step
    }

    /// The compiled step (its graph, statistics, program). Data-parallel, each of its runs
    /// sums outputs across the ranks, so every rank must run it the same number of times.
    pub fn session(&self) -> &Session {
        &self.session
    }

    /// The optimizer.
    pub fn optimizer(&self) -> Optimizer {
        self.optimizer
    }

    /// Write the parameters, the optimizer state (`optimizer.{m,v}.<name>`, f64) and the step
    /// count (`optimizer.step`) to a safetensors file (read back from the device first when
    /// they live there). Data-parallel, only rank 0 writes (every rank holds the same state).
    pub fn save_checkpoint(&mut self, path: &Path) -> Result<()> {
        let written = if self.rank() == 0 { self.write_checkpoint(path) } else { Ok(()) };
        // Every rank waits for rank 0's write, so none reads a half-written file.
        self.agree("checkpoint written by rank 0", written.is_err(), path)?;
        written
    }

    fn write_checkpoint(&mut self, path: &Path) -> Result<()> {
        self.sync_from_device()?;
        let mut store = self.params.clone();
        for (name, (m, v)) in &self.state {
            let shape = self.params.get(name).expect("state per parameter").shape.clone();
            store.insert(
                &format!("optimizer.m.{name}"),
                ParamValue { dtype: DType::F64, shape: shape.clone(), data: m.clone() },
            );
            store.insert(&format!("optimizer.v.{name}"), ParamValue { dtype: DType::F64, shape, data: v.clone() });
        }
        store.insert("optimizer.step", ParamValue { dtype: DType::F64, shape: vec![], data: vec![self.step as f64] });
        Ok(store.save_safetensors(path)?)
    }

    /// Resume from a checkpoint written by [`Trainer::save_checkpoint`] for the same model,
    /// with any number of ranks (data-parallel, rank 0 reads it and the others take its
    /// state).
    pub fn load_checkpoint(&mut self, path: &Path) -> Result<()> {
        // Data-parallel, rank 0 alone reads it (no shared file system needed) and the others
        // take its state.
        let read = if self.rank() == 0 { self.read_checkpoint(path) } else { Ok(()) };
        self.agree("checkpoint read by rank 0", read.is_err(), path)?;
        read?;
        self.take_root_state()
    }

    /// Data-parallel: whether rank 0 `failed` at a checkpoint, on every rank (an error on the
    /// ranks that did not fail).
    fn agree(&self, what: &str, failed: bool, path: &Path) -> Result<()> {
        let Some(par) = &self.parallel else { return Ok(()) };
        let failures = par.comm.sum(what, vec![f64::from(u8::from(failed))])?[0];
        if failures > 0.0 && !failed {
            return Err(crate::Error::Usage(format!("rank 0 failed at the checkpoint {}", path.display())));
        }
        Ok(())
    }

    fn read_checkpoint(&mut self, path: &Path) -> Result<()> {
        let mut specs = self.specs.clone();
        specs.extend(self.updates.iter().cloned());
        for p in &self.specs {
            for kind in ["m", "v"] {
                specs.push(ParamSpec { name: format!("optimizer.{kind}.{}", p.name), dtype: DType::F64, ..p.clone() });
            }
        }
        if let Some(first) = self.specs.first() {
            specs.push(ParamSpec { name: "optimizer.step".into(), dtype: DType::F64, shape: vec![], ..first.clone() });
        }
        let store = ParamStore::load_safetensors(path, &specs, &[])?;
        for p in &self.updates {
            self.params.insert(&p.name, store.get(&p.name).expect("loaded by spec").clone());
        }
        for p in &self.specs {
            let get = |n: &str| store.get(n).expect("loaded by spec").clone();
            self.params.insert(&p.name, get(&p.name));
            let (m, v) = (get(&format!("optimizer.m.{}", p.name)), get(&format!("optimizer.v.{}", p.name)));
            self.state.insert(p.name.clone(), (m.data, v.data));
        }
        self.step = store.get("optimizer.step").map_or(0, |s| s.data[0] as usize);
        self.session.bind(&self.params)?;
        #[cfg(feature = "wgsl")]
        if self.on_device {
            for (name, (m, v)) in &self.state {
                let f = |x: &[f64]| x.iter().map(|&y| y as f32).collect::<Vec<f32>>();
                self.session.set_device_moments(name, &f(m), &f(v))?;
            }
        }
        self.host_stale = false;
        Ok(())
    }
}
