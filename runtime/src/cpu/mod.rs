//! The CPU target: runs a lowered `Program` with f32 kernels (GEMM from `matrixmultiply`,
//! row-parallel norms and softmax, attention a query row at a time, fused elementwise bodies
//! a row at a time), work split over a rayon pool of the chosen size. Ops or dtypes without a
//! fast kernel run the reference implementation, so every program runs.
//!
//! Not yet here (see the CPU target issue): Cranelift-compiled elementwise kernels, explicit
//! SIMD, reuse of freed storage across kernels (the plan frees values at their last use).

mod broadcast;
mod kernels;
mod storage;

use crate::reference::{EvalError, Place, concrete};
use crate::tensor::HostTensor;
use rustral_ir::{Dim, Op};
use rustral_lowering::{BufferKind, Program};
use std::collections::{BTreeMap, HashMap};
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

/// A program ready to run on the CPU.
pub struct CpuProgram {
    program: Program,
    pool: rayon::ThreadPool,
    threads: usize,
    params: HashMap<usize, Storage>,
}

impl CpuProgram {
    /// Prepare `program` to run on `threads` threads.
    pub fn new(program: Program, threads: usize) -> Result<CpuProgram, CpuError> {
        let threads = threads.max(1);
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .map_err(|e| CpuError::Threads { threads, message: e.to_string() })?;
        Ok(CpuProgram { program, pool, threads, params: HashMap::new() })
    }

    /// The program.
    pub fn program(&self) -> &Program {
        &self.program
    }

    /// Threads used.
    pub fn threads(&self) -> usize {
        self.threads
    }

    /// Bind parameter values once; each must match its declared (static) type.
    pub fn bind_params(&mut self, params: &HashMap<String, HostTensor>) -> Result<(), CpuError> {
        for (b, buf) in self.program.buffers.iter().enumerate() {
            if let BufferKind::Param(name) = &buf.kind {
                let value =
                    params.get(name).ok_or_else(|| EvalError::MissingFeed { kind: "param", name: name.clone() })?;
                check_type(name, &buf.ty, value, &mut BTreeMap::new())?;
                self.params.insert(b, Storage::from_host(value.clone()));
            }
        }
        Ok(())
    }

    /// Run on named inputs; returns the outputs in order.
    pub fn run(&self, inputs: &HashMap<String, HostTensor>) -> Result<Vec<(String, HostTensor)>, CpuError> {
        self.run_inner(inputs, None)
    }

    /// Run and time every kernel.
    pub fn run_profiled(&self, inputs: &HashMap<String, HostTensor>) -> Result<(Outputs, Vec<KernelTime>), CpuError> {
        let mut times = Vec::new();
        let out = self.run_inner(inputs, Some(&mut times))?;
        Ok((out, times))
    }

    fn run_inner(
        &self,
        inputs: &HashMap<String, HostTensor>,
        mut times: Option<&mut Vec<KernelTime>>,
    ) -> Result<Vec<(String, HostTensor)>, CpuError> {
        let p = &self.program;
        let mut binding = BTreeMap::new();
        let mut values: Vec<Option<Storage>> = vec![None; p.buffers.len()];
        for (b, buf) in p.buffers.iter().enumerate() {
            match &buf.kind {
                BufferKind::Input(name) => {
                    let v =
                        inputs.get(name).ok_or_else(|| EvalError::MissingFeed { kind: "input", name: name.clone() })?;
                    check_type(name, &buf.ty, v, &mut binding)?;
                    values[b] = Some(Storage::from_host(v.clone()));
                }
                BufferKind::Param(name) => {
                    let v = self
                        .params
                        .get(&b)
                        .ok_or_else(|| EvalError::MissingFeed { kind: "param", name: name.clone() })?;
                    bind_dims(name, &buf.ty.shape.0, v.shape(), &mut binding)?;
                }
                _ => {}
            }
        }
        for name in inputs.keys() {
            if !p.buffers.iter().any(|b| b.kind == BufferKind::Input(name.clone())) {
                let known: Vec<String> = p
                    .buffers
                    .iter()
                    .filter_map(|b| match &b.kind {
                        BufferKind::Input(n) => Some(n.clone()),
                        _ => None,
                    })
                    .collect();
                return Err(EvalError::UnknownFeed { name: name.clone(), known: known.join(", ") }.into());
            }
        }
        let place = |k: usize| {
            let kernel = &p.kernels[k];
            Place { node: kernel.output, op: kernel.name.clone(), provenance: kernel.provenance.clone() }
        };
        for (b, buf) in p.buffers.iter().enumerate() {
            if let BufferKind::Constant(op) = &buf.kind {
                let shape = concrete(&buf.ty.shape.0, &binding).map_err(|sym| EvalError::UnboundSymbol {
                    place: Place { node: b, op: op.name().into(), provenance: buf.provenance.clone() },
                    sym,
                })?;
                let t =
                    crate::reference::eval_source(op, buf.ty.dtype, &shape).map_err(|message| EvalError::Runtime {
                        place: Place { node: b, op: op.name().into(), provenance: buf.provenance.clone() },
                        message,
                    })?;
                values[b] = Some(Storage::from_host(t));
            }
        }
        self.pool.install(|| -> Result<(), CpuError> {
            for (k, kernel) in p.kernels.iter().enumerate() {
                let start = Instant::now();
                let out_ty = &p.buffers[kernel.output].ty;
                let shape = concrete(&out_ty.shape.0, &binding)
                    .map_err(|sym| EvalError::UnboundSymbol { place: place(k), sym })?;
                let args: Vec<&Storage> = kernel
                    .inputs
                    .iter()
                    .map(|&i| values[i].as_ref().or_else(|| self.params.get(&i)).expect("inputs computed before use"))
                    .collect();
                let (result, fallback) = match kernels::try_f32(&kernel.op, &args, out_ty.dtype, &shape) {
                    Some(v) => (Storage::F32(v, shape.clone()), false),
                    None => {
                        let hosts: Vec<HostTensor> = args.iter().map(|s| s.to_host()).collect();
                        let refs: Vec<&HostTensor> = hosts.iter().collect();
                        let t = crate::reference::eval_op(&kernel.op, &refs, out_ty.dtype, &shape)
                            .map_err(|message| EvalError::Runtime { place: place(k), message })?;
                        (Storage::from_host(t), true)
                    }
                };
                if result.shape() != shape.as_slice() {
                    let message = format!("internal error: kernel produced {:?}, expected {:?}", result.shape(), shape);
                    return Err(EvalError::Runtime { place: place(k), message }.into());
                }
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
                (name.clone(), values[*b].as_ref().or_else(|| self.params.get(b)).expect("outputs stay live").to_host())
            })
            .collect())
    }
}

fn check_type(
    name: &str,
    ty: &rustral_ir::TensorType,
    v: &HostTensor,
    binding: &mut BTreeMap<String, usize>,
) -> Result<(), EvalError> {
    if v.dtype != ty.dtype || v.shape().len() != ty.rank() {
        return Err(EvalError::FeedMismatch {
            name: name.into(),
            expected: ty.to_string(),
            found: format!("{}{:?}", v.dtype, v.shape()),
        });
    }
    bind_dims(name, &ty.shape.0, v.shape(), binding).map_err(|e| match e {
        EvalError::FeedMismatch { .. } => EvalError::FeedMismatch {
            name: name.into(),
            expected: ty.to_string(),
            found: format!("{}{:?}", v.dtype, v.shape()),
        },
        other => other,
    })
}

fn bind_dims(
    name: &str,
    dims: &[Dim],
    shape: &[usize],
    binding: &mut BTreeMap<String, usize>,
) -> Result<(), EvalError> {
    for (d, &n) in dims.iter().zip(shape) {
        match d {
            Dim::Static(s) if *s != n => {
                return Err(EvalError::FeedMismatch {
                    name: name.into(),
                    expected: format!("{dims:?}"),
                    found: format!("{shape:?}"),
                });
            }
            Dim::Sym(sym) => {
                if let Some(&first) = binding.get(sym) {
                    if first != n {
                        return Err(EvalError::SymbolConflict {
                            sym: sym.clone(),
                            first,
                            second: n,
                            name: name.into(),
                        });
                    }
                } else {
                    binding.insert(sym.clone(), n);
                }
            }
            Dim::Static(_) => {}
        }
    }
    Ok(())
}

/// Is this op one the f32 path may run? (Used by reports.)
pub fn has_fast_kernel(op: &Op) -> bool {
    matches!(
        op,
        Op::Unary(_)
            | Op::Binary(_)
            | Op::Where
            | Op::FusedElementwise { .. }
            | Op::MatMul
            | Op::MatMulEpilogue { .. }
            | Op::LayerNorm { .. }
            | Op::RmsNorm { .. }
            | Op::Softmax { .. }
            | Op::Reduce { .. }
            | Op::Attention { .. }
            | Op::Gather { .. }
            | Op::Reshape { .. }
            | Op::BroadcastTo { .. }
            | Op::Permute { .. }
    )
}
