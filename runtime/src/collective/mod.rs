//! Collectives for data-parallel training: the sum of a buffer over every rank (the gradient
//! all-reduce) and a broadcast from one rank (parameters at start, the program hash check).
//!
//! Each rank's [`Collective`] owns one communication thread, which alone talks to the
//! transport (MPI wants its calls from the thread that initialised it; NCCL wants one stream).
//! Work is handed to the thread and waited for with a deadline, so
//! - a bucket of gradients can be summed while the backward pass goes on computing the next
//!   ones ([`Collective::start_sum`] returns at once; [`Pending::wait`] collects), and
//! - a rank that stalls or vanishes ends the others' runs with [`CollectiveError::Timeout`]
//!   naming the collective, not a hang: the waiting thread gives up at the deadline even
//!   though the transport's call never returns.
//!
//! Transports: [`local_group`] (ranks as threads of one process, for tests and for trying
//! data-parallel code without a launcher), MPI (feature `mpi`, [`mpi::from_env`]) and NCCL
//! (feature `nccl`, bootstrapped over MPI).

mod local;
#[cfg(feature = "mpi")]
pub mod mpi;
#[cfg(feature = "nccl")]
pub mod nccl;

pub use local::local_group;

use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender, channel};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use thiserror::Error;

/// How long a rank waits for a collective before it gives up, unless
/// `RUSTRAL_COLLECTIVE_TIMEOUT` (seconds) says otherwise.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(300);

/// The timeout from `RUSTRAL_COLLECTIVE_TIMEOUT` (seconds, fractional allowed), else
/// [`DEFAULT_TIMEOUT`].
pub fn timeout_from_env() -> Result<Duration, CollectiveError> {
    match std::env::var("RUSTRAL_COLLECTIVE_TIMEOUT") {
        Err(_) => Ok(DEFAULT_TIMEOUT),
        Ok(s) => s
            .trim()
            .parse::<f64>()
            .ok()
            .filter(|t| t.is_finite() && *t > 0.0 && *t < 1e9)
            .map(Duration::from_secs_f64)
            .ok_or_else(|| CollectiveError::Setup {
                backend: "env".into(),
                message: format!("RUSTRAL_COLLECTIVE_TIMEOUT={s:?} is not a positive number of seconds"),
            }),
    }
}

/// Why a collective failed.
#[derive(Debug, Error)]
pub enum CollectiveError {
    /// The transport could not start (no launcher, MPI already finalised, a bad environment).
    #[error("{backend}: cannot start: {message}")]
    Setup {
        /// The transport.
        backend: String,
        /// What went wrong.
        message: String,
    },
    /// Another rank did not join in time: it stalled, crashed, or runs a different schedule.
    #[error(
        "{backend} rank {rank} of {world}: `{what}` timed out after {seconds:.1} s waiting for the other ranks \
         (a rank stalled, exited, or runs a different program; RUSTRAL_COLLECTIVE_TIMEOUT sets the limit)"
    )]
    Timeout {
        /// The transport.
        backend: String,
        /// This rank.
        rank: usize,
        /// Ranks in all.
        world: usize,
        /// The collective (`all_reduce.3`, `broadcast params`).
        what: String,
        /// The limit.
        seconds: f64,
    },
    /// The transport reported an error.
    #[error("{backend} rank {rank}: `{what}` failed: {message}")]
    Failed {
        /// The transport.
        backend: String,
        /// This rank.
        rank: usize,
        /// The collective.
        what: String,
        /// What the transport said.
        message: String,
    },
    /// The ranks disagree about something that must be the same everywhere.
    #[error("rank {rank} of {world}: {message}")]
    Mismatch {
        /// This rank.
        rank: usize,
        /// Ranks in all.
        world: usize,
        /// What differs.
        message: String,
    },
}

/// What the communication thread runs: blocking collectives over `world` ranks. Made on that
/// thread and never leaves it.
pub trait Transport {
    /// This rank, `0..world`.
    fn rank(&self) -> usize;
    /// Ranks in all.
    fn world(&self) -> usize;
    /// Replace `data` by its elementwise sum over all ranks (every rank passes the same length).
    fn sum(&mut self, data: &mut [f64]) -> Result<(), String>;
    /// Replace `data` on every rank by `root`'s.
    fn broadcast(&mut self, data: &mut [f64], root: usize) -> Result<(), String>;
}

type Reply = Sender<Result<Vec<f64>, String>>;

enum Job {
    Sum(Vec<f64>, Reply),
    Broadcast(Vec<f64>, usize, Reply),
}

/// Seconds the transport spent, and seconds callers waited for it.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct CommTime {
    /// Time inside the transport's calls (on the communication thread).
    pub busy: f64,
    /// Time callers spent blocked in [`Pending::wait`]: the part not hidden behind compute.
    pub waited: f64,
    /// Values summed or broadcast.
    pub values: u64,
    /// Calls made.
    pub calls: u64,
}

struct Inner {
    rank: usize,
    world: usize,
    backend: String,
    timeout: Duration,
    jobs: Mutex<Option<Sender<Job>>>,
    /// Signalled by the thread after it dropped the transport (MPI_Finalize and the like).
    done: Mutex<Option<Receiver<()>>>,
    time: Arc<Mutex<CommTime>>,
    /// A collective timed out: the thread may be stuck in the transport for good.
    stalled: std::sync::atomic::AtomicBool,
    /// Why this rank is out of step with the others (a timeout, a failed step), if it is:
    /// every later collective fails at once with it rather than pairing with the wrong call.
    broken: Mutex<Option<String>>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        // Closing the job channel ends the thread's loop; it then drops the transport. Wait
        // for that (a stalled transport cannot be waited for: give up at the timeout).
        self.jobs.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take();
        let stalled = self.stalled.load(std::sync::atomic::Ordering::Relaxed);
        if let Some(done) = self.done.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take()
            && !stalled
        {
            let _ = done.recv_timeout(self.timeout);
        }
    }
}

/// One rank's handle on a group of ranks. Cheap to clone; the transport shuts down (MPI is
/// finalised) when the last clone is dropped.
#[derive(Clone)]
pub struct Collective {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Collective {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Collective({} rank {} of {})", self.inner.backend, self.inner.rank, self.inner.world)
    }
}

impl Collective {
    /// Start a communication thread that makes its transport with `make` and serves jobs with
    /// it; each collective waits at most `timeout`.
    pub fn spawn(
        backend: &str,
        timeout: Duration,
        make: impl FnOnce() -> Result<Box<dyn Transport>, String> + Send + 'static,
    ) -> Result<Collective, CollectiveError> {
        let (jobs, rx) = channel::<Job>();
        let (ready_tx, ready) = channel::<Result<(usize, usize), String>>();
        let (done_tx, done) = channel::<()>();
        let time = Arc::new(Mutex::new(CommTime::default()));
        let thread_time = time.clone();
        let setup = |message: String| CollectiveError::Setup { backend: backend.into(), message };
        std::thread::Builder::new()
            .name(format!("rustral-{backend}"))
            .spawn(move || {
                let mut transport = match make() {
                    Ok(t) => t,
                    Err(e) => {
                        let _ = ready_tx.send(Err(e));
                        return;
                    }
                };
                let _ = ready_tx.send(Ok((transport.rank(), transport.world())));
                for job in rx {
                    let start = Instant::now();
                    let (reply, result) = match job {
                        Job::Sum(mut data, reply) => {
                            let r = transport.sum(&mut data).map(|()| data);
                            (reply, r)
                        }
                        Job::Broadcast(mut data, root, reply) => {
                            let r = transport.broadcast(&mut data, root).map(|()| data);
                            (reply, r)
                        }
                    };
                    if let Ok(mut t) = thread_time.lock() {
                        t.busy += start.elapsed().as_secs_f64();
                        t.calls += 1;
                        t.values += result.as_ref().map_or(0, |d| d.len() as u64);
                    }
                    let _ = reply.send(result);
                }
                drop(transport);
                let _ = done_tx.send(());
            })
            .map_err(|e| setup(e.to_string()))?;
        let (rank, world) = match ready.recv_timeout(timeout) {
            Ok(Ok(rw)) => rw,
            Ok(Err(message)) => return Err(setup(message)),
            Err(_) => return Err(setup(format!("the transport did not start within {:.1} s", timeout.as_secs_f64()))),
        };
        Ok(Collective {
            inner: Arc::new(Inner {
                rank,
                world,
                backend: backend.into(),
                timeout,
                jobs: Mutex::new(Some(jobs)),
                done: Mutex::new(Some(done)),
                time,
                stalled: Default::default(),
                broken: Mutex::new(None),
            }),
        })
    }

    /// This rank, `0..world`.
    pub fn rank(&self) -> usize {
        self.inner.rank
    }

    /// Ranks in all.
    pub fn world(&self) -> usize {
        self.inner.world
    }

    /// The transport's name (`local`, `mpi`, `nccl`).
    pub fn backend(&self) -> &str {
        &self.inner.backend
    }

    /// How long a collective may wait.
    pub fn timeout(&self) -> Duration {
        self.inner.timeout
    }

    /// Time spent communicating so far.
    pub fn time(&self) -> CommTime {
        *self.inner.time.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Mark this rank out of step with the others (its step failed halfway through the
    /// schedule's collectives): every later collective fails at once with `reason`.
    pub fn poison(&self, reason: &str) {
        let mut broken = self.inner.broken.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        broken.get_or_insert_with(|| reason.to_string());
    }

    fn submit(&self, what: &str, job: impl FnOnce(Reply) -> Job) -> Pending {
        let broken = self.inner.broken.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone();
        if let Some(reason) = broken {
            return Pending {
                what: what.into(),
                rx: Err(format!("this rank is out of step with the others: {reason}")),
                comm: self.clone(),
            };
        }
        let (reply, rx) = channel();
        let sent = self
            .inner
            .jobs
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .as_ref()
            .is_some_and(|jobs| jobs.send(job(reply)).is_ok());
        let rx = if sent { Ok(rx) } else { Err("the communication thread has stopped".to_string()) };
        Pending { what: what.into(), rx, comm: self.clone() }
    }

    /// Start summing `data` over the ranks; returns at once. `what` names it in errors.
    pub fn start_sum(&self, what: &str, data: Vec<f64>) -> Pending {
        self.submit(what, |reply| Job::Sum(data, reply))
    }

    /// Sum `data` over the ranks and wait for the result.
    pub fn sum(&self, what: &str, data: Vec<f64>) -> Result<Vec<f64>, CollectiveError> {
        self.start_sum(what, data).wait()
    }

    /// `root`'s `data` on every rank (every rank passes the same length).
    pub fn broadcast(&self, what: &str, data: Vec<f64>, root: usize) -> Result<Vec<f64>, CollectiveError> {
        self.submit(what, |reply| Job::Broadcast(data, root, reply)).wait()
    }

    /// Check that every rank passes the same `words` (a program's hash): rank 0's are
    /// broadcast, each rank compares, and the count of ranks that differ is summed, so every
    /// rank fails when any differs.
    pub fn check_same(&self, what: &str, words: &[u32]) -> Result<(), CollectiveError> {
        let mine: Vec<f64> = words.iter().map(|&w| f64::from(w)).collect();
        let root = self.broadcast(&format!("broadcast {what}"), mine.clone(), 0)?;
        let differs = f64::from(u8::from(root != mine));
        let count = self.sum(&format!("compare {what}"), vec![differs])?[0];
        if count > 0.0 {
            let hex = |w: &[f64]| w.iter().map(|&x| format!("{:08x}", x as u32)).collect::<String>();
            return Err(CollectiveError::Mismatch {
                rank: self.rank(),
                world: self.world(),
                message: format!(
                    "{what} differs on {count} rank(s): rank 0 has {}, this rank {}",
                    hex(&root),
                    hex(&mine)
                ),
            });
        }
        Ok(())
    }
}

/// A collective under way.
pub struct Pending {
    what: String,
    rx: Result<Receiver<Result<Vec<f64>, String>>, String>,
    comm: Collective,
}

impl Pending {
    /// Wait for the result, at most the collective's timeout.
    pub fn wait(self) -> Result<Vec<f64>, CollectiveError> {
        let c = &self.comm.inner;
        let start = Instant::now();
        let failed = |message: String| CollectiveError::Failed {
            backend: c.backend.clone(),
            rank: c.rank,
            what: self.what.clone(),
            message,
        };
        let rx = match &self.rx {
            Ok(rx) => rx,
            Err(why) => return Err(failed(why.clone())),
        };
        let r = match rx.recv_timeout(c.timeout) {
            Ok(r) => r.map_err(failed),
            Err(RecvTimeoutError::Timeout) => Err({
                c.stalled.store(true, std::sync::atomic::Ordering::Relaxed);
                self.comm.poison(&format!("`{}` timed out", self.what));
                CollectiveError::Timeout {
                    backend: c.backend.clone(),
                    rank: c.rank,
                    world: c.world,
                    what: self.what.clone(),
                    seconds: c.timeout.as_secs_f64(),
                }
            }),
            Err(RecvTimeoutError::Disconnected) => Err(failed("the communication thread has stopped".into())),
        };
        if let Ok(mut t) = c.time.lock() {
            t.waited += start.elapsed().as_secs_f64();
        }
        r
    }
}
