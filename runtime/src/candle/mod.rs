//! The Candle target: a lowered `Program` run as candle-core tensor calls on a
//! `candle_core::Device` (the CPU always; CUDA and Metal with the `cuda` and `metal` features).
//! Parameters are uploaded once and stay on the device, with the kernels that read only
//! parameters and constants (weight transposes) evaluated when they are bound; symbolic dims
//! are bound per run from the inputs. `ops.rs` maps each op; `report` says which ops used
//! candle's fused kernels, which were decomposed and which ran on the host.

mod ops;

use crate::reference::{EvalError, Place, concrete};
use crate::tensor::HostTensor;
pub use candle_core::Device;
use candle_core::Tensor;
pub use ops::Lowering;
use rustral_ir::{DType, Op};
use rustral_lowering::{BufferKind, Program};
use std::collections::{BTreeMap, HashMap, HashSet};
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

/// A program ready to run on a candle device.
pub struct CandleProgram {
    program: Program,
    device: Device,
    /// Parameters and what is computed from them alone, on the device.
    params: HashMap<usize, Tensor>,
    precomputed: HashSet<usize>,
}

impl CandleProgram {
    /// Prepare `program` for `device`.
    pub fn new(program: Program, device: Device) -> CandleProgram {
        CandleProgram { program, device, params: HashMap::new(), precomputed: HashSet::new() }
    }

    /// The program.
    pub fn program(&self) -> &Program {
        &self.program
    }

    /// Kernels launched per run (those reading only parameters ran at bind time).
    pub fn dispatches(&self) -> usize {
        self.program.kernels.len() - self.precomputed.len()
    }

    /// Op counts by how they lower: candle's own kernels, decompositions, host fallbacks
    /// (constants, iotas and random streams are made on the host and uploaded).
    pub fn report(&self) -> BTreeMap<&'static str, BTreeMap<String, usize>> {
        let mut r: BTreeMap<&'static str, BTreeMap<String, usize>> = BTreeMap::new();
        for k in &self.program.kernels {
            let how = match ops::lowering(&k.op, k.inputs.len()) {
                Lowering::Native => "native",
                Lowering::Decomposed => "decomposed",
                Lowering::Host => "host",
            };
            *r.entry(how).or_default().entry(k.name.clone()).or_default() += 1;
        }
        for b in &self.program.buffers {
            if let BufferKind::Constant(op) = &b.kind {
                *r.entry("host").or_default().entry(op.name().to_string()).or_default() += 1;
            }
        }
        r
    }

    /// Upload parameter values once; each must match its declared (static) type.
    pub fn bind_params(&mut self, params: &HashMap<String, HostTensor>) -> Result<(), CandleError> {
        self.params.clear();
        for (b, buf) in self.program.buffers.iter().enumerate() {
            if let BufferKind::Param(name) = &buf.kind {
                let value =
                    params.get(name).ok_or_else(|| EvalError::MissingFeed { kind: "param", name: name.clone() })?;
                crate::feeds::check(name, &buf.ty, value.dtype, value.shape(), &mut BTreeMap::new())?;
                let t = self.upload(value).map_err(|message| self.fail_buffer(b, message))?;
                self.params.insert(b, t);
            }
        }
        self.precompute()
    }

    fn precompute(&mut self) -> Result<(), CandleError> {
        self.precomputed.clear();
        let empty = BTreeMap::new();
        for (b, buf) in self.program.buffers.iter().enumerate() {
            if let (BufferKind::Constant(op), Ok(shape)) = (&buf.kind, concrete(&buf.ty.shape.0, &empty)) {
                let t = crate::reference::eval_source(op, buf.ty.dtype, &shape)
                    .map_err(|message| EvalError::Runtime { place: self.buffer_place(b), message })?;
                let t = self.upload(&t).map_err(|message| self.fail_buffer(b, message))?;
                self.params.insert(b, t);
            }
        }
        for k in 0..self.program.kernels.len() {
            let kernel = &self.program.kernels[k];
            let ready = kernel.inputs.iter().all(|i| self.params.contains_key(i));
            if let (true, Ok(shape)) = (ready, concrete(&self.program.buffers[kernel.output].ty.shape.0, &empty)) {
                let args: Vec<&Tensor> = kernel.inputs.iter().map(|i| &self.params[i]).collect();
                let t = self.exec(k, &args, &shape)?;
                self.params.insert(kernel.output, t);
                self.precomputed.insert(k);
            }
        }
        Ok(())
    }

    /// Run on named inputs; returns the outputs in order, on the host.
    pub fn run(&self, inputs: &HashMap<String, HostTensor>) -> Result<Vec<(String, HostTensor)>, CandleError> {
        let device = self.upload_inputs(inputs)?;
        let out = self.run_device(&device)?;
        out.into_iter()
            .map(|(name, t)| {
                let b = self.program.outputs.iter().find(|(n, _)| *n == name).map(|(_, b)| *b).expect("an output");
                let host =
                    download(&t, self.program.buffers[b].ty.dtype).map_err(|message| self.fail_buffer(b, message))?;
                Ok((name, host))
            })
            .collect()
    }

    /// The inputs on the device, ready for `run_device` (what repeated runs and benchmarks
    /// upload once).
    pub fn upload_inputs(&self, inputs: &HashMap<String, HostTensor>) -> Result<HashMap<String, Tensor>, CandleError> {
        let mut out = HashMap::new();
        for (name, v) in inputs {
            let b = self.program.buffers.iter().position(|b| b.kind == BufferKind::Input(name.clone()));
            let t = self.upload(v).map_err(|message| match b {
                Some(b) => self.fail_buffer(b, message),
                None => CandleError::Candle {
                    place: Place { node: 0, op: "input".into(), provenance: name.clone() },
                    message,
                },
            })?;
            out.insert(name.clone(), t);
        }
        Ok(out)
    }

    /// Run on inputs already on the device; outputs stay on the device.
    pub fn run_device(&self, inputs: &HashMap<String, Tensor>) -> Result<Vec<(String, Tensor)>, CandleError> {
        let p = &self.program;
        let binding = crate::feeds::bind_program(
            p,
            inputs.keys(),
            |name, declared| inputs.get(name).map(|v| (ops::ir_dtype(v.dtype()).unwrap_or(declared), v.dims())),
            |b| self.params.get(&b).map(Tensor::dims),
        )?;
        let mut values: Vec<Option<Tensor>> = vec![None; p.buffers.len()];
        for (b, buf) in p.buffers.iter().enumerate() {
            if let BufferKind::Input(name) = &buf.kind {
                values[b] = inputs.get(name).cloned();
            }
        }
        for (b, buf) in p.buffers.iter().enumerate() {
            if let (BufferKind::Constant(op), false) = (&buf.kind, self.params.contains_key(&b)) {
                let shape = concrete(&buf.ty.shape.0, &binding)
                    .map_err(|sym| EvalError::UnboundSymbol { place: self.buffer_place(b), sym })?;
                let t = crate::reference::eval_source(op, buf.ty.dtype, &shape)
                    .map_err(|message| EvalError::Runtime { place: self.buffer_place(b), message })?;
                values[b] = Some(self.upload(&t).map_err(|message| self.fail_buffer(b, message))?);
            }
        }
        for (k, kernel) in p.kernels.iter().enumerate() {
            if self.precomputed.contains(&k) {
                continue;
            }
            let shape = concrete(&p.buffers[kernel.output].ty.shape.0, &binding)
                .map_err(|sym| EvalError::UnboundSymbol { place: self.place(k), sym })?;
            let args: Vec<&Tensor> = kernel
                .inputs
                .iter()
                .map(|&i| values[i].as_ref().or_else(|| self.params.get(&i)).expect("inputs computed before use"))
                .collect();
            let t = self.exec(k, &args, &shape)?;
            values[kernel.output] = Some(t);
            for &dead in &p.plan.frees_after[k] {
                values[dead] = None;
            }
        }
        Ok(p.outputs
            .iter()
            .map(|(name, b)| {
                let t = values[*b].as_ref().or_else(|| self.params.get(b)).expect("outputs stay live");
                (name.clone(), t.clone())
            })
            .collect())
    }

    /// Kernel `k` on the device, or on the host when candle cannot express it.
    fn exec(&self, k: usize, args: &[&Tensor], shape: &[usize]) -> Result<Tensor, CandleError> {
        let kernel = &self.program.kernels[k];
        let dtype = self.program.buffers[kernel.output].ty.dtype;
        // Candle refuses some edge cases the IR defines (reductions over empty tensors, say):
        // those, and ops candle cannot express, run on the host.
        let on_device = if shape.contains(&0) { None } else { self.on_device(&kernel.op, args, dtype, shape) };
        let t = match on_device {
            Some(t) => t,
            None => {
                let hosts: Vec<HostTensor> = args
                    .iter()
                    .zip(&kernel.inputs)
                    .map(|(t, &i)| download(t, self.program.buffers[i].ty.dtype))
                    .collect::<Result<_, _>>()
                    .map_err(|message| CandleError::Candle { place: self.place(k), message })?;
                let refs: Vec<&HostTensor> = hosts.iter().collect();
                let r = crate::reference::eval_op(&kernel.op, &refs, dtype, shape)
                    .map_err(|message| EvalError::Runtime { place: self.place(k), message })?;
                self.upload(&r).map_err(|message| CandleError::Candle { place: self.place(k), message })?
            }
        };
        if t.dims() != shape {
            let message = format!("internal error: kernel produced {:?}, expected {shape:?}", t.dims());
            return Err(EvalError::Runtime { place: self.place(k), message }.into());
        }
        Ok(t)
    }

    /// The op in candle, or None for the host. Half-precision ops compute in f32 and round
    /// once at the end, as the IR defines them (candle would round every step in f16/bf16).
    fn on_device(&self, op: &Op, args: &[&Tensor], dtype: DType, shape: &[usize]) -> Option<Tensor> {
        let half = |d: candle_core::DType| matches!(d, candle_core::DType::F16 | candle_core::DType::BF16);
        let is_cast = matches!(op, Op::Cast { .. });
        if !is_cast && (matches!(dtype, DType::F16 | DType::BF16) || args.iter().any(|a| half(a.dtype()))) {
            let wide: Vec<Tensor> = args
                .iter()
                .map(|a| if half(a.dtype()) { a.to_dtype(candle_core::DType::F32) } else { Ok((*a).clone()) })
                .collect::<candle_core::Result<_>>()
                .ok()?;
            let refs: Vec<&Tensor> = wide.iter().collect();
            let wide_dtype = if matches!(dtype, DType::F16 | DType::BF16) { DType::F32 } else { dtype };
            let t = ops::run(op, &refs, wide_dtype, shape, &self.device).ok().flatten()?;
            return t.to_dtype(ops::candle_dtype(dtype)).ok();
        }
        ops::run(op, args, dtype, shape, &self.device).ok().flatten()
    }

    fn upload(&self, t: &HostTensor) -> Result<Tensor, String> {
        let first_line = |e: candle_core::Error| e.to_string().lines().next().unwrap_or_default().to_string();
        let shape = t.shape().to_vec();
        let r = match t.dtype {
            DType::I32 | DType::I64 => {
                Tensor::from_vec(t.data.iter().map(|&v| v as i64).collect::<Vec<i64>>(), shape, &self.device)
            }
            DType::Bool => {
                Tensor::from_vec(t.data.iter().map(|&v| u8::from(v != 0.0)).collect::<Vec<u8>>(), shape, &self.device)
            }
            DType::F64 => Tensor::from_vec(t.data.iter().copied().collect::<Vec<f64>>(), shape, &self.device),
            _ => Tensor::from_vec(t.data.iter().map(|&v| v as f32).collect::<Vec<f32>>(), shape, &self.device),
        };
        r.and_then(|x| x.to_dtype(ops::candle_dtype(t.dtype))).map_err(first_line)
    }

    fn place(&self, k: usize) -> Place {
        let kernel = &self.program.kernels[k];
        Place { node: kernel.output, op: kernel.name.clone(), provenance: kernel.provenance.clone() }
    }

    fn buffer_place(&self, b: usize) -> Place {
        let buf = &self.program.buffers[b];
        let op = match &buf.kind {
            BufferKind::Constant(op) => op.name().to_string(),
            _ => "buffer".to_string(),
        };
        Place { node: b, op, provenance: buf.provenance.clone() }
    }

    fn fail_buffer(&self, b: usize, message: String) -> CandleError {
        CandleError::Candle { place: self.buffer_place(b), message }
    }
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
