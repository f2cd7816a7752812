//! The CPU target: runs a lowered `Program` with f32 kernels (GEMM from the `gemm` crate,
//! row-parallel norms and softmax, attention a query row at a time, fused elementwise bodies
//! a row at a time), work split over a rayon pool of the chosen size. Ops or dtypes without a
//! fast kernel run the reference implementation, so every program runs.
//!
//! Fused elementwise bodies are compiled to native vector loops by Cranelift (`jit`); the
//! row interpreter is kept as the baseline and for hosts Cranelift cannot target.

pub mod blas;
mod broadcast;
mod jit;
mod kernels;
mod simd;
pub use blas::gemm_library;
pub use simd::{KERNEL_PATHS, PROBED_FEATURES, cpu_features, kernel_path};
mod storage;

use crate::exec::{Backend, Executor};
pub use crate::exec::{KernelTime, Outputs};
use crate::reference::{EvalError, Place, concrete};
use crate::tensor::HostTensor;
use rustral_ir::Op;
use rustral_lowering::{Kernel, Program};
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
pub use storage::Storage;
use thiserror::Error;

/// Why the CPU target failed.
#[derive(Debug, Error)]
pub enum CpuError {
    /// A feed or evaluation error (as the reference reports them).
    #[error(transparent)]
    Eval(#[from] EvalError),
    /// The thread pool could not be built.
    #[error("cannot start {threads} threads: {message}")]
    Threads {
        /// Requested threads.
        threads: usize,
        /// Why.
        message: String,
    },
    /// `RUSTRAL_BLAS` names a library that cannot run the GEMMs (not found, no
    /// `cblas_sgemm`, or a wrong answer to the check it is given).
    #[error("{0}")]
    Blas(String),
}

/// How `FusedElementwise` kernels run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Elementwise {
    /// Compiled: by Cranelift to f32x4 loops, once per body and broadcast pattern, except a
    /// body with `exp`, `tanh`, `sigmoid` or `erf` on a CPU with AVX2 or AVX-512, which runs
    /// a tile at a time through loops compiled ahead of time at that width (twice or four
    /// times Cranelift's; `Tiles`). The interpreter runs instead on a host Cranelift cannot
    /// target.
    #[default]
    Jit,
    /// Every body by Cranelift (what `Jit` was before the tile loops; for measuring them).
    Cranelift,
    /// Every body of up to 64 nodes a tile at a time by the precompiled vector loops, longer
    /// ones by Cranelift.
    Tiles,
    /// Evaluated a row at a time by Rust loops: the baseline the JIT is measured against.
    Interpreted,
}

/// The CPU target's side of the executor: values in host memory (f32 vectors, other dtypes
/// as the reference holds them), f32 kernels on a rayon pool of the chosen size.
pub struct CpuBackend {
    pool: Arc<rayon::ThreadPool>,
    threads: usize,
    elementwise: Elementwise,
}

impl Backend for CpuBackend {
    type Value = Storage;
    type Error = CpuError;

    fn upload(&self, t: HostTensor, _: &Place) -> Result<Storage, CpuError> {
        Ok(Storage::from_host(t))
    }

    fn upload_ref(&self, t: &HostTensor, _: &Place) -> Result<Storage, CpuError> {
        Ok(Storage::from_host_ref(t))
    }

    fn download(&self, v: &Storage, _: rustral_ir::DType, _: &Place) -> Result<HostTensor, CpuError> {
        Ok(v.to_host())
    }

    fn shape(v: &Storage) -> &[usize] {
        v.shape()
    }

    fn dtype(v: &Storage, _: rustral_ir::DType) -> rustral_ir::DType {
        storage_dtype(v)
    }

    /// The f32 kernel when there is one (a reshape of contiguous f32 data is a view).
    fn run_kernel(
        &self,
        kernel: &Kernel,
        args: &[&Storage],
        dtype: rustral_ir::DType,
        shape: &[usize],
        place: &Place,
    ) -> Result<Option<Storage>, CpuError> {
        if let (Op::Reshape { .. }, Some(reshaped)) = (&kernel.op, args.first().and_then(|a| a.reshaped(shape))) {
            return Ok(Some(reshaped));
        }
        if let Some(out) = kernels::try_quantized(&kernel.op, args, shape) {
            return Ok(Some(out));
        }
        match kernels::try_f32(&kernel.op, args, dtype, shape, self.elementwise) {
            Some(v) if v.len() != shape.iter().product::<usize>() => {
                let message = format!("internal error: f32 kernel produced {} values for shape {shape:?}", v.len());
                Err(EvalError::Runtime { place: place.clone(), message }.into())
            }
            Some(v) => Ok(Some(Storage::f32_values(v, shape.to_vec()))),
            None => Ok(None),
        }
    }

    /// f32 caches are written in place when no one else shares their values (copy on write
    /// otherwise); other dtypes go through the host.
    fn update_slice(
        &self,
        target: Storage,
        _exclusive: bool,
        update: &Storage,
        axis: usize,
        start: usize,
        place: &Place,
    ) -> Result<Storage, CpuError> {
        match (target, update.f32()) {
            (Storage::F32(mut values, shape), Some(new)) => {
                let inner: usize = shape[axis + 1..].iter().product();
                let (rows, n) = (shape[axis], update.shape()[axis]);
                let outer: usize = shape[..axis].iter().product();
                let dst = Arc::make_mut(&mut values);
                for o in 0..outer {
                    let at = (o * rows + start) * inner;
                    dst[at..at + n * inner].copy_from_slice(&new[o * n * inner..(o + 1) * n * inner]);
                }
                Ok(Storage::F32(values, shape))
            }
            (target, _) => {
                let out = crate::exec::update_slice_on_host(&target.to_host(), &update.to_host(), axis, start, place)?;
                Ok(Storage::from_host(out))
            }
        }
    }

    fn install<R: Send>(&self, f: impl FnOnce() -> R + Send) -> R {
        // Only at one thread: `caller_pool` makes the caller a worker of its own for good.
        if self.threads == 1
            && let Some(own) = caller_pool()
        {
            return own.install(f);
        }
        self.pool.install(f)
    }
}

/// A program ready to run on the CPU.
pub struct CpuProgram {
    exec: Executor<CpuBackend>,
}

impl CpuProgram {
    /// Prepare `program` to run on `threads` threads.
    ///
    /// At one thread a program runs on the thread that calls `run`, as PyTorch and ONNX
    /// Runtime do at one thread, not on a pool worker: handing a run to another thread and
    /// back cost 15-50 us on a 2-vCPU VM (LayerNorm [8,128,768]: 0.20 ms a run handed over,
    /// 0.14 ms on the caller). rayon then counts that thread as the only worker of a pool of
    /// its own, for good: rayon parallel iterators the same thread runs outside Rustral run on
    /// it alone too, and a `rayon::spawn` from it waits until the thread next enters rayon.
    /// Where that matters, run the program from a thread of its own. A thread
    /// already in a rayon pool, and any past the first 256, hand their runs over as before.
    pub fn new(program: Program, threads: usize) -> Result<CpuProgram, CpuError> {
        let threads = threads.max(1);
        // A BLAS the user asked for and cannot have is an error here, not a silent fallback.
        blas::blas().map_err(|e| CpuError::Blas(e.to_string()))?;
        let pool = shared_pool(threads)?;
        warm_jit(&program);
        let backend = CpuBackend { pool, threads, elementwise: Elementwise::default() };
        Ok(CpuProgram { exec: Executor::new(program, backend) })
    }

    /// Choose how fused elementwise kernels run (the JIT unless told otherwise).
    pub fn set_elementwise(&mut self, mode: Elementwise) {
        self.exec.backend_mut().elementwise = mode;
    }

    /// How fused elementwise kernels run.
    pub fn elementwise(&self) -> Elementwise {
        self.exec.backend().elementwise
    }

    /// The program.
    pub fn program(&self) -> &Program {
        self.exec.program()
    }

    /// Sum `outputs` across the ranks of a data-parallel run (see
    /// [`Executor::set_data_parallel`](crate::exec::Executor::set_data_parallel)).
    pub fn set_data_parallel(
        &mut self,
        outputs: &[String],
        bucket_bytes: usize,
        share: crate::exec::Share,
    ) -> Result<(), rustral_lowering::ScheduleError> {
        self.exec.set_data_parallel(outputs, bucket_bytes, share)
    }

    /// Change this rank's share of the global batch for the next runs.
    pub fn set_share_weight(&mut self, weight: f64) {
        self.exec.set_share_weight(weight);
    }

    /// Kernels launched per run: those that read only parameters and constants ran once when
    /// the parameters were bound.
    pub fn dispatches(&self) -> usize {
        self.exec.dispatches()
    }

    /// Threads used.
    pub fn threads(&self) -> usize {
        self.exec.backend().threads
    }

    /// Change bound f32 parameters in place (`f` gets each one's name and values; a training
    /// step's update), then recompute what depends on them. Returns false, changing nothing,
    /// when a parameter is not bound or not held as f32.
    pub fn update_params(&mut self, mut f: impl FnMut(&str, &mut [f32])) -> Result<bool, CpuError> {
        let declared = self.exec.param_count();
        let mut params = self.exec.params_mut();
        if params.len() != declared || !params.iter().all(|(_, v)| matches!(v, Storage::F32(..))) {
            return Ok(false);
        }
        for (name, v) in &mut params {
            if let Storage::F32(values, _) = v {
                let values: &mut Vec<f32> = Arc::make_mut(values);
                f(name, values);
            }
        }
        self.exec.precompute()?;
        Ok(true)
    }

    /// A host tensor on the target, to hold as run state (a KV cache).
    pub fn upload(&self, t: HostTensor) -> Result<Storage, CpuError> {
        let place = Place { node: 0, op: "state".into(), provenance: String::new() };
        self.exec.backend().upload(t, &place)
    }

    /// One stateful step (see `Executor::run_carry`): `state` stays on the target.
    pub fn run_carry(
        &self,
        inputs: &HashMap<String, HostTensor>,
        state: &mut HashMap<String, Storage>,
        carry: &[(String, String)],
        read: &[&str],
    ) -> Result<Vec<(String, HostTensor)>, CpuError> {
        self.exec.run_carry(inputs, state, carry, read)
    }

    /// Bind parameter values once; each must match its declared (static) type.
    pub fn bind_params(&mut self, params: &HashMap<String, HostTensor>) -> Result<(), CpuError> {
        self.exec.bind_params(params)
    }

    /// Run on named inputs; returns the outputs in order.
    pub fn run(&self, inputs: &HashMap<String, HostTensor>) -> Result<Vec<(String, HostTensor)>, CpuError> {
        self.exec.run_host(inputs, None)
    }

    /// Run on inputs already in CPU storage (no conversion on the way in or out): what
    /// benchmarks and repeated inference use.
    pub fn run_storage(&self, inputs: &HashMap<String, Storage>) -> Result<Vec<(String, Storage)>, CpuError> {
        self.exec.run(inputs, None)
    }

    /// Run and time every kernel.
    pub fn run_profiled(&self, inputs: &HashMap<String, HostTensor>) -> Result<(Outputs, Vec<KernelTime>), CpuError> {
        let mut times = Vec::new();
        let out = self.exec.run_host(inputs, Some(&mut times))?;
        Ok((out, times))
    }
}

/// A one-thread rayon pool whose worker is the calling thread, made on the thread's first
/// one-thread run; None where rayon refuses (the thread is in another pool) or 256 threads
/// already have one. rayon cannot free such a pool (its registry is leaked, by design), so
/// the count is capped.
fn caller_pool() -> Option<&'static rayon::ThreadPool> {
    const MOST: usize = 256;
    static MADE: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    thread_local! {
        static OWN: std::cell::OnceCell<Option<&'static rayon::ThreadPool>> = const { std::cell::OnceCell::new() };
    }
    OWN.with(|own| {
        *own.get_or_init(|| {
            if rayon::current_thread_index().is_some()
                || MADE.fetch_add(1, std::sync::atomic::Ordering::Relaxed) >= MOST
            {
                return None;
            }
            let pool = rayon::ThreadPoolBuilder::new().num_threads(1).use_current_thread().build().ok()?;
            Some(&*Box::leak(Box::new(pool)))
        })
    })
}

/// The process's thread pool of `threads` workers, made on first use and shared by every
/// program with that thread count while one holds it. Programs run one after another (an
/// encoder then a decoder, the pipelines of an ablation) would otherwise each keep a pool,
/// and a pool's workers spin for a while after their last task: the next program's workers
/// would share the cores with them (measured: LayerNorm [8,128,768] at 2 threads ran in
/// 0.31 ms after another program's run against 0.25 ms after its own).
fn shared_pool(threads: usize) -> Result<Arc<rayon::ThreadPool>, CpuError> {
    static POOLS: std::sync::Mutex<BTreeMap<usize, std::sync::Weak<rayon::ThreadPool>>> =
        std::sync::Mutex::new(BTreeMap::new());
    let mut pools = POOLS.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some(pool) = pools.get(&threads).and_then(std::sync::Weak::upgrade) {
        return Ok(pool);
    }
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .map_err(|e| CpuError::Threads { threads, message: e.to_string() })?;
    let pool = Arc::new(pool);
    pools.insert(threads, Arc::downgrade(&pool));
    Ok(pool)
}

/// Compile the fused elementwise kernels whose shapes are static now rather than in the
/// first run (the others compile on first use, once per broadcast pattern). A body Cranelift
/// cannot compile is interpreted; that is not an error.
fn warm_jit(program: &Program) {
    let empty = BTreeMap::new();
    for kernel in &program.kernels {
        let Op::FusedElementwise { body } = &kernel.op else { continue };
        let shape = |b: usize| concrete(&program.buffers[b].ty.shape.0, &empty).ok();
        let shapes: Option<Vec<Vec<usize>>> = kernel.inputs.iter().map(|&b| shape(b)).collect();
        if let (Some(shapes), Some(out)) = (shapes, shape(kernel.output)) {
            let refs: Vec<&[usize]> = shapes.iter().map(|s| s.as_slice()).collect();
            let _ = jit::warm(body, &refs, &out);
        }
    }
}

fn storage_dtype(v: &Storage) -> rustral_ir::DType {
    match v {
        Storage::F32(..) => rustral_ir::DType::F32,
        Storage::Wide(t) => t.dtype,
        Storage::Bytes(..) => rustral_ir::DType::U8,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn programs_with_one_thread_count_share_a_pool() {
        let (a, b, c) = (shared_pool(3).unwrap(), shared_pool(3).unwrap(), shared_pool(2).unwrap());
        assert!(Arc::ptr_eq(&a, &b));
        assert!(!Arc::ptr_eq(&a, &c));
        assert_eq!((a.current_num_threads(), c.current_num_threads()), (3, 2));
        drop((a, b));
        // The last holder gone, the pool is gone; the next program makes a new one.
        assert_eq!(shared_pool(3).unwrap().current_num_threads(), 3);
    }

    fn backend(threads: usize) -> CpuBackend {
        CpuBackend { pool: shared_pool(threads).unwrap(), threads, elementwise: Elementwise::default() }
    }

    #[test]
    fn one_thread_runs_on_the_caller_and_more_on_the_pool() {
        // A fresh thread: the test harness's own thread may already have made its pool.
        std::thread::spawn(|| {
            let me = std::thread::current().id();
            let (one, two) = (backend(1), backend(2));
            // A program of more threads leaves the caller out of any pool.
            assert_eq!(two.install(rayon::current_num_threads), 2);
            assert_eq!(rayon::current_thread_index(), None);
            assert_eq!(one.install(|| std::thread::current().id()), me);
            // Kernels inside see a pool of one thread: their parallel loops stay on the caller.
            assert_eq!(one.install(rayon::current_num_threads), 1);
            let (id, n) = two.install(|| (std::thread::current().id(), rayon::current_num_threads()));
            assert!(id != me && n == 2);
            // Again on the same thread: the same pool, still the caller.
            assert_eq!(one.install(|| std::thread::current().id()), me);
        })
        .join()
        .unwrap();
    }

    #[test]
    fn a_thread_in_another_pool_hands_one_thread_runs_over() {
        let outer = rayon::ThreadPoolBuilder::new().num_threads(2).build().unwrap();
        let (caller, worker, n) = outer.install(|| {
            let caller = std::thread::current().id();
            let (worker, n) = backend(1).install(|| (std::thread::current().id(), rayon::current_num_threads()));
            (caller, worker, n)
        });
        assert!(caller != worker && n == 1);
    }
}
