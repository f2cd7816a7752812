//! The WGSL target's runtime: a [`WgslProgram`] run by wgpu on any WebGPU adapter (Vulkan,
//! Metal, DX12, GL; Mesa's software Vulkan driver in CI). Pipelines are created once when the
//! program is loaded; parameters and constants are uploaded once; intermediates are allocated
//! per binding of the symbolic dims (sharing storage by the program's slots) and the `init`
//! kernels run then; each run uploads the inputs, dispatches the `run` kernels in one compute
//! pass and reads the outputs back. The adapter's limits are checked up front and a program
//! that does not fit names the limit.

mod disk;
mod gpu;
mod optim;

pub use disk::{load, save, save_tensors};
pub use gpu::Gpu;
pub use optim::{DeviceUpdate, Moments};

use crate::reference::EvalError;
use crate::tensor::HostTensor;
use rustral_lowering::wgsl::{Phase, Role, Storage, WgslProgram};
use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use thiserror::Error;

/// Why the WGSL target failed.
#[derive(Debug, Error)]
pub enum WgpuError {
    /// No WebGPU adapter (on Linux without a GPU: install Mesa's Vulkan driver,
    /// `mesa-vulkan-drivers`).
    #[error(
        "no WebGPU adapter: {0} (without a GPU, install Mesa's software Vulkan driver: apt-get install mesa-vulkan-drivers libvulkan1)"
    )]
    NoAdapter(String),
    /// wgpu refused something: a compiler or runtime bug, reported with wgpu's message.
    #[error("wgpu failed at {place}: {message}")]
    Device {
        /// Where (a kernel, a buffer, the device).
        place: String,
        /// wgpu's message.
        message: String,
    },
    /// The program does not fit the adapter.
    #[error("{place} needs {needed} but the adapter's {limit} is {allowed}")]
    Limit {
        /// The wgpu limit's name.
        limit: &'static str,
        /// What was needed.
        needed: u64,
        /// What the adapter allows.
        allowed: u64,
        /// The kernel or buffer.
        place: String,
    },
    /// A feed error (as the reference reports them).
    #[error(transparent)]
    Eval(#[from] EvalError),
    /// A kernel hit a data-dependent error.
    #[error("kernel {kernel} ({op} at {provenance:?}) failed: {message}")]
    Kernel {
        /// Kernel name.
        kernel: String,
        /// Its op.
        op: String,
        /// Module path of the node.
        provenance: String,
        /// What happened.
        message: String,
    },
    /// A value the device's storage cannot hold (integers are i32 words on WebGPU).
    #[error("{name}: {message}")]
    Value {
        /// The input, parameter or constant.
        name: String,
        /// Which value, and why.
        message: String,
    },
    /// Reading or writing a program on disk.
    #[error("{path}: {message}")]
    Disk {
        /// The file.
        path: String,
        /// What went wrong.
        message: String,
    },
}

pub use crate::exec::KernelTime;

/// A tensor held on the device between runs (a KV cache), usable by every program on the
/// same [`Gpu`].
#[derive(Clone, Debug)]
pub struct DeviceTensor {
    buffer: std::sync::Arc<wgpu::Buffer>,
    shape: Vec<usize>,
    dtype: rustral_ir::DType,
}

/// A WGSL program ready to run on a wgpu device.
pub struct WgpuProgram {
    program: WgslProgram,
    gpu: Gpu,
    pipelines: Vec<(wgpu::ComputePipeline, wgpu::BindGroupLayout)>,
    /// Parameters and constants on the device, with their shapes.
    fixed: HashMap<usize, (wgpu::Buffer, Vec<usize>)>,
    /// Storage for the last binding of the symbolic dims.
    bound: Mutex<Option<Bound>>,
    /// The optimizer's pipeline and state, once a step ran on the device.
    optimizer: Mutex<Option<optim::State>>,
}

/// Device storage for one binding of the symbolic dims.
struct Bound {
    binding: BTreeMap<String, usize>,
    /// The resident buffers the bind groups were made with, by program buffer.
    resident: Vec<(usize, usize)>,
    /// Per program buffer: its device buffer (intermediates sharing a slot share one).
    buffers: Vec<std::sync::Arc<wgpu::Buffer>>,
    groups: Vec<wgpu::BindGroup>,
    workgroups: Vec<(u32, u32)>,
    elements: Vec<u64>,
}

impl WgpuProgram {
    /// Prepare `program` on the default adapter (`WGPU_ADAPTER_NAME` and `WGPU_BACKEND` choose
    /// another).
    pub fn new(program: WgslProgram) -> Result<WgpuProgram, WgpuError> {
        WgpuProgram::with_gpu(program, Gpu::new()?)
    }

    /// Prepare `program` on `gpu`: check it against the limits and create every pipeline.
    pub fn with_gpu(program: WgslProgram, gpu: Gpu) -> Result<WgpuProgram, WgpuError> {
        let limits = gpu.device.limits();
        let mut pipelines = Vec::with_capacity(program.kernels.len());
        for k in &program.kernels {
            let place = format!("kernel {} ({} at {:?})", k.name, k.op, k.provenance);
            let check = |limit: &'static str, needed: u64, allowed: u32| {
                if needed > u64::from(allowed) {
                    Err(WgpuError::Limit { limit, needed, allowed: u64::from(allowed), place: place.clone() })
                } else {
                    Ok(())
                }
            };
            check(
                "max_storage_buffers_per_shader_stage",
                k.bindings.len() as u64,
                limits.max_storage_buffers_per_shader_stage,
            )?;
            check(
                "max_compute_invocations_per_workgroup",
                u64::from(k.workgroup_size.iter().product::<u32>()),
                limits.max_compute_invocations_per_workgroup,
            )?;
            check("max_compute_workgroup_size_x", u64::from(k.workgroup_size[0]), limits.max_compute_workgroup_size_x)?;
            check(
                "max_compute_workgroup_storage_size",
                u64::from(k.workgroup_bytes),
                limits.max_compute_workgroup_storage_size,
            )?;
            pipelines.push(gpu.pipeline(k).map_err(|message| WgpuError::Device { place, message })?);
        }
        Ok(WgpuProgram {
            program,
            gpu,
            pipelines,
            fixed: HashMap::new(),
            bound: Mutex::new(None),
            optimizer: Mutex::new(None),
        })
    }

    /// Load a program folder written by [`save`] and bind its parameters.
    pub fn open(dir: &std::path::Path) -> Result<WgpuProgram, WgpuError> {
        let (program, params) = load(dir)?;
        let mut p = WgpuProgram::new(program)?;
        p.bind_params(&params)?;
        Ok(p)
    }

    /// The program.
    pub fn program(&self) -> &WgslProgram {
        &self.program
    }

    /// The adapter, as wgpu names it (`llvmpipe (LLVM 15.0.6, 256 bits)` on lavapipe).
    pub fn adapter(&self) -> String {
        self.gpu.describe()
    }

    /// Kernels dispatched per run (`init` kernels run once per binding).
    pub fn dispatches(&self) -> usize {
        self.program.kernels.iter().filter(|k| k.phase == Phase::Run).count()
    }

    /// Upload parameter values (and the program's dense constants) once; each must match its
    /// declared type.
    pub fn bind_params(&mut self, params: &HashMap<String, HostTensor>) -> Result<(), WgpuError> {
        self.fixed.clear();
        *self.bound.lock().expect("no run panicked holding the lock") = None;
        for (b, buf) in self.program.buffers.iter().enumerate() {
            let (words, shape) = match &buf.role {
                Role::Param { name } => {
                    let value =
                        params.get(name).ok_or_else(|| EvalError::MissingFeed { kind: "param", name: name.clone() })?;
                    let ty = rustral_ir::TensorType::new(buf.dtype, buf.shape.clone());
                    crate::feeds::check(name, &ty, value.dtype, value.shape(), &mut BTreeMap::new())?;
                    (words(buf.storage, &value.to_vec(), name)?, value.shape().to_vec())
                }
                Role::Constant { .. } => {
                    let data = self.program.constants.get(&b).ok_or_else(|| WgpuError::Disk {
                        path: format!("buffer {b}"),
                        message: "a dense constant without its data".into(),
                    })?;
                    let shape = buf.shape.iter().map(|d| d.as_static().unwrap_or(0)).collect();
                    (words(buf.storage, data, &format!("constant buffer {b}"))?, shape)
                }
                _ => continue,
            };
            let place = format!("buffer {b} ({:?})", buf.provenance);
            self.gpu.check_size(&place, words.len() as u64 * 4)?;
            self.fixed.insert(b, (self.gpu.upload(&words), shape));
        }
        Ok(())
    }

    /// Run on named inputs; returns the outputs in order.
    pub fn run(&self, inputs: &HashMap<String, HostTensor>) -> Result<Vec<(String, HostTensor)>, WgpuError> {
        let guard = self.prepare(inputs, &HashMap::new())?;
        let bound = guard.as_ref().expect("prepared");
        self.dispatch(bound, Phase::Run)?;
        self.outputs(bound)
    }

    /// Run, reading back only the outputs named (a training step reads the loss and leaves
    /// the gradients on the device).
    pub fn run_only(
        &self,
        inputs: &HashMap<String, HostTensor>,
        names: &[&str],
    ) -> Result<Vec<(String, HostTensor)>, WgpuError> {
        let guard = self.prepare(inputs, &HashMap::new())?;
        let bound = guard.as_ref().expect("prepared");
        self.dispatch(bound, Phase::Run)?;
        self.outputs_named(bound, names)
    }

    /// Run with each kernel in its own submission, waited for: the wall time of every `run`
    /// kernel in schedule order (slower than `run`; for finding the expensive kernels).
    pub fn profile(&self, inputs: &HashMap<String, HostTensor>) -> Result<Vec<KernelTime>, WgpuError> {
        let guard = self.prepare(inputs, &HashMap::new())?;
        let bound = guard.as_ref().expect("prepared");
        let mut times = Vec::new();
        for (k, kernel) in self.program.kernels.iter().enumerate() {
            let (x, y) = bound.workgroups[k];
            if kernel.phase != Phase::Run || x == 0 {
                continue;
            }
            let start = std::time::Instant::now();
            let mut encoder = self.gpu.device.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: None });
            {
                let mut pass =
                    encoder.begin_compute_pass(&wgpu::ComputePassDescriptor { label: None, timestamp_writes: None });
                pass.set_pipeline(&self.pipelines[k].0);
                pass.set_bind_group(0, &bound.groups[k], &[]);
                pass.dispatch_workgroups(x, y, 1);
            }
            self.gpu.queue.submit([encoder.finish()]);
            self.gpu
                .device
                .poll(wgpu::PollType::wait_indefinitely())
                .map_err(|e| WgpuError::Device { place: format!("kernel {}", kernel.name), message: e.to_string() })?;
            // Submission to completion; every WGSL kernel runs on the device (no fallback).
            times.push(KernelTime {
                kernel: k,
                op: kernel.op.clone(),
                provenance: kernel.provenance.clone(),
                loc: kernel.loc.iter().filter_map(|l| rustral_ir::SourceLoc::parse(l)).collect(),
                time: start.elapsed(),
                fallback: false,
            });
        }
        Ok(times)
    }

    /// A host tensor as a device buffer this program (and any other on the same [`Gpu`]) can
    /// take as a resident input: a KV cache that stays on the device between runs.
    pub fn resident(&self, t: &HostTensor) -> Result<DeviceTensor, WgpuError> {
        let storage = Storage::of(t.dtype);
        let data = words(storage, &t.to_vec(), "a resident input")?;
        self.gpu.check_size("a resident input", data.len() as u64 * 4)?;
        let buffer = std::sync::Arc::new(self.gpu.upload(&data));
        Ok(DeviceTensor { buffer, shape: t.shape().to_vec(), dtype: t.dtype })
    }

    /// The device this program runs on (to prepare another program beside it).
    pub fn gpu(&self) -> &Gpu {
        &self.gpu
    }

    /// Run with some inputs resident on the device (by input name) and the others from the
    /// host, reading back only the outputs named. Resident inputs are never uploaded; kernels
    /// that write them in place (`update_slice`) leave the new values there for the next run.
    pub fn run_resident(
        &self,
        inputs: &HashMap<String, HostTensor>,
        resident: &HashMap<String, DeviceTensor>,
        names: &[&str],
    ) -> Result<Vec<(String, HostTensor)>, WgpuError> {
        let guard = self.prepare(inputs, resident)?;
        let bound = guard.as_ref().expect("prepared");
        self.dispatch(bound, Phase::Run)?;
        self.outputs_named(bound, names)
    }

    /// Whether output `output` is written into input `input`'s storage (an in-place
    /// `update_slice`), so that a resident input carries it to the next run.
    pub fn writes_in_place(&self, output: &str, input: &str) -> bool {
        let p = &self.program;
        let of_input = p.buffers.iter().position(|b| b.role == Role::Input { name: input.to_string() });
        let out = p.outputs.iter().find(|o| o.name == output).map(|o| &p.buffers[o.buffer].role);
        matches!((out, of_input), (Some(Role::Alias { of }), Some(i)) if *of == i)
    }

    /// Bind the dims, (re)allocate storage when they (or the resident buffers) changed, and
    /// upload the host inputs.
    fn prepare(
        &self,
        inputs: &HashMap<String, HostTensor>,
        resident: &HashMap<String, DeviceTensor>,
    ) -> Result<std::sync::MutexGuard<'_, Option<Bound>>, WgpuError> {
        let p = &self.program;
        let binding = bind_dims(p, inputs, resident, &self.fixed)?;
        let ids: Vec<(usize, usize)> = p
            .buffers
            .iter()
            .enumerate()
            .filter_map(|(b, buf)| match &buf.role {
                Role::Input { name } => resident.get(name).map(|t| (b, std::sync::Arc::as_ptr(&t.buffer) as usize)),
                _ => None,
            })
            .collect();
        let mut guard = self.bound.lock().expect("no run panicked holding the lock");
        if guard.as_ref().is_none_or(|b| b.binding != binding || b.resident != ids) {
            *guard = None;
            *guard = Some(self.allocate(binding, resident, ids)?);
        }
        let bound = guard.as_ref().expect("allocated above");
        for (b, buf) in p.buffers.iter().enumerate() {
            if let Role::Input { name } = &buf.role
                && !resident.contains_key(name)
            {
                let data = words(buf.storage, &inputs[name].to_vec(), name)?;
                self.gpu.queue.write_buffer(&bound.buffers[b], 0, bytemuck::cast_slice(&data));
            }
        }
        Ok(guard)
    }

    /// Read the outputs back.
    fn outputs(&self, bound: &Bound) -> Result<Vec<(String, HostTensor)>, WgpuError> {
        let names: Vec<&str> = self.program.outputs.iter().map(|o| o.name.as_str()).collect();
        self.outputs_named(bound, &names)
    }

    /// Read the named outputs back, in program order.
    fn outputs_named(&self, bound: &Bound, names: &[&str]) -> Result<Vec<(String, HostTensor)>, WgpuError> {
        let p = &self.program;
        let chosen: Vec<&rustral_lowering::wgsl::NamedBuffer> =
            p.outputs.iter().filter(|o| names.contains(&o.name.as_str())).collect();
        let outs: Vec<usize> = chosen.iter().map(|o| o.buffer).collect();
        let data = self.read(bound, &outs)?;
        chosen
            .into_iter()
            .zip(data)
            .map(|(o, words)| {
                let buf = &p.buffers[o.buffer];
                let shape: Vec<usize> = match &buf.role {
                    Role::Param { .. } | Role::Constant { .. } => self.fixed[&o.buffer].1.clone(),
                    _ => buf.shape.iter().map(|d| concrete_dim(d, &bound.binding)).collect(),
                };
                let values = values(buf.storage, &words, shape.iter().product());
                let t = HostTensor::new(buf.dtype, &shape, values)
                    .map_err(|e| WgpuError::Device { place: format!("output {:?}", o.name), message: e.to_string() })?;
                Ok((o.name.clone(), t))
            })
            .collect()
    }

    /// Allocate storage for a binding, make the bind groups and run the `init` kernels.
    fn allocate(
        &self,
        binding: BTreeMap<String, usize>,
        resident: &HashMap<String, DeviceTensor>,
        resident_ids: Vec<(usize, usize)>,
    ) -> Result<Bound, WgpuError> {
        let p = &self.program;
        let place = |b: usize| format!("buffer {b} ({:?})", p.buffers[b].provenance);
        let elements: Vec<u64> = p
            .buffers
            .iter()
            .enumerate()
            .map(|(b, buf)| match self.fixed.get(&b) {
                Some((_, shape)) => Ok(buf.storage.words(shape.iter().product::<usize>() as u64)),
                None => buf.elements.eval(&binding).map_err(|message| WgpuError::Device { place: place(b), message }),
            })
            .collect::<Result<_, _>>()?;
        let mut slot_bytes = vec![4u64; p.slots];
        for (b, buf) in p.buffers.iter().enumerate() {
            if let Role::Intermediate { slot: Some(s) } = buf.role {
                slot_bytes[s] = slot_bytes[s].max(elements[b] * 4);
            }
        }
        for (b, n) in elements.iter().enumerate() {
            self.gpu.check_size(&place(b), n * 4)?;
        }
        let slots: Vec<std::sync::Arc<wgpu::Buffer>> =
            slot_bytes.iter().map(|&n| std::sync::Arc::new(self.gpu.storage(n))).collect();
        let own: Vec<Option<std::sync::Arc<wgpu::Buffer>>> = p
            .buffers
            .iter()
            .enumerate()
            .map(|(b, buf)| match (&buf.role, self.fixed.get(&b)) {
                (Role::Alias { .. }, _) => None,
                (Role::Input { name }, _) if resident.contains_key(name) => Some(resident[name].buffer.clone()),
                (Role::Intermediate { slot: Some(s) }, _) => Some(slots[*s].clone()),
                (_, Some((fixed, _))) => Some(std::sync::Arc::new(fixed.clone())),
                _ => Some(std::sync::Arc::new(self.gpu.storage(elements[b].max(1) * 4))),
            })
            .collect();
        let buffers: Vec<std::sync::Arc<wgpu::Buffer>> = p
            .buffers
            .iter()
            .enumerate()
            .map(|(b, buf)| {
                let of = if let Role::Alias { of } = buf.role { of } else { b };
                own[of].clone().ok_or_else(|| WgpuError::Device {
                    place: place(b),
                    message: format!("an alias of buffer {of}, itself an alias"),
                })
            })
            .collect::<Result<_, _>>()?;
        let mut words = vec![0u32; p.dims.len().div_ceil(4).max(1) * 4];
        for (i, d) in p.dims.iter().enumerate() {
            words[i] = u32::try_from(binding.get(d).copied().unwrap_or(0)).map_err(|_| WgpuError::Limit {
                limit: "u32 index range",
                needed: binding[d] as u64,
                allowed: u64::from(u32::MAX),
                place: format!("symbol {d}"),
            })?;
        }
        let dims = self.gpu.uniform(&words);
        let max_x = self.gpu.device.limits().max_compute_workgroups_per_dimension;
        let mut groups = Vec::with_capacity(p.kernels.len());
        let mut workgroups = Vec::with_capacity(p.kernels.len());
        for (k, kernel) in p.kernels.iter().enumerate() {
            let n = kernel
                .workgroups
                .eval(&binding)
                .map_err(|message| WgpuError::Device { place: format!("kernel {}", kernel.name), message })?;
            let x = n.min(u64::from(max_x));
            let y = if x == 0 { 0 } else { n.div_ceil(x) };
            if y > u64::from(max_x) {
                return Err(WgpuError::Limit {
                    limit: "max_compute_workgroups_per_dimension",
                    needed: y,
                    allowed: u64::from(max_x),
                    place: format!("kernel {} ({} workgroups)", kernel.name, n),
                });
            }
            workgroups.push((x as u32, y as u32));
            let mut entries = vec![wgpu::BindGroupEntry { binding: 0, resource: dims.as_entire_binding() }];
            for bnd in &kernel.bindings {
                let buffer = &buffers[bnd.buffer];
                // A range (a status word, a piece of a buffer too large for one binding) or
                // the whole buffer.
                let at = format!("kernel {} binding {} ({})", kernel.name, bnd.binding, place(bnd.buffer));
                let offset = bnd.offset.unwrap_or(0);
                let size = bnd.size.unwrap_or_else(|| buffer.size().saturating_sub(offset));
                let align = u64::from(self.gpu.device.limits().min_storage_buffer_offset_alignment);
                if size == 0 || offset % align != 0 || offset.checked_add(size).is_none_or(|end| end > buffer.size()) {
                    return Err(WgpuError::Device {
                        place: at,
                        message: format!(
                            "binds {size} bytes at offset {offset} of a {}-byte buffer (a range must lie inside it and start at a multiple of {align})",
                            buffer.size()
                        ),
                    });
                }
                self.gpu.check_binding(&at, size)?;
                let resource = match (bnd.offset, bnd.size) {
                    (None, None) => buffer.as_entire_binding(),
                    (offset, size) => wgpu::BindingResource::Buffer(wgpu::BufferBinding {
                        buffer,
                        offset: offset.unwrap_or(0),
                        size: size.and_then(std::num::NonZeroU64::new),
                    }),
                };
                entries.push(wgpu::BindGroupEntry { binding: bnd.binding, resource });
            }
            groups.push(self.gpu.device.create_bind_group(&wgpu::BindGroupDescriptor {
                label: Some(&kernel.name),
                layout: &self.pipelines[k].1,
                entries: &entries,
            }));
        }
        let bound = Bound { binding, resident: resident_ids, buffers, groups, workgroups, elements };
        self.dispatch(&bound, Phase::Init)?;
        Ok(bound)
    }

    /// Dispatch the kernels of one phase in one compute pass, then check the status word.
    fn dispatch(&self, bound: &Bound, phase: Phase) -> Result<(), WgpuError> {
        let p = &self.program;
        let status = p.buffers.iter().position(|b| b.role == Role::Status);
        let scope = self.gpu.device.push_error_scope(wgpu::ErrorFilter::Validation);
        let mut encoder = self.gpu.device.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: None });
        if let Some(s) = status {
            // Zeroed on the device: no host buffer of the status words' size per dispatch.
            encoder.clear_buffer(&bound.buffers[s], 0, None);
        }
        {
            let mut pass =
                encoder.begin_compute_pass(&wgpu::ComputePassDescriptor { label: None, timestamp_writes: None });
            for (k, kernel) in p.kernels.iter().enumerate() {
                let (x, y) = bound.workgroups[k];
                if kernel.phase != phase || x == 0 {
                    continue;
                }
                pass.set_pipeline(&self.pipelines[k].0);
                pass.set_bind_group(0, &bound.groups[k], &[]);
                pass.dispatch_workgroups(x, y, 1);
            }
        }
        self.gpu.queue.submit([encoder.finish()]);
        if let Some(e) = pollster::block_on(scope.pop()) {
            return Err(WgpuError::Device { place: format!("the {phase:?} dispatches"), message: e.to_string() });
        }
        if let Some(s) = status {
            let words = self.read(bound, &[s])?.remove(0);
            let failed = |k: &&rustral_lowering::wgsl::WgslKernel| {
                k.bindings.iter().any(|b| {
                    b.buffer == s && b.offset.is_some_and(|o| words.get(o as usize / 4).is_some_and(|&w| w != 0))
                })
            };
            // The first kernel in dispatch order whose word is set.
            if let Some(k) = p.kernels.iter().filter(|k| k.phase == phase).find(failed) {
                return Err(WgpuError::Kernel {
                    kernel: k.name.clone(),
                    op: k.op.clone(),
                    provenance: k.provenance.clone(),
                    message: k.failure.clone().unwrap_or_else(|| "a check failed (the kernel names no reason)".into()),
                });
            }
            if words.iter().any(|&w| w != 0) {
                return Err(WgpuError::Device {
                    place: format!("the {phase:?} dispatches"),
                    message: "a status word is set that no kernel of this phase owns (a program written for another format version?)".into(),
                });
            }
        }
        Ok(())
    }

    /// Copy buffers back to the host.
    fn read(&self, bound: &Bound, which: &[usize]) -> Result<Vec<Vec<u32>>, WgpuError> {
        let sizes: Vec<u64> = which.iter().map(|&b| bound.elements[b] * 4).collect();
        self.gpu.read(which.iter().map(|&b| &*bound.buffers[b]).zip(sizes).collect())
    }
}

/// Bind the symbolic dims from the inputs and the bound parameters.
fn bind_dims(
    p: &WgslProgram,
    inputs: &HashMap<String, HostTensor>,
    resident: &HashMap<String, DeviceTensor>,
    fixed: &HashMap<usize, (wgpu::Buffer, Vec<usize>)>,
) -> Result<BTreeMap<String, usize>, EvalError> {
    let mut binding = BTreeMap::new();
    for (b, buf) in p.buffers.iter().enumerate() {
        let ty = || rustral_ir::TensorType::new(buf.dtype, buf.shape.clone());
        match &buf.role {
            Role::Input { name } if resident.contains_key(name) => {
                let t = &resident[name];
                crate::feeds::check(name, &ty(), t.dtype, &t.shape, &mut binding)?;
            }
            Role::Input { name } => {
                let v = inputs.get(name).ok_or_else(|| EvalError::MissingFeed { kind: "input", name: name.clone() })?;
                crate::feeds::check(name, &ty(), v.dtype, v.shape(), &mut binding)?;
            }
            Role::Param { name } => {
                let (_, shape) =
                    fixed.get(&b).ok_or_else(|| EvalError::MissingFeed { kind: "param", name: name.clone() })?;
                crate::feeds::bind_dims(name, &buf.shape, shape, &mut binding)?;
            }
            _ => {}
        }
    }
    let known: Vec<&str> = p
        .buffers
        .iter()
        .filter_map(|b| match &b.role {
            Role::Input { name } => Some(name.as_str()),
            _ => None,
        })
        .collect();
    for name in inputs.keys().chain(resident.keys()) {
        if !known.contains(&name.as_str()) {
            return Err(EvalError::UnknownFeed { name: name.clone(), known: known.join(", ") });
        }
    }
    for d in &p.dims {
        if !binding.contains_key(d) {
            let sym = rustral_ir::Dim::Sym(d.clone());
            let b = p.buffers.iter().position(|b| b.shape.contains(&sym)).unwrap_or(0);
            let user = p.kernels.iter().find(|k| k.bindings.iter().any(|x| x.buffer == b && x.name == "out"));
            let place = crate::reference::Place {
                node: b,
                op: user.map_or_else(|| "buffer".into(), |k| k.op.clone()),
                provenance: p.buffers.get(b).map_or_else(String::new, |x| x.provenance.clone()),
            };
            return Err(EvalError::UnboundSymbol { place, sym: d.clone() });
        }
    }
    Ok(binding)
}

fn concrete_dim(d: &rustral_ir::Dim, binding: &BTreeMap<String, usize>) -> usize {
    match d {
        rustral_ir::Dim::Static(n) => *n,
        rustral_ir::Dim::Sym(s) => binding[s],
    }
}

/// Host values of `name` as storage words (ints as i32 bits, bools as 0/1, bytes four to a
/// word). An integer beyond i32 is an error: wrapped, index 2^32 + 1 would read row 1.
fn words(storage: Storage, values: &[f64], name: &str) -> Result<Vec<u32>, WgpuError> {
    let int = |(i, &v): (usize, &f64)| {
        if (-2147483648.0..=2147483647.0).contains(&v) {
            Ok(v as i32 as u32)
        } else {
            let message = format!("value {i} is {v}, beyond i32, the integers WebGPU storage holds");
            Err(WgpuError::Value { name: name.to_string(), message })
        }
    };
    Ok(match storage {
        Storage::F32 => values.iter().map(|&v| (v as f32).to_bits()).collect(),
        Storage::I32 => values.iter().enumerate().map(int).collect::<Result<_, _>>()?,
        Storage::U32 => values.iter().map(|&v| u32::from(v != 0.0)).collect(),
        Storage::Bytes => values
            .chunks(4)
            .map(|c| c.iter().enumerate().fold(0u32, |w, (j, &v)| w | (u32::from(v as u8) << (8 * j))))
            .collect(),
    })
}

/// The first `elements` values held by storage words.
fn values(storage: Storage, words: &[u32], elements: usize) -> Vec<f64> {
    match storage {
        Storage::F32 => words.iter().map(|&w| f64::from(f32::from_bits(w))).collect(),
        Storage::I32 => words.iter().map(|&w| f64::from(w as i32)).collect(),
        Storage::U32 => words.iter().map(|&w| f64::from(w)).collect(),
        Storage::Bytes => words.iter().flat_map(|w| w.to_le_bytes()).take(elements).map(f64::from).collect(),
    }
}
