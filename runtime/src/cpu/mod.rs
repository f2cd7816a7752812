//! The CPU target: runs a lowered `Program` with f32 kernels (GEMM from the `gemm` crate,
//! row-parallel norms and softmax, attention a query row at a time, fused elementwise bodies
//! a row at a time), work split over a rayon pool of the chosen size. Ops or dtypes without a
//! fast kernel run the reference implementation, so every program runs.
//!
//! Fused elementwise bodies are compiled to native vector loops by Cranelift (`jit`); the
//! row interpreter is kept as the baseline and for hosts Cranelift cannot target.

mod broadcast;
mod jit;
mod kernels;
mod simd;
mod storage;

use crate::reference::{EvalError, Place, concrete};
use crate::tensor::HostTensor;
use rustral_ir::Op;
use rustral_lowering::{BufferKind, Program};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};
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
}

/// Named outputs of a run, in order.
pub type Outputs = Vec<(String, HostTensor)>;

/// One kernel's time in a profiled run.
#[derive(Clone, Debug)]
pub struct KernelTime {
    /// Op name.
    pub op: String,
    /// Module path of the (possibly fused) node.
    pub provenance: String,
    /// Wall time.
    pub time: Duration,
    /// True when the kernel ran the reference fallback.
    pub fallback: bool,
}

/// How `FusedElementwise` kernels run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Elementwise {
    /// Compiled by Cranelift to f32x4 loops, once per body and broadcast pattern (the
    /// interpreter runs instead on a host Cranelift cannot target).
    #[default]
    Jit,
    /// Evaluated a row at a time by Rust loops: the baseline the JIT is measured against.
    Interpreted,
}

/// A program ready to run on the CPU.
pub struct CpuProgram {
    program: Program,
    pool: rayon::ThreadPool,
    threads: usize,
    /// Parameters, and everything computed from parameters and constants alone (weight
    /// transposes, say), evaluated once when parameters are bound.
    params: HashMap<usize, Storage>,
    /// Kernels whose results are in `params` and are skipped per run.
    precomputed: HashSet<usize>,
    elementwise: Elementwise,
}

impl CpuProgram {
    /// Prepare `program` to run on `threads` threads.
    pub fn new(program: Program, threads: usize) -> Result<CpuProgram, CpuError> {
        let threads = threads.max(1);
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .map_err(|e| CpuError::Threads { threads, message: e.to_string() })?;
        let elementwise = Elementwise::default();
        warm_jit(&program);
        Ok(CpuProgram { program, pool, threads, params: HashMap::new(), precomputed: HashSet::new(), elementwise })
    }

    /// Choose how fused elementwise kernels run (the JIT unless told otherwise).
    pub fn set_elementwise(&mut self, mode: Elementwise) {
        self.elementwise = mode;
    }

    /// How fused elementwise kernels run.
    pub fn elementwise(&self) -> Elementwise {
        self.elementwise
    }

    /// The program.
    pub fn program(&self) -> &Program {
        &self.program
    }

    /// Kernels launched per run: those that read only parameters and constants ran once when
    /// the parameters were bound.
    pub fn dispatches(&self) -> usize {
        self.program.kernels.len() - self.precomputed.len()
    }

    /// Threads used.
    pub fn threads(&self) -> usize {
        self.threads
    }

    /// Change bound f32 parameters in place (`f` gets each one's name and values; a training
    /// step's update), then recompute what depends on them. Returns false, changing nothing,
    /// when a parameter is not bound or not held as f32.
    pub fn update_params(&mut self, mut f: impl FnMut(&str, &mut [f32])) -> Result<bool, CpuError> {
        let params: Vec<(usize, String)> = self
            .program
            .buffers
            .iter()
            .enumerate()
            .filter_map(|(b, buf)| match &buf.kind {
                BufferKind::Param(name) => Some((b, name.clone())),
                _ => None,
            })
            .collect();
        if !params.iter().all(|(b, _)| matches!(self.params.get(b), Some(Storage::F32(..)))) {
            return Ok(false);
        }
        for (b, name) in &params {
            if let Some(Storage::F32(values, _)) = self.params.get_mut(b) {
                let values: &mut Vec<f32> = Arc::make_mut(values);
                f(name, values);
            }
        }
        self.precompute()?;
        Ok(true)
    }

    /// Bind parameter values once; each must match its declared (static) type.
    pub fn bind_params(&mut self, params: &HashMap<String, HostTensor>) -> Result<(), CpuError> {
        for (b, buf) in self.program.buffers.iter().enumerate() {
            if let BufferKind::Param(name) = &buf.kind {
                let value =
                    params.get(name).ok_or_else(|| EvalError::MissingFeed { kind: "param", name: name.clone() })?;
                crate::feeds::check(name, &buf.ty, value.dtype, value.shape(), &mut BTreeMap::new())?;
                self.params.insert(b, Storage::from_host_ref(value));
            }
        }
        self.precompute()
    }

    /// Evaluate constants of static shape and the kernels that depend only on parameters and
    /// such constants, once; runs then skip them.
    fn precompute(&mut self) -> Result<(), CpuError> {
        self.precomputed.clear();
        let empty = BTreeMap::new();
        let static_shape = |ty: &rustral_ir::TensorType| concrete(&ty.shape.0, &empty).ok();
        for (b, buf) in self.program.buffers.iter().enumerate() {
            // Constants do not change when parameters are bound again.
            if self.params.contains_key(&b) {
                continue;
            }
            if let (BufferKind::Constant(op), Some(shape)) = (&buf.kind, static_shape(&buf.ty)) {
                let t = crate::reference::eval_source(op, buf.ty.dtype, &shape)
                    .map_err(|message| EvalError::Runtime { place: self.source_place(b), message })?;
                self.params.insert(b, Storage::from_host(t));
            }
        }
        for (k, kernel) in self.program.kernels.iter().enumerate() {
            let out_ty = &self.program.buffers[kernel.output].ty;
            let ready = kernel.inputs.iter().all(|i| self.params.contains_key(i));
            if let (true, Some(shape)) = (ready, static_shape(out_ty)) {
                let args: Vec<&Storage> = kernel.inputs.iter().map(|i| &self.params[i]).collect();
                let (result, _) = self.pool.install(|| self.exec(k, &args, &shape))?;
                self.params.insert(kernel.output, result);
                self.precomputed.insert(k);
            }
        }
        Ok(())
    }

    fn source_place(&self, b: usize) -> Place {
        let buf = &self.program.buffers[b];
        let op = match &buf.kind {
            BufferKind::Constant(op) => op.name().to_string(),
            _ => "buffer".to_string(),
        };
        Place { node: b, op, provenance: buf.provenance.clone() }
    }

    fn place(&self, k: usize) -> Place {
        let kernel = &self.program.kernels[k];
        Place { node: kernel.output, op: kernel.name.clone(), provenance: kernel.provenance.clone() }
    }

    /// Run kernel `k` on `args` into a value of `shape`: the f32 kernel when there is one,
    /// else the reference implementation. Returns whether the fallback ran.
    fn exec(&self, k: usize, args: &[&Storage], shape: &[usize]) -> Result<(Storage, bool), CpuError> {
        let kernel = &self.program.kernels[k];
        let dtype = self.program.buffers[kernel.output].ty.dtype;
        if let (Op::Reshape { .. }, Some(reshaped)) = (&kernel.op, args[0].reshaped(shape)) {
            return Ok((reshaped, false));
        }
        let (result, fallback) =
            match kernels::try_f32(&kernel.op, args, dtype, shape, self.elementwise == Elementwise::Jit) {
                Some(v) if v.len() != shape.iter().product::<usize>() => {
                    let message = format!("internal error: f32 kernel produced {} values for shape {shape:?}", v.len());
                    return Err(EvalError::Runtime { place: self.place(k), message }.into());
                }
                Some(v) => (Storage::f32_values(v, shape.to_vec()), false),
                None => {
                    let hosts: Vec<HostTensor> = args.iter().map(|s| s.to_host()).collect();
                    let refs: Vec<&HostTensor> = hosts.iter().collect();
                    let t = crate::reference::eval_op(&kernel.op, &refs, dtype, shape)
                        .map_err(|message| EvalError::Runtime { place: self.place(k), message })?;
                    (Storage::from_host(t), true)
                }
            };
        if result.shape() != shape {
            let message = format!("internal error: kernel produced {:?}, expected {:?}", result.shape(), shape);
            return Err(EvalError::Runtime { place: self.place(k), message }.into());
        }
        Ok((result, fallback))
    }

    /// Run on named inputs; returns the outputs in order.
    pub fn run(&self, inputs: &HashMap<String, HostTensor>) -> Result<Vec<(String, HostTensor)>, CpuError> {
        let inputs: HashMap<String, Storage> =
            inputs.iter().map(|(n, t)| (n.clone(), Storage::from_host(t.clone()))).collect();
        let out = self.run_inner(&inputs, None)?;
        Ok(out.into_iter().map(|(n, s)| (n, s.to_host())).collect())
    }

    /// Run on inputs already in CPU storage (no conversion on the way in or out): what
    /// benchmarks and repeated inference use.
    pub fn run_storage(&self, inputs: &HashMap<String, Storage>) -> Result<Vec<(String, Storage)>, CpuError> {
        self.run_inner(inputs, None)
    }

    /// Run and time every kernel.
    pub fn run_profiled(&self, inputs: &HashMap<String, HostTensor>) -> Result<(Outputs, Vec<KernelTime>), CpuError> {
        let mut times = Vec::new();
        let inputs: HashMap<String, Storage> =
            inputs.iter().map(|(n, t)| (n.clone(), Storage::from_host(t.clone()))).collect();
        let out = self.run_inner(&inputs, Some(&mut times))?;
        Ok((out.into_iter().map(|(n, s)| (n, s.to_host())).collect(), times))
    }

    fn run_inner(
        &self,
        inputs: &HashMap<String, Storage>,
        mut times: Option<&mut Vec<KernelTime>>,
    ) -> Result<Vec<(String, Storage)>, CpuError> {
        let p = &self.program;
        let binding = crate::feeds::bind_program(
            p,
            inputs.keys(),
            |name, _| inputs.get(name).map(|v| (storage_dtype(v), v.shape())),
            |b| self.params.get(&b).map(Storage::shape),
        )?;
        let mut values: Vec<Option<Storage>> = vec![None; p.buffers.len()];
        let fed: HashMap<usize, &Storage> = p
            .buffers
            .iter()
            .enumerate()
            .filter_map(|(b, buf)| match &buf.kind {
                BufferKind::Input(name) => inputs.get(name).map(|v| (b, v)),
                _ => None,
            })
            .collect();
        let place = |k: usize| self.place(k);
        for (b, buf) in p.buffers.iter().enumerate() {
            if self.params.contains_key(&b) {
                continue;
            }
            if let BufferKind::Constant(op) = &buf.kind {
                let shape = concrete(&buf.ty.shape.0, &binding)
                    .map_err(|sym| EvalError::UnboundSymbol { place: self.source_place(b), sym })?;
                let t = crate::reference::eval_source(op, buf.ty.dtype, &shape)
                    .map_err(|message| EvalError::Runtime { place: self.source_place(b), message })?;
                values[b] = Some(Storage::from_host(t));
            }
        }
        self.pool.install(|| -> Result<(), CpuError> {
            for (k, kernel) in p.kernels.iter().enumerate() {
                if self.precomputed.contains(&k) {
                    continue;
                }
                let start = Instant::now();
                let out_ty = &p.buffers[kernel.output].ty;
                let shape = concrete(&out_ty.shape.0, &binding)
                    .map_err(|sym| EvalError::UnboundSymbol { place: place(k), sym })?;
                let args: Vec<&Storage> = kernel
                    .inputs
                    .iter()
                    .map(|&i| {
                        values[i]
                            .as_ref()
                            .or_else(|| self.params.get(&i))
                            .or_else(|| fed.get(&i).copied())
                            .expect("inputs computed before use")
                    })
                    .collect();
                let (result, fallback) = self.exec(k, &args, &shape)?;
                values[kernel.output] = Some(result);
                for &dead in &p.plan.frees_after[k] {
                    values[dead] = None;
                }
                if let Some(t) = times.as_deref_mut() {
                    t.push(KernelTime {
                        op: kernel.name.clone(),
                        provenance: kernel.provenance.clone(),
                        time: start.elapsed(),
                        fallback,
                    });
                }
            }
            Ok(())
        })?;
        Ok(p.outputs
            .iter()
            .map(|(name, b)| {
                let v = values[*b].as_ref().or_else(|| self.params.get(b)).or_else(|| fed.get(b).copied());
                (name.clone(), v.expect("outputs stay live").clone())
            })
            .collect())
    }
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
    }
}
