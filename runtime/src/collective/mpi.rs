//! MPI ranks (rsmpi over the system's MPI: Open MPI, MPICH): the launcher (`mpirun -np N`)
//! starts the processes and sets the environment; MPI is initialised on the communication
//! thread, which alone calls it (`MPI_THREAD_FUNNELED`), and finalised when the last handle
//! of the process's [`Collective`] is dropped.

use super::{Collective, CollectiveError, Transport, timeout_from_env};
use mpi::collective::SystemOperation;
use mpi::topology::SimpleCommunicator;
use mpi::traits::*;
use std::sync::{Mutex, Weak};

/// The most values one MPI call moves (MPI counts are `int`).
const CHUNK: usize = 1 << 28;

struct Mpi {
    world: SimpleCommunicator,
    // Dropped last: finalises MPI.
    _universe: mpi::environment::Universe,
}

impl Transport for Mpi {
    fn rank(&self) -> usize {
        self.world.rank() as usize
    }

    fn world(&self) -> usize {
        self.world.size() as usize
    }

    fn sum(&mut self, data: &mut [f64]) -> Result<(), String> {
        for chunk in data.chunks_mut(CHUNK) {
            let send = chunk.to_vec();
            self.world.all_reduce_into(&send[..], chunk, SystemOperation::sum());
        }
        Ok(())
    }

    fn broadcast(&mut self, data: &mut [f64], root: usize) -> Result<(), String> {
        let root = i32::try_from(root).map_err(|_| format!("no rank {root}"))?;
        if root >= self.world.size() {
            return Err(format!("no rank {root} among {}", self.world.size()));
        }
        for chunk in data.chunks_mut(CHUNK) {
            self.world.process_at_rank(root).broadcast_into(chunk);
        }
        Ok(())
    }
}

/// The ranks and size a launcher set, if one started this process: Open MPI's
/// `OMPI_COMM_WORLD_RANK`/`_SIZE`, else MPICH's and Intel MPI's `PMI_RANK`/`PMI_SIZE`.
pub fn launched() -> Option<(usize, usize)> {
    let read = |name: &str| std::env::var(name).ok()?.trim().parse::<usize>().ok();
    let pair = |r: &str, s: &str| Some((read(r)?, read(s)?));
    pair("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE").or_else(|| pair("PMI_RANK", "PMI_SIZE"))
}

static PROCESS: Mutex<Option<Weak<super::Inner>>> = Mutex::new(None);

/// This process's MPI group when an MPI launcher started it (None otherwise). The first call
/// initialises MPI; later calls share it while any handle lives. MPI cannot be initialised
/// twice in a process, so asking again after every handle was dropped is an error.
pub fn from_env() -> Result<Option<Collective>, CollectiveError> {
    let Some((rank, size)) = launched() else { return Ok(None) };
    let mut process = PROCESS.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some(inner) = process.as_ref().and_then(Weak::upgrade) {
        return Ok(Some(Collective { inner }));
    }
    if process.is_some() {
        return Err(CollectiveError::Setup {
            backend: "mpi".into(),
            message: "MPI was finalised when the last data-parallel handle was dropped and cannot start again \
                      in this process: keep one Trainer (or its Collective) for the whole run"
                .into(),
        });
    }
    let timeout = timeout_from_env()?;
    let c = Collective::spawn("mpi", timeout, || {
        let (universe, _) = mpi::initialize_with_threading(mpi::Threading::Funneled)
            .ok_or("MPI is already initialised in this process")?;
        let world = universe.world();
        Ok(Box::new(Mpi { world, _universe: universe }) as Box<dyn Transport>)
    })?;
    if (c.rank(), c.world()) != (rank, size) {
        return Err(CollectiveError::Mismatch {
            rank: c.rank(),
            world: c.world(),
            message: format!("the launcher's environment says rank {rank} of {size}, MPI says otherwise"),
        });
    }
    *process = Some(std::sync::Arc::downgrade(&c.inner));
    Ok(Some(c))
}
