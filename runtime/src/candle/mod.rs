//! The Candle target: a lowered `Program` run as candle-core tensor calls on a
//! `candle_core::Device` (the CPU always; CUDA and Metal with the `cuda` and `metal` features).
//! Parameters are uploaded once and stay on the device, with the kernels that read only
//! parameters and constants (weight transposes) evaluated when they are bound; symbolic dims
//! are bound per run from the inputs. `ops.rs` maps each op; `report` says which ops used
//! candle's fused kernels, which were decomposed and which ran on the host.

mod ops;

use crate::exec::{Backend, Executor, KernelTime, Outputs};
use crate::reference::{EvalError, Place};
use crate::tensor::HostTensor;
pub use candle_core::{Device, Tensor};
pub use ops::Lowering;
use rustral_ir::{DType, Op};
use rustral_lowering::{BufferKind, Kernel, Program};
use std::collections::{BTreeMap, HashMap};
use thiserror::Error;

/// Why the Candle target failed.
#[derive(Debug, Error)]
pub enum CandleError {
    /// A feed or evaluation error (as the reference reports them).
    #[error(transparent)]
    Eval(#[from] EvalError),
    /// Candle refused an operation.
    #[error("candle failed at {place}: {message}")]
    Candle {
        /// The kernel.
        place: Place,
        /// Candle's message.
        message: String,
    },
}

/// The Candle target's side of the executor: values are candle tensors on one device.
pub struct CandleBackend {
    device: Device,
    /// Bound `u8` parameters (quantized blocks), by tensor id.
    quantized_params: std::sync::Mutex<std::collections::HashSet<candle_core::TensorId>>,
    /// candle's quantized matrices made from those parameters, by tensor id: `QMatMul` wants
    /// its own copy of the blocks, and a bound weight's is made once, not at every call.
    qmatmuls: std::sync::Mutex<HashMap<candle_core::TensorId, std::sync::Arc<candle_core::quantized::QMatMul>>>,
}

impl CandleBackend {
    fn new(device: Device) -> CandleBackend {
        CandleBackend { device, quantized_params: Default::default(), qmatmuls: Default::default() }
    }

    /// `x @ dequantize(w)^T` with a bound weight's `QMatMul`, made at its first use.
    fn cached_quant_matmul(
        &self,
        format: rustral_ir::QuantFormat,
        x: &Tensor,
        w: &Tensor,
    ) -> candle_core::Result<Option<Tensor>> {
        if !self.quantized_params.lock().expect("no bind panicked").contains(&w.id()) {
            return Ok(None);
        }
        let cached = self.qmatmuls.lock().expect("no run panicked holding the cache").get(&w.id()).cloned();
        let q = match cached {
            Some(q) => q,
            None => {
                let q = std::sync::Arc::new(ops::qmatmul(format, w, &self.device)?);
                self.qmatmuls.lock().expect("no run panicked holding the cache").insert(w.id(), q.clone());
                q
            }
        };
        Ok(Some(candle_core::Module::forward(&*q, &x.contiguous()?)?))
    }
}

impl Backend for CandleBackend {
    type Value = Tensor;
    type Error = CandleError;

    fn upload(&self, t: HostTensor, place: &Place) -> Result<Tensor, CandleError> {
        upload(&self.device, &t).map_err(|message| CandleError::Candle { place: place.clone(), message })
    }

    /// Parameters: as `upload`, remembering which hold quantized blocks.
    fn upload_ref(&self, t: &HostTensor, place: &Place) -> Result<Tensor, CandleError> {
        let v = upload(&self.device, t).map_err(|message| CandleError::Candle { place: place.clone(), message })?;
        if t.dtype == DType::U8 {
            self.quantized_params.lock().expect("no bind panicked").insert(v.id());
        }
        Ok(v)
    }

    fn forget_params(&self) {
        self.quantized_params.lock().expect("no bind panicked").clear();
        self.qmatmuls.lock().expect("no run panicked holding the cache").clear();
    }

    fn download(&self, v: &Tensor, dtype: DType, place: &Place) -> Result<HostTensor, CandleError> {
        download(v, dtype).map_err(|message| CandleError::Candle { place: place.clone(), message })
    }

    fn shape(v: &Tensor) -> &[usize] {
        v.dims()
    }

    fn dtype(v: &Tensor, declared: DType) -> DType {
        match ops::ir_dtype(v.dtype()) {
            // u8 holds both bools and quantized blocks.
            Some(DType::Bool) if declared == DType::U8 => DType::U8,
            d => d.unwrap_or(declared),
        }
    }

    /// The op in candle, or None for the host. Candle refuses some edge cases the IR defines
    /// (reductions over empty tensors, say): those, and ops candle cannot express, run on the
    /// host. Half-precision ops compute in f32 and round once at the end, as the IR defines
    /// them (candle would round every step in f16/bf16).
    fn run_kernel(
        &self,
        kernel: &Kernel,
        args: &[&Tensor],
        dtype: DType,
        shape: &[usize],
        _: &Place,
    ) -> Result<Option<Tensor>, CandleError> {
        if shape.contains(&0) {
            return Ok(None);
        }
        let op = &kernel.op;
        if let Op::QuantMatMul { format } = op
            && let Ok(Some(t)) = self.cached_quant_matmul(*format, args[0], args[1])
        {
            return Ok(Some(t));
        }
        let half = |d: candle_core::DType| matches!(d, candle_core::DType::F16 | candle_core::DType::BF16);
        let is_cast = matches!(op, Op::Cast { .. });
        if !is_cast && (matches!(dtype, DType::F16 | DType::BF16) || args.iter().any(|a| half(a.dtype()))) {
            let Ok(wide) = args
                .iter()
                .map(|a| if half(a.dtype()) { a.to_dtype(candle_core::DType::F32) } else { Ok((*a).clone()) })
                .collect::<candle_core::Result<Vec<Tensor>>>()
            else {
                return Ok(None);
            };
            let refs: Vec<&Tensor> = wide.iter().collect();
            let wide_dtype = if matches!(dtype, DType::F16 | DType::BF16) { DType::F32 } else { dtype };
            let t = ops::run(op, &refs, wide_dtype, shape, &self.device).ok().flatten();
            return Ok(t.and_then(|t| t.to_dtype(ops::candle_dtype(dtype)).ok()));
        }
        Ok(ops::run(op, args, dtype, shape, &self.device).ok().flatten())
    }

    /// Weight transposes and other values precomputed from parameters are stored contiguous:
    /// a permuted view would be copied by every matmul that reads it (for GPT-2's output
    /// head, 154 MB per decode step).
    fn settle(&self, v: Tensor, place: &Place) -> Result<Tensor, CandleError> {
        v.contiguous().map_err(|e| CandleError::Candle { place: place.clone(), message: e.to_string() })
    }

    /// `Tensor::slice_set` into the target's own storage when the executor owns it (a copy
    /// first otherwise).
    fn update_slice(
        &self,
        target: Tensor,
        exclusive: bool,
        update: &Tensor,
        axis: usize,
        start: usize,
        place: &Place,
    ) -> Result<Tensor, CandleError> {
        let err = |e: candle_core::Error| CandleError::Candle { place: place.clone(), message: e.to_string() };
        // `contiguous` of a strided view makes new storage; of a contiguous tensor it shares.
        let target = match (exclusive, target.is_contiguous()) {
            (true, true) => target,
            (false, true) => target.copy().map_err(err)?,
            (_, false) => target.contiguous().map_err(err)?,
        };
        let update = update.contiguous().map_err(err)?.to_dtype(target.dtype()).map_err(err)?;
        target.slice_set(&update, axis, start).map_err(err)?;
        Ok(target)
    }
}

/// A program ready to run on a candle device.
pub struct CandleProgram {
    exec: Executor<CandleBackend>,
}

impl CandleProgram {
    /// Prepare `program` for `device`.
    pub fn new(program: Program, device: Device) -> CandleProgram {
        CandleProgram { exec: Executor::new(program, CandleBackend::new(device)) }
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

    /// Kernels launched per run (those reading only parameters ran at bind time).
    pub fn dispatches(&self) -> usize {
        self.exec.dispatches()
    }

    /// Op counts by how they lower: candle's own kernels, decompositions, host fallbacks
    /// (constants, iotas and random streams are made on the host and uploaded).
    pub fn report(&self) -> BTreeMap<&'static str, BTreeMap<String, usize>> {
        let mut r: BTreeMap<&'static str, BTreeMap<String, usize>> = BTreeMap::new();
        let program = self.exec.program();
        for k in &program.kernels {
            let how = match ops::lowering(&k.op, k.inputs.len()) {
                Lowering::Native => "native",
                Lowering::Decomposed => "decomposed",
                Lowering::Host => "host",
            };
            *r.entry(how).or_default().entry(k.name.clone()).or_default() += 1;
        }
        for b in &program.buffers {
            if let BufferKind::Constant(op) = &b.kind {
                *r.entry("host").or_default().entry(op.name().to_string()).or_default() += 1;
            }
        }
        r
    }

    /// A host tensor on the target, to hold as run state (a KV cache).
    pub fn upload(&self, t: HostTensor) -> Result<Tensor, CandleError> {
        let place = Place { node: 0, op: "state".into(), provenance: String::new() };
        self.exec.backend().upload(t, &place)
    }

    /// One stateful step (see `Executor::run_carry`): `state` stays on the target.
    pub fn run_carry(
        &self,
        inputs: &HashMap<String, HostTensor>,
        state: &mut HashMap<String, Tensor>,
        carry: &[(String, String)],
        read: &[&str],
    ) -> Result<Vec<(String, HostTensor)>, CandleError> {
        self.exec.run_carry(inputs, state, carry, read)
    }

    /// Upload parameter values once; each must match its declared (static) type.
    pub fn bind_params(&mut self, params: &HashMap<String, HostTensor>) -> Result<(), CandleError> {
        self.exec.bind_params(params)
    }

    /// Run on named inputs; returns the outputs in order, on the host.
    pub fn run(&self, inputs: &HashMap<String, HostTensor>) -> Result<Vec<(String, HostTensor)>, CandleError> {
        self.exec.run_host(inputs, None)
    }

    /// Run and time every kernel (each time includes the host round trip of a fallback).
    pub fn run_profiled(
        &self,
        inputs: &HashMap<String, HostTensor>,
    ) -> Result<(Outputs, Vec<KernelTime>), CandleError> {
        let mut times = Vec::new();
        let out = self.exec.run_host(inputs, Some(&mut times))?;
        Ok((out, times))
    }

    /// The inputs on the device, ready for `run_device` (what repeated runs and benchmarks
    /// upload once).
    pub fn upload_inputs(&self, inputs: &HashMap<String, HostTensor>) -> Result<HashMap<String, Tensor>, CandleError> {
        self.exec.upload_inputs(inputs)
    }

    /// Run on inputs already on the device; outputs stay on the device.
    pub fn run_device(&self, inputs: &HashMap<String, Tensor>) -> Result<Vec<(String, Tensor)>, CandleError> {
        self.exec.run(inputs, None)
    }
}

/// A host tensor on `device` in its dtype.
fn upload(device: &Device, t: &HostTensor) -> Result<Tensor, String> {
    let first_line = |e: candle_core::Error| e.to_string().lines().next().unwrap_or_default().to_string();
    let shape = t.shape().to_vec();
    let r = match t.dtype {
        DType::I32 | DType::I64 => {
            Tensor::from_vec(t.data.iter().map(|&v| v as i64).collect::<Vec<i64>>(), shape, device)
        }
        DType::Bool => Tensor::from_vec(t.data.iter().map(|&v| u8::from(v != 0.0)).collect::<Vec<u8>>(), shape, device),
        DType::F64 => Tensor::from_vec(t.data.iter().copied().collect::<Vec<f64>>(), shape, device),
        _ => Tensor::from_vec(t.data.iter().map(|&v| v as f32).collect::<Vec<f32>>(), shape, device),
    };
    r.and_then(|x| x.to_dtype(ops::candle_dtype(t.dtype))).map_err(first_line)
}

/// A device tensor on the host as the reference holds it (values rounded to `dtype`).
fn download(t: &Tensor, dtype: DType) -> Result<HostTensor, String> {
    let values: Vec<f64> = t
        .to_dtype(candle_core::DType::F64)
        .and_then(|x| x.flatten_all()?.to_vec1::<f64>())
        .map_err(|e| e.to_string().lines().next().unwrap_or_default().to_string())?;
    let values = values.into_iter().map(|v| crate::tensor::round_to(dtype, v)).collect();
    HostTensor::new(dtype, t.dims(), values).map_err(|e| e.to_string())
}
