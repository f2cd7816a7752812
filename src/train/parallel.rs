//! Data-parallel training: each rank runs the compiled step on its share of the global batch
//! and the ranks sum their loss and gradients, each scaled by the rank's share of the batch,
//! so every rank sees the global batch's mean and the optimizer makes the same update
//! everywhere.
//!
//! - The group comes from the launcher: with feature `mpi`, a process started by `mpirun`
//!   (`OMPI_COMM_WORLD_*`, or MPICH's `PMI_*`) joins its MPI world (with feature `nccl` and
//!   `RUSTRAL_DIST_BACKEND=nccl`, an NCCL group bootstrapped over MPI); [`Trainer::with_collective`]
//!   takes any other group ([`rustral_runtime::collective::local_group`]: ranks as threads).
//! - At start the ranks check that they compiled the same step (a hash of its IR and of what
//!   is summed) and take rank 0's parameters.
//! - On the CPU and Candle targets the sums are host steps of the Program, bucketed and started
//!   as the backward pass computes the gradients (`Program::collectives`); elsewhere they run
//!   after the step.
//! - Rank 0 writes checkpoints; a checkpoint resumes on any number of ranks.

use super::Trainer;
use crate::{Error, Result};
use rustral_frontend::ParamValue;
use rustral_runtime::HostTensor;
use rustral_runtime::collective::{Collective, CommTime};
use rustral_runtime::exec::Share;
use serde::Serialize;
use sha2::{Digest, Sha256};

/// Bucket size of the gradient sums, unless `RUSTRAL_BUCKET_BYTES` says otherwise: small
/// enough that a few-layer model's gradients go in several buckets (the first starts while
/// the rest are computed), large enough that each call moves more than its latency's worth.
pub const DEFAULT_BUCKET_BYTES: usize = 256 << 10;

/// A trainer's part in a data-parallel run.
pub(super) struct Parallel {
    pub(super) comm: Collective,
    pub(super) bucket_bytes: usize,
    /// The outputs summed: the loss, then each gradient, then each written parameter.
    pub(super) summed: Vec<String>,
    /// The target sums in its schedule; else the trainer sums after each run.
    pub(super) scheduled: bool,
    /// Communication time when the run began.
    pub(super) start: CommTime,
    /// The step's inputs whose first dim is symbolic: the batched ones, split by rows.
    pub(super) batched: Vec<String>,
}

/// One bucket of a data-parallel step, as a run manifest records it.
#[derive(Clone, Debug, Serialize)]
pub struct BucketRecord {
    /// `all_reduce.{i}`.
    pub name: String,
    /// The outputs it sums.
    pub outputs: Vec<String>,
    /// Bytes per rank.
    pub bytes: usize,
    /// The kernel after which it starts (its index in the schedule), if any.
    pub after_kernel: Option<usize>,
}

/// A data-parallel run, as a run manifest records it.
#[derive(Clone, Debug, Serialize)]
pub struct ParallelRecord {
    /// The transport (`mpi`, `nccl`, `local`).
    pub backend: String,
    /// Ranks in all.
    pub world: usize,
    /// This rank.
    pub rank: usize,
    /// Requested bucket size.
    pub bucket_bytes: usize,
    /// The buckets, in the order they start (empty where the target sums after the step).
    pub buckets: Vec<BucketRecord>,
    /// Seconds the transport spent summing and broadcasting since the trainer joined.
    pub comm_seconds: f64,
    /// Seconds the step waited for it: the part not overlapped with computing.
    pub comm_wait_seconds: f64,
    /// Values moved.
    pub comm_values: u64,
}

/// The bucket size from `RUSTRAL_BUCKET_BYTES`, else [`DEFAULT_BUCKET_BYTES`].
pub(super) fn bucket_bytes() -> Result<usize> {
    match std::env::var("RUSTRAL_BUCKET_BYTES") {
        Err(_) => Ok(DEFAULT_BUCKET_BYTES),
        Ok(s) => s
            .trim()
            .parse::<usize>()
            .ok()
            .filter(|&b| b > 0)
            .ok_or_else(|| Error::Usage(format!("RUSTRAL_BUCKET_BYTES={s:?} is not a positive number of bytes"))),
    }
}

/// The group a launcher started this process in, if any: MPI's with feature `mpi`. Without
/// it, a process that a launcher started as one of several ranks is an error, not a silent
/// single-process run on a fraction of the work.
pub(super) fn from_env() -> Result<Option<Collective>> {
    #[cfg(feature = "mpi")]
    {
        let backend = std::env::var("RUSTRAL_DIST_BACKEND").unwrap_or_else(|_| "mpi".into());
        match backend.as_str() {
            "mpi" => Ok(rustral_runtime::collective::mpi::from_env()?),
            #[cfg(feature = "nccl")]
            "nccl" => Ok(rustral_runtime::collective::nccl::from_env()?),
            other => Err(Error::Usage(format!(
                "RUSTRAL_DIST_BACKEND={other:?}: this build has {}",
                if cfg!(feature = "nccl") {
                    "`mpi` and `nccl`"
                } else {
                    "`mpi` (build with `--features nccl` for NCCL)"
                }
            ))),
        }
    }
    #[cfg(not(feature = "mpi"))]
    {
        let size = ["OMPI_COMM_WORLD_SIZE", "PMI_SIZE"]
            .iter()
            .find_map(|v| std::env::var(v).ok()?.trim().parse::<usize>().ok());
        match size {
            Some(n) if n > 1 => Err(Error::Usage(format!(
                "this process is one of {n} ranks started by an MPI launcher, but rustral was built without \
                 the `mpi` feature: rebuild with `--features mpi` to train data-parallel"
            ))),
            _ => Ok(None),
        }
    }
}

impl Parallel {
    /// This rank's rows of a global batch: every batched input (its first dim symbolic in the
    /// step) is cut to the rank's contiguous share (rank r of w takes rows `r*n/w ..
    /// (r+1)*n/w`); other inputs pass whole. Returns them with the rank's share of the rows,
    /// by which its loss and gradients are scaled: right for a loss that is a mean over rows
    /// (as `cross_entropy` and the other `nn` losses are), not for a sum.
    pub(super) fn shard<'a>(&self, batch: &[(&'a str, HostTensor)]) -> Result<(Vec<(&'a str, HostTensor)>, f64)> {
        let (rank, world) = (self.comm.rank(), self.comm.world());
        let is_batched = |name: &str| self.batched.iter().any(|b| b == name);
        let rows = batch
            .iter()
            .filter(|(n, t)| is_batched(n) && !t.shape().is_empty())
            .map(|(_, t)| t.shape()[0])
            .max()
            .unwrap_or(0);
        if rows < world {
            return Err(Error::Usage(format!(
                "a global batch of {rows} rows cannot be split over {world} ranks (each needs at least one row)"
            )));
        }
        let (from, to) = (rank * rows / world, (rank + 1) * rows / world);
        let mut out = Vec::with_capacity(batch.len());
        for (name, t) in batch {
            if !is_batched(name) || t.shape().is_empty() {
                out.push((*name, t.clone()));
                continue;
            }
            if t.shape()[0] != rows {
                return Err(Error::Usage(format!(
                    "input `{name}` has {} rows, the batch's other inputs {rows}: data-parallel training splits \
                     every batched input by its first dim",
                    t.shape()[0]
                )));
            }
            let row: usize = t.shape()[1..].iter().product();
            let values = t.to_vec()[from * row..to * row].to_vec();
            let mut shape = t.shape().to_vec();
            shape[0] = to - from;
            let part = HostTensor::new(t.dtype, &shape, values).map_err(|e| Error::Usage(e.to_string()))?;
            out.push((*name, part));
        }
        Ok((out, (to - from) as f64 / rows as f64))
    }
}

impl Trainer {
    /// Train data-parallel on `comm`'s ranks (each rank calls this with its own handle): the
    /// ranks check that they compiled the same step, take rank 0's parameters and optimizer
    /// state, and from now on sum their loss and gradients every step. A process started by
    /// `mpirun` joins MPI in [`Trainer::new`] already (feature `mpi`).
    /// Gradients are summed in buckets of about `bucket_bytes` (a trainer made by
    /// [`Trainer::new`] takes `RUSTRAL_BUCKET_BYTES`, else [`DEFAULT_BUCKET_BYTES`]).
    pub fn with_collective(mut self, comm: Collective, bucket_bytes: usize) -> Result<Trainer> {
        self.join(comm, bucket_bytes)?;
        Ok(self)
    }

    pub(super) fn join(&mut self, comm: Collective, bucket_bytes: usize) -> Result<()> {
        let mut summed = vec![self.loss.clone()];
        summed.extend(self.specs.iter().map(|p| rustral_passes::grad::grad_output_name(&p.name)));
        summed.extend(self.updates.iter().map(|p| format!("{}{}", rustral_frontend::UPDATE, p.name)));
        let graph = self.session.graph();
        let batched: Vec<String> = graph
            .inputs()
            .into_iter()
            .filter(|(_, id)| {
                graph.node(*id).is_some_and(|n| matches!(n.ty.shape.0.first(), Some(rustral_ir::Dim::Sym(_))))
            })
            .map(|(name, _)| name)
            .collect();
        let share = Share { comm: comm.clone(), weight: 1.0 };
        let scheduled = self.session.set_data_parallel(&summed, bucket_bytes, share)?;
        // The ranks must run the same collectives in the same order: compare the step's IR,
        // what it sums, and the Program's buckets.
        let mut hash = Sha256::new();
        hash.update(rustral_ir::print(self.session.graph()).as_bytes());
        let buckets = if scheduled { self.buckets() } else { Vec::new() };
        hash.update(
            format!("summed {summed:?} batched {batched:?} bucket_bytes {bucket_bytes} {buckets:?}").as_bytes(),
        );
        let words: Vec<u32> = hash.finalize().chunks(4).map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect();
        comm.check_same("the compiled training step's hash", &words)?;
        if batched.is_empty() {
            return Err(Error::Usage(
                "data-parallel training splits the batch by rows, but no input of this step has a symbolic \
                 first dim (trace the batch dim as Dim::sym)"
                    .into(),
            ));
        }
        // The device step reads back only the loss; the sums need the gradients on the host.
        self.on_device = false;
        let start = comm.time();
        self.parallel = Some(Parallel { comm, bucket_bytes, summed, scheduled, start, batched });
        self.take_root_state()
    }

    /// The Program's cross-rank sums (empty where the target has no Program or sums after the
    /// step).
    fn buckets(&self) -> Vec<BucketRecord> {
        let collectives = self.session.program().map_or(&[][..], |p| &p.collectives[..]);
        collectives
            .iter()
            .map(|c| BucketRecord {
                name: c.name.clone(),
                outputs: c.outputs.clone(),
                bytes: c.bytes,
                after_kernel: c.after,
            })
            .collect()
    }

    /// Replace the parameters, written parameters, optimizer state and step count by rank 0's.
    pub(super) fn take_root_state(&mut self) -> Result<()> {
        let Some(par) = &self.parallel else { return Ok(()) };
        let comm = par.comm.clone();
        self.sync_from_device()?;
        let mut packed = vec![self.step as f64];
        let names: Vec<String> = self.specs.iter().chain(&self.updates).map(|p| p.name.clone()).collect();
        for name in &names {
            packed.extend(&self.params.get(name).expect("bound parameters").data);
        }
        for p in &self.specs {
            let (m, v) = &self.state[&p.name];
            packed.extend(m);
            packed.extend(v);
        }
        let root = comm.broadcast("broadcast parameters from rank 0", packed, 0)?;
        let mut at = 1;
        let mut take = |n: usize| {
            at += n;
            root[at - n..at].to_vec()
        };
        for name in &names {
            let p = self.params.get(name).expect("bound parameters");
            let value = ParamValue { dtype: p.dtype, shape: p.shape.clone(), data: take(p.data.len()) };
            self.params.insert(name, value);
        }
        for p in &self.specs {
            let n = p.numel();
            let (m, v) = (take(n), take(n));
            self.state.insert(p.name.clone(), (m, v));
        }
        self.step = root[0] as usize;
        self.session.bind(&self.params)?;
        Ok(())
    }

    /// Sum the summed outputs of a run over the ranks, where the target did not (WGSL).
    pub(super) fn sum_after_run(&self, out: &mut [(String, HostTensor)], weight: f64) -> Result<()> {
        let Some(par) = self.parallel.as_ref().filter(|p| !p.scheduled) else { return Ok(()) };
        let mut packed = Vec::new();
        for name in &par.summed {
            if let Some((_, t)) = out.iter().find(|(n, _)| n == name) {
                packed.extend(t.to_vec().into_iter().map(|x| x * weight));
            }
        }
        let sums = par.comm.sum("all_reduce (after the step)", packed)?;
        let mut at = 0;
        for name in &par.summed {
            if let Some((_, t)) = out.iter_mut().find(|(n, _)| n == name) {
                let n: usize = t.shape().iter().product();
                *t = HostTensor::new(t.dtype, t.shape(), sums[at..at + n].to_vec())
                    .map_err(|e| Error::Usage(e.to_string()))?;
                at += n;
            }
        }
        Ok(())
    }

    /// The group this trainer is a rank of, if it trains data-parallel.
    pub fn collective(&self) -> Option<&Collective> {
        self.parallel.as_ref().map(|p| &p.comm)
    }

    /// This rank (0 when not data-parallel).
    pub fn rank(&self) -> usize {
        self.collective().map_or(0, Collective::rank)
    }

    /// Ranks in all (1 when not data-parallel).
    pub fn world(&self) -> usize {
        self.collective().map_or(1, Collective::world)
    }

    /// The data-parallel run so far, for a run manifest.
    pub fn parallel_record(&self) -> Option<ParallelRecord> {
        let par = self.parallel.as_ref()?;
        let now = par.comm.time();
        Some(ParallelRecord {
            backend: par.comm.backend().to_string(),
            world: par.comm.world(),
            rank: par.comm.rank(),
            bucket_bytes: par.bucket_bytes,
            buckets: self.buckets(),
            comm_seconds: now.busy - par.start.busy,
            comm_wait_seconds: now.waited - par.start.waited,
            comm_values: now.values - par.start.values,
        })
    }
}
