//! One Program executor for every target that runs kernels one by one from the host (the CPU
//! and Candle targets). A target says how to move values and run one kernel ([`Backend`]);
//! the executor does the rest the same way everywhere: binds parameters, evaluates constants
//! and the kernels that read only parameters and constants once (weight transposes), binds
//! symbolic dims from the inputs, dispatches the schedule, frees each value after its last use
//! as the memory plan says, falls back to the reference implementation where the target has
//! no kernel (and says so in profiles), and times kernels when asked.
//!
//! The WGSL target records a whole schedule into one command buffer instead, so it does not
//! use this loop; it follows the same steps in the same order (`wgpu::WgpuProgram`).

use crate::collective::{Collective, Pending};
use crate::feeds;
use crate::reference::{EvalError, Place, concrete};
use crate::tensor::HostTensor;
use rustral_ir::{DType, Op};
use rustral_lowering::{BufferKind, Kernel, Program};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::{Duration, Instant};

/// `update_slice` as the reference computes it, on host tensors: what a target without an
/// in-place write of its own falls back to.
pub(crate) fn update_slice_on_host(
    target: &HostTensor,
    update: &HostTensor,
    axis: usize,
    start: usize,
    place: &Place,
) -> Result<HostTensor, EvalError> {
    let pos = HostTensor::scalar(DType::I64, start as f64);
    crate::reference::eval_op(&Op::UpdateSlice { axis }, &[target, update, &pos], target.dtype, target.shape())
        .map_err(|message| EvalError::Runtime { place: place.clone(), message })
}

/// A run's inputs: borrowed (cloned where kept) or donated.
enum Feeds<'a, V> {
    Borrowed(&'a HashMap<String, V>),
    Owned(HashMap<String, V>),
}

/// Named outputs of a run, in order.
pub type Outputs = Vec<(String, HostTensor)>;

/// One kernel's time in a profiled run.
#[derive(Clone, Debug)]
pub struct KernelTime {
    /// Its index in the program's kernels (kernels that run once, when parameters are bound,
    /// are not timed, so this is not the position in a profile).
    pub kernel: usize,
    /// Op name.
    pub op: String,
    /// Module path of the (possibly fused) node.
    pub provenance: String,
    /// The model source locations the kernel computes (empty when unknown).
    pub loc: Vec<rustral_ir::SourceLoc>,
    /// Wall time.
    pub time: Duration,
    /// True when the kernel ran the reference fallback.
    pub fallback: bool,
}

/// What a target provides to the executor.
pub trait Backend: Sync {
    /// A value held by the target (host memory, a device tensor).
    type Value: Clone + Send + Sync;
    /// The target's error; feed and evaluation errors convert into it.
    type Error: From<EvalError> + Send;

    /// A host tensor on the target; `place` names the buffer for errors.
    fn upload(&self, t: HostTensor, place: &Place) -> Result<Self::Value, Self::Error>;

    /// As `upload`, from a borrowed tensor (parameters: the host copy stays with its owner).
    /// The default clones; targets that convert anyway convert from the borrow.
    fn upload_ref(&self, t: &HostTensor, place: &Place) -> Result<Self::Value, Self::Error> {
        self.upload(t.clone(), place)
    }

    /// A value back on the host, rounded to `dtype`.
    fn download(&self, v: &Self::Value, dtype: DType, place: &Place) -> Result<HostTensor, Self::Error>;

    /// A value's shape.
    fn shape(v: &Self::Value) -> &[usize];

    /// A value's dtype, where the target can tell (`declared` otherwise).
    fn dtype(v: &Self::Value, declared: DType) -> DType;

    /// Run `kernel` on `args` into a value of `shape` and `dtype` with the target's own
    /// kernel, or return None to have the executor run the reference implementation.
    fn run_kernel(
        &self,
        kernel: &Kernel,
        args: &[&Self::Value],
        dtype: DType,
        shape: &[usize],
        place: &Place,
    ) -> Result<Option<Self::Value>, Self::Error>;

    /// `target` with `update` written at `start..` along `axis` (`Op::UpdateSlice`). The
    /// executor passes `target` by value; `exclusive` says that no one else holds it (a
    /// donated input or an intermediate whose last use this is), so the write may be in place.
    /// The default goes through the host.
    fn update_slice(
        &self,
        target: Self::Value,
        exclusive: bool,
        update: &Self::Value,
        axis: usize,
        start: usize,
        place: &Place,
    ) -> Result<Self::Value, Self::Error> {
        let _ = exclusive;
        let (t, u) = (
            self.download(&target, Self::dtype(&target, DType::F32), place)?,
            self.download(update, Self::dtype(update, DType::F32), place)?,
        );
        self.upload(update_slice_on_host(&t, &u, axis, start, place)?, place)
    }

    /// A value computed once from parameters (a weight's transpose), in the form later runs
    /// read fastest: Candle makes its lazy views contiguous here, once, rather than in every
    /// matmul that reads them. The default keeps the value.
    fn settle(&self, v: Self::Value, place: &Place) -> Result<Self::Value, Self::Error> {
        let _ = place;
        Ok(v)
    }

    /// Parameters are about to be bound anew: drop whatever was derived from the old ones
    /// and kept between runs. The default keeps nothing.
    fn forget_params(&self) {}

    /// Run `f` where the target's kernels expect to run (the CPU target's thread pool).
    fn install<R: Send>(&self, f: impl FnOnce() -> R + Send) -> R {
        f()
    }
}

/// A program bound to a backend.
pub struct Executor<B: Backend> {
    program: Program,
    backend: B,
    /// Parameters, and everything computed from parameters and constants alone, by buffer.
    params: HashMap<usize, B::Value>,
    /// Kernels whose results are in `params` and are skipped per run.
    precomputed: HashSet<usize>,
    /// Per buffer, the last kernel reading it (`usize::MAX` for outputs and unread buffers).
    last_use: Vec<usize>,
    /// This rank's part in a data-parallel run: where the program's collectives go.
    share: Option<Share>,
}

/// A rank's part in a data-parallel run: its group, and the factor its outputs are scaled by
/// before the cross-rank sum (its share of the global batch, so the sum is the global mean).
#[derive(Clone, Debug)]
pub struct Share {
    /// The rank's group.
    pub comm: Collective,
    /// Its share of the global batch.
    pub weight: f64,
}

impl<B: Backend> Executor<B> {
    /// `program` on `backend`, nothing bound yet.
    pub fn new(program: Program, backend: B) -> Executor<B> {
        let mut last_use = vec![usize::MAX; program.buffers.len()];
        for (k, kernel) in program.kernels.iter().enumerate() {
            for &i in &kernel.inputs {
                last_use[i] = k;
            }
        }
        for (_, b) in &program.outputs {
            last_use[*b] = usize::MAX;
        }
        Executor { program, backend, params: HashMap::new(), precomputed: HashSet::new(), last_use, share: None }
    }

    /// Run the program's collectives (`Program::collectives`) on `share`'s group from now on;
    /// None runs them as the identity (one rank with all the batch).
    pub fn set_share(&mut self, share: Option<Share>) {
        self.share = share;
    }

    /// This rank's part in a data-parallel run, if set.
    pub fn share(&self) -> Option<&Share> {
        self.share.as_ref()
    }

    /// Sum `outputs` across the ranks of a data-parallel run, in buckets of about
    /// `bucket_bytes` started as the schedule computes them (`Program::schedule_collectives`),
    /// on `share`'s group.
    pub fn set_data_parallel(
        &mut self,
        outputs: &[String],
        bucket_bytes: usize,
        share: Share,
    ) -> Result<(), rustral_lowering::ScheduleError> {
        self.program.schedule_collectives(outputs, bucket_bytes)?;
        self.share = Some(share);
        Ok(())
    }

    /// Change this rank's share of the global batch for the next runs (nothing when not
    /// data-parallel).
    pub fn set_share_weight(&mut self, weight: f64) {
        if let Some(share) = &mut self.share {
            share.weight = weight;
        }
    }

    /// The program.
    pub fn program(&self) -> &Program {
        &self.program
    }

    /// The backend.
    pub fn backend(&self) -> &B {
        &self.backend
    }

    /// The backend, to change its settings.
    pub fn backend_mut(&mut self) -> &mut B {
        &mut self.backend
    }

    /// Kernels launched per run: those reading only parameters and constants ran once when
    /// the parameters were bound.
    pub fn dispatches(&self) -> usize {
        self.program.kernels.len() - self.precomputed.len()
    }

    /// The bound parameter buffers' values, by parameter name (to change them in place;
    /// call [`Executor::precompute`] afterwards).
    pub fn params_mut(&mut self) -> Vec<(String, &mut B::Value)> {
        let names: HashMap<usize, &String> = self
            .program
            .buffers
            .iter()
            .enumerate()
            .filter_map(|(b, buf)| match &buf.kind {
                BufferKind::Param(name) => Some((b, name)),
                _ => None,
            })
            .collect();
        let mut out: Vec<(usize, String, &mut B::Value)> =
            self.params.iter_mut().filter_map(|(b, v)| names.get(b).map(|n| (*b, (*n).clone(), v))).collect();
        out.sort_by_key(|(b, ..)| *b);
        out.into_iter().map(|(_, n, v)| (n, v)).collect()
    }

    /// How many parameters the program declares.
    pub fn param_count(&self) -> usize {
        self.program.buffers.iter().filter(|b| matches!(b.kind, BufferKind::Param(_))).count()
    }

    /// Bind parameter values; each must match its declared (static) type. Then evaluate what
    /// depends on parameters and constants alone.
    pub fn bind_params(&mut self, params: &HashMap<String, HostTensor>) -> Result<(), B::Error> {
        self.params.clear();
        self.backend.forget_params();
        for (b, buf) in self.program.buffers.iter().enumerate() {
            if let BufferKind::Param(name) = &buf.kind {
                let value =
                    params.get(name).ok_or_else(|| EvalError::MissingFeed { kind: "param", name: name.clone() })?;
                feeds::check(name, &buf.ty, value.dtype, value.shape(), &mut BTreeMap::new())?;
                let v = self.backend.upload_ref(value, &self.buffer_place(b))?;
                self.params.insert(b, v);
            }
        }
        self.precompute()
    }

    /// Evaluate constants of static shape and the kernels that depend only on parameters and
    /// such constants, once; runs then skip them. Call again after changing parameters.
    pub fn precompute(&mut self) -> Result<(), B::Error> {
        // Keep parameters and constants (constants do not change when parameters do); drop
        // what was computed from the old parameters.
        let program = &self.program;
        self.params.retain(|&b, _| matches!(program.buffers[b].kind, BufferKind::Param(_) | BufferKind::Constant(_)));
        self.precomputed.clear();
        let empty = BTreeMap::new();
        for (b, buf) in self.program.buffers.iter().enumerate() {
            if self.params.contains_key(&b) {
                continue;
            }
            if let (BufferKind::Constant(op), Ok(shape)) = (&buf.kind, concrete(&buf.ty.shape.0, &empty)) {
                let v = self.constant(b, op, &shape)?;
                self.params.insert(b, v);
            }
        }
        for (k, kernel) in self.program.kernels.iter().enumerate() {
            let ready = kernel.inputs.iter().all(|i| self.params.contains_key(i));
            let shape = concrete(&self.program.buffers[kernel.output].ty.shape.0, &empty);
            if let (true, Ok(shape)) = (ready, shape) {
                let args: Vec<&B::Value> = kernel.inputs.iter().map(|i| &self.params[i]).collect();
                let (v, _) = self.backend.install(|| self.exec(k, &args, &shape))?;
                let v = self.backend.settle(v, &self.place(k))?;
                self.params.insert(kernel.output, v);
                self.precomputed.insert(k);
            }
        }
        Ok(())
    }

    /// Run on inputs already on the target; outputs stay there. With `times`, every kernel
    /// run is timed and recorded in schedule order.
    pub fn run(
        &self,
        inputs: &HashMap<String, B::Value>,
        times: Option<&mut Vec<KernelTime>>,
    ) -> Result<Vec<(String, B::Value)>, B::Error> {
        self.run_inner(Feeds::Borrowed(inputs), times)
    }

    /// As [`Executor::run`], with the inputs donated: an input whose last reader writes it
    /// (`update_slice`, a KV cache growing by a step) is written in place, not copied.
    pub fn run_owned(
        &self,
        inputs: HashMap<String, B::Value>,
        times: Option<&mut Vec<KernelTime>>,
    ) -> Result<Vec<(String, B::Value)>, B::Error> {
        self.run_inner(Feeds::Owned(inputs), times)
    }

    fn run_inner(
        &self,
        feeds: Feeds<'_, B::Value>,
        mut times: Option<&mut Vec<KernelTime>>,
    ) -> Result<Vec<(String, B::Value)>, B::Error> {
        let owned = matches!(feeds, Feeds::Owned(_));
        let mut feeds = feeds;
        let inputs: &HashMap<String, B::Value> = match &feeds {
            Feeds::Borrowed(m) => m,
            Feeds::Owned(m) => m,
        };
        let p = &self.program;
        let binding = feeds::bind_program(
            p,
            inputs.keys(),
            |name, declared| inputs.get(name).map(|v| (B::dtype(v, declared), B::shape(v))),
            |b| self.params.get(&b).map(B::shape),
        )?;
        let mut values: Vec<Option<B::Value>> = vec![None; p.buffers.len()];
        for (b, buf) in p.buffers.iter().enumerate() {
            match &buf.kind {
                BufferKind::Input(name) => {
                    values[b] = match &mut feeds {
                        Feeds::Owned(m) => m.remove(name),
                        Feeds::Borrowed(m) => m.get(name).cloned(),
                    }
                }
                BufferKind::Constant(op) if !self.params.contains_key(&b) => {
                    let shape = concrete(&buf.ty.shape.0, &binding)
                        .map_err(|sym| EvalError::UnboundSymbol { place: self.buffer_place(b), sym })?;
                    values[b] = Some(self.constant(b, op, &shape)?);
                }
                _ => {}
            }
        }
        let share = self.share.as_ref().filter(|_| !p.collectives.is_empty());
        let mut pending: Vec<(usize, Pending)> = Vec::new();
        if let Some(share) = share {
            for (c, _) in p.collectives.iter().enumerate().filter(|(_, col)| col.after.is_none()) {
                pending.push((c, self.start_collective(c, share, &values)?));
            }
        }
        self.backend.install(|| -> Result<(), B::Error> {
            for (k, kernel) in p.kernels.iter().enumerate() {
                if let Some(share) = share {
                    // The collectives whose last buffer the previous kernel computed.
                    for (c, _) in p.collectives.iter().enumerate().filter(|(_, col)| k > 0 && col.after == Some(k - 1))
                    {
                        pending.push((c, self.start_collective(c, share, &values)?));
                    }
                }
                if self.precomputed.contains(&k) {
                    continue;
                }
                let start = Instant::now();
                let shape = concrete(&p.buffers[kernel.output].ty.shape.0, &binding)
                    .map_err(|sym| EvalError::UnboundSymbol { place: self.place(k), sym })?;
                let (v, fallback) = if let Op::UpdateSlice { axis } = kernel.op {
                    (self.update_slice(k, axis, &mut values, owned)?, false)
                } else {
                    let args: Vec<&B::Value> = kernel
                        .inputs
                        .iter()
                        .map(|&i| values[i].as_ref().or_else(|| self.params.get(&i)).ok_or_else(|| self.lost(k, i)))
                        .collect::<Result<_, _>>()?;
                    self.exec(k, &args, &shape)?
                };
                values[kernel.output] = Some(v);
                for &dead in &p.plan.frees_after[k] {
                    values[dead] = None;
                }
                if let Some(t) = times.as_deref_mut() {
                    t.push(KernelTime {
                        kernel: k,
                        op: kernel.name.clone(),
                        provenance: kernel.provenance.clone(),
                        loc: kernel.loc.clone(),
                        time: start.elapsed(),
                        fallback,
                    });
                }
            }
            if let Some(share) = share {
                let last = p.kernels.len().checked_sub(1);
                for (c, _) in
                    p.collectives.iter().enumerate().filter(|(_, col)| col.after.is_some() && col.after == last)
                {
                    pending.push((c, self.start_collective(c, share, &values)?));
                }
            }
            Ok(())
        })?;
        for (c, wait) in pending {
            self.finish_collective(c, wait.wait().map_err(EvalError::from)?, &mut values)?;
        }
        p.outputs
            .iter()
            .map(|(name, b)| {
                let v = values[*b].as_ref().or_else(|| self.params.get(b));
                let v = v.ok_or_else(|| EvalError::Runtime {
                    place: self.buffer_place(*b),
                    message: format!("internal error: output `{name}` was freed before the end"),
                })?;
                Ok((name.clone(), v.clone()))
            })
            .collect()
    }

    /// Collective `c`'s buffers scaled by the rank's weight, packed into one host vector and
    /// handed to the communication thread.
    fn start_collective(&self, c: usize, share: &Share, values: &[Option<B::Value>]) -> Result<Pending, B::Error> {
        let col = &self.program.collectives[c];
        let mut packed = Vec::with_capacity(col.bytes / 4);
        for &b in &col.buffers {
            let place = self.buffer_place(b);
            let v = values[b].as_ref().or_else(|| self.params.get(&b)).ok_or_else(|| EvalError::Runtime {
                place: place.clone(),
                message: format!("internal error: `{}` reads a buffer that is not computed", col.name),
            })?;
            let host = self.backend.download(v, self.program.buffers[b].ty.dtype, &place)?;
            packed.extend(host.to_vec().into_iter().map(|x| x * share.weight));
        }
        Ok(share.comm.start_sum(&col.name, packed))
    }

    /// Put collective `c`'s sums back into its buffers.
    fn finish_collective(&self, c: usize, sums: Vec<f64>, values: &mut [Option<B::Value>]) -> Result<(), B::Error> {
        let col = &self.program.collectives[c];
        let mut at = 0;
        for &b in &col.buffers {
            let place = self.buffer_place(b);
            let shape = values[b].as_ref().or_else(|| self.params.get(&b)).map(|v| B::shape(v).to_vec());
            let shape = shape.ok_or_else(|| EvalError::Runtime {
                place: place.clone(),
                message: format!("internal error: `{}` lost a buffer", col.name),
            })?;
            let n: usize = shape.iter().product();
            let part = sums.get(at..at + n).ok_or_else(|| EvalError::Runtime {
                place: place.clone(),
                message: format!("`{}` came back with {} values, fewer than its buffers hold", col.name, sums.len()),
            })?;
            at += n;
            let host = HostTensor::new(self.program.buffers[b].ty.dtype, &shape, part.to_vec())
                .map_err(|e| EvalError::Runtime { place: place.clone(), message: e.to_string() })?;
            values[b] = Some(self.backend.upload(host, &place)?);
        }
        Ok(())
    }

    /// Host inputs on the target, by name (an upload error names the input's buffer).
    pub fn upload_inputs(&self, inputs: &HashMap<String, HostTensor>) -> Result<HashMap<String, B::Value>, B::Error> {
        let mut on_target = HashMap::with_capacity(inputs.len());
        for (name, t) in inputs {
            let place = match self.program.buffers.iter().position(|b| b.kind == BufferKind::Input(name.clone())) {
                Some(b) => self.buffer_place(b),
                None => Place { node: 0, op: "input".into(), provenance: name.clone() },
            };
            on_target.insert(name.clone(), self.backend.upload(t.clone(), &place)?);
        }
        Ok(on_target)
    }

    /// Upload host inputs, run, and download the outputs.
    pub fn run_host(
        &self,
        inputs: &HashMap<String, HostTensor>,
        times: Option<&mut Vec<KernelTime>>,
    ) -> Result<Vec<(String, HostTensor)>, B::Error> {
        let out = self.run(&self.upload_inputs(inputs)?, times)?;
        out.into_iter()
            .zip(&self.program.outputs)
            .map(|((name, v), (_, b))| {
                let host = self.backend.download(&v, self.program.buffers[*b].ty.dtype, &self.buffer_place(*b))?;
                Ok((name, host))
            })
            .collect()
    }

    /// One step of a stateful run (a decode step): `state` holds values on the target by input
    /// name (KV caches), donated to the run beside the host `inputs`; each `(output, input)`
    /// pair of `carry` puts that output back into `state` under the input's name, and the
    /// outputs named in `read` come back to the host. The state never leaves the target, and a
    /// cache written by `update_slice` is written in place.
    pub fn run_carry(
        &self,
        inputs: &HashMap<String, HostTensor>,
        state: &mut HashMap<String, B::Value>,
        carry: &[(String, String)],
        read: &[&str],
    ) -> Result<Vec<(String, HostTensor)>, B::Error> {
        let mut feeds = self.upload_inputs(inputs)?;
        for (_, input) in carry {
            let v = state.remove(input).ok_or_else(|| EvalError::MissingFeed { kind: "state", name: input.clone() })?;
            feeds.insert(input.clone(), v);
        }
        let outputs = self.run_owned(feeds, None)?;
        let mut host = Vec::with_capacity(read.len());
        for ((name, v), (_, b)) in outputs.into_iter().zip(&self.program.outputs) {
            if read.contains(&name.as_str()) {
                host.push((
                    name.clone(),
                    self.backend.download(&v, self.program.buffers[*b].ty.dtype, &self.buffer_place(*b))?,
                ));
            }
            if let Some((_, input)) = carry.iter().find(|(o, _)| *o == name) {
                state.insert(input.clone(), v);
            }
        }
        Ok(host)
    }

    /// Kernel `k` on `args` into a value of `shape`: the target's kernel when it has one,
    /// else the reference implementation. Returns whether the fallback ran.
    fn exec(&self, k: usize, args: &[&B::Value], shape: &[usize]) -> Result<(B::Value, bool), B::Error> {
        let kernel = &self.program.kernels[k];
        let dtype = self.program.buffers[kernel.output].ty.dtype;
        let place = self.place(k);
        // A static slice of a symbolic dim is in range only once the dim is bound: a prompt
        // longer than GPT-2's position table must fail here, not read past the rows.
        if let Op::Slice { axis, start, .. } = &kernel.op
            && let Some(a) = args.first()
        {
            let size = B::shape(a).get(*axis).copied().unwrap_or(0);
            let end = start.saturating_add(shape.get(*axis).copied().unwrap_or(0));
            if end > size {
                let message = format!("slice {start}..{end} is past the end of axis {axis} (size {size})");
                return Err(EvalError::Runtime { place, message }.into());
            }
        }
        let (v, fallback) = match self.backend.run_kernel(kernel, args, dtype, shape, &place)? {
            Some(v) => (v, false),
            None => {
                let hosts: Vec<HostTensor> = args
                    .iter()
                    .zip(&kernel.inputs)
                    .map(|(a, &i)| self.backend.download(a, self.program.buffers[i].ty.dtype, &place))
                    .collect::<Result<_, _>>()?;
                let refs: Vec<&HostTensor> = hosts.iter().collect();
                let t = crate::reference::eval_op(&kernel.op, &refs, dtype, shape)
                    .map_err(|message| EvalError::Runtime { place: place.clone(), message })?;
                (self.backend.upload(t, &place)?, true)
            }
        };
        if B::shape(&v) != shape {
            let message = format!("internal error: kernel produced {:?}, expected {shape:?}", B::shape(&v));
            return Err(EvalError::Runtime { place, message }.into());
        }
        Ok((v, fallback))
    }

    /// Kernel `k`, an `update_slice`: its target is taken rather than cloned where this is
    /// its last use and the executor owns it, so the backend may write in place.
    fn update_slice(
        &self,
        k: usize,
        axis: usize,
        values: &mut [Option<B::Value>],
        owned_inputs: bool,
    ) -> Result<B::Value, B::Error> {
        let kernel = &self.program.kernels[k];
        let place = self.place(k);
        let [target, update, position] = kernel.inputs[..] else {
            return Err(
                EvalError::Runtime { place, message: "internal error: update_slice needs 3 operands".into() }.into()
            );
        };
        let donor = match self.program.buffers[target].kind {
            BufferKind::Intermediate => true,
            BufferKind::Input(_) => owned_inputs,
            _ => false,
        };
        let pos_value =
            values[position].as_ref().or_else(|| self.params.get(&position)).ok_or_else(|| self.lost(k, position))?;
        let pos = self.backend.download(pos_value, self.program.buffers[position].ty.dtype, &place)?;
        let start = crate::reference::scalar_index(&pos)
            .map_err(|message| EvalError::Runtime { place: place.clone(), message })?;
        let exclusive = donor && self.last_use[target] == k && target != update;
        let target_value = if exclusive {
            values[target].take().ok_or_else(|| self.lost(k, target))?
        } else {
            values[target].as_ref().or_else(|| self.params.get(&target)).cloned().ok_or_else(|| self.lost(k, target))?
        };
        let update_value =
            values[update].as_ref().or_else(|| self.params.get(&update)).ok_or_else(|| self.lost(k, update))?;
        let (n, size) = (B::shape(update_value)[axis], B::shape(&target_value)[axis]);
        if start + n > size {
            let message = format!("a write of {n} at position {start} is past the end of axis {axis} (size {size})");
            return Err(EvalError::Runtime { place, message }.into());
        }
        self.backend.update_slice(target_value, exclusive, update_value, axis, start, &place)
    }

    /// A constant buffer's value (made on the host, as the reference defines it).
    fn constant(&self, b: usize, op: &Op, shape: &[usize]) -> Result<B::Value, B::Error> {
        let buf = &self.program.buffers[b];
        let t = crate::reference::eval_source(op, buf.ty.dtype, shape)
            .map_err(|message| EvalError::Runtime { place: self.buffer_place(b), message })?;
        self.backend.upload(t, &self.buffer_place(b))
    }

    /// Where kernel `k` is: its output node, op and module path.
    pub fn place(&self, k: usize) -> Place {
        let kernel = &self.program.kernels[k];
        Place { node: kernel.output, op: kernel.name.clone(), provenance: kernel.provenance.clone() }
    }

    /// Where buffer `b` is.
    pub fn buffer_place(&self, b: usize) -> Place {
        let buf = &self.program.buffers[b];
        let op = match &buf.kind {
            BufferKind::Constant(op) => op.name().to_string(),
            BufferKind::Input(_) => "input".to_string(),
            BufferKind::Param(_) => "param".to_string(),
            BufferKind::Intermediate => "buffer".to_string(),
        };
        Place { node: b, op, provenance: buf.provenance.clone() }
    }

    /// An operand that should be live but is not: a memory plan that freed it too early.
    fn lost(&self, k: usize, b: usize) -> EvalError {
        EvalError::Runtime {
            place: self.place(k),
            message: format!("internal error: operand buffer {b} is not live (freed before its last use)"),
        }
    }
}
