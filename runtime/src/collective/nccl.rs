//! NCCL ranks for CUDA devices (cudarc's bindings, loaded at run time, so the build needs no
//! CUDA toolkit). The processes come from an MPI launcher, and MPI carries NCCL's unique id
//! from rank 0 to the others, as NCCL's own examples do. Each rank uses the CUDA device of
//! its local rank (Open MPI's `OMPI_COMM_WORLD_LOCAL_RANK`, MPICH's `MPI_LOCALRANKID`,
//! Slurm's `SLURM_LOCALID`) unless `RUSTRAL_CUDA_DEVICE` names one.
//!
//! The executor packs each bucket on the host, so a sum here is a copy to the device, NCCL's
//! all-reduce, and a copy back. Compiled in CI; not yet run on GPUs (no multi-GPU machine was
//! available when it was written).

use super::{Collective, CollectiveError, Transport, timeout_from_env};
use cudarc::driver::{CudaContext, CudaStream};
use cudarc::nccl::safe::{Comm, Id, ReduceOp};
use std::sync::Arc;

struct Nccl {
    comm: Comm,
    stream: Arc<CudaStream>,
    rank: usize,
    world: usize,
    /// MPI stays initialised while NCCL runs.
    _mpi: Collective,
}

impl Transport for Nccl {
    fn rank(&self) -> usize {
        self.rank
    }

    fn world(&self) -> usize {
        self.world
    }

    fn sum(&mut self, data: &mut [f64]) -> Result<(), String> {
        let mut d = self.stream.clone_htod(data).map_err(|e| format!("copy to the device: {e:?}"))?;
        self.comm.all_reduce_in_place(&mut d, &ReduceOp::Sum).map_err(|e| format!("ncclAllReduce: {e:?}"))?;
        self.stream.memcpy_dtoh(&d, data).map_err(|e| format!("copy from the device: {e:?}"))?;
        self.stream.synchronize().map_err(|e| format!("synchronize: {e:?}"))
    }

    fn broadcast(&mut self, data: &mut [f64], root: usize) -> Result<(), String> {
        let root = i32::try_from(root).map_err(|_| format!("no rank {root}"))?;
        let mut d = self.stream.clone_htod(data).map_err(|e| format!("copy to the device: {e:?}"))?;
        self.comm.broadcast_in_place(&mut d, root).map_err(|e| format!("ncclBroadcast: {e:?}"))?;
        self.stream.memcpy_dtoh(&d, data).map_err(|e| format!("copy from the device: {e:?}"))?;
        self.stream.synchronize().map_err(|e| format!("synchronize: {e:?}"))
    }
}

/// This process's NCCL group when an MPI launcher started it (None otherwise).
pub fn from_env() -> Result<Option<Collective>, CollectiveError> {
    let Some(mpi) = super::mpi::from_env()? else { return Ok(None) };
    let (rank, world) = (mpi.rank(), mpi.world());
    let setup = |message: String| CollectiveError::Setup { backend: "nccl".into(), message };
    let read = |name: &str| std::env::var(name).ok().and_then(|v| v.trim().parse::<usize>().ok());
    let device = ["RUSTRAL_CUDA_DEVICE", "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID"]
        .iter()
        .find_map(|v| read(v))
        .unwrap_or(0);
    // Rank 0 makes the id (128 bytes); MPI carries it to the others. A rank 0 that cannot
    // make one sends zeros, and every rank fails.
    let made = if rank == 0 { Some(Id::new().map_err(|e| format!("ncclGetUniqueId: {e:?}"))) } else { None };
    let mine: Vec<f64> = match &made {
        Some(Ok(id)) => id.internal().iter().map(|&c| f64::from(c as u8)).collect(),
        _ => vec![0.0; 128],
    };
    let bytes = mpi.broadcast("broadcast the NCCL id", mine, 0)?;
    if let Some(Err(e)) = made {
        return Err(setup(e));
    }
    if bytes.iter().all(|&b| b == 0.0) {
        return Err(setup("rank 0 could not make an NCCL id".into()));
    }
    let mut internal = [0 as std::ffi::c_char; 128];
    for (c, &b) in internal.iter_mut().zip(&bytes) {
        *c = b as u8 as std::ffi::c_char;
    }
    let timeout = timeout_from_env()?;
    let c = Collective::spawn("nccl", timeout, move || {
        let ctx = CudaContext::new(device).map_err(|e| format!("CUDA device {device}: {e:?}"))?;
        let stream = ctx.default_stream();
        let comm = Comm::from_rank(stream.clone(), rank, world, Id::uninit(internal))
            .map_err(|e| format!("ncclCommInitRank: {e:?}"))?;
        Ok(Box::new(Nccl { comm, stream, rank, world, _mpi: mpi }) as Box<dyn Transport>)
    })?;
    Ok(Some(c))
}
