//! Optimizer steps on the device: parameters and optimizer state stay in device buffers between
//! training steps, and only the loss comes back to the host. One WGSL kernel updates a
//! parameter from its gradient buffer (SGD with momentum, Adam, AdamW), in f32; the kernels
//! that read only parameters (weight transposes) then run again.

use super::{Bound, WgpuError, WgpuProgram};
use rustral_lowering::wgsl::{Phase, Role};
use std::collections::HashMap;
use wgpu::util::DeviceExt;

/// The update rule and its hyperparameters for one step (the learning rate already scaled by
/// the schedule; `c1`, `c2` Adam's bias corrections for this step).
#[derive(Clone, Copy, Debug)]
pub enum DeviceUpdate {
    /// `m = momentum m + g + wd p; p -= lr m`.
    Sgd {
        /// Learning rate.
        lr: f32,
        /// Momentum.
        momentum: f32,
        /// L2 weight decay.
        weight_decay: f32,
    },
    /// Adam (`decoupled`: AdamW).
    Adam {
        /// Learning rate.
        lr: f32,
        /// First-moment decay.
        beta1: f32,
        /// Second-moment decay.
        beta2: f32,
        /// Added to the root of the second moment.
        eps: f32,
        /// Weight decay (L2, or decoupled).
        weight_decay: f32,
        /// 1 - beta1^t.
        c1: f32,
        /// 1 - beta2^t.
        c2: f32,
        /// AdamW's decoupled decay.
        decoupled: bool,
    },
}

const SHADER: &str = "// Rustral optimizer step: one invocation per parameter element.
struct Hyper {
    n: u32,
    kind: u32,
    decoupled: u32,
    pad: u32,
    lr: f32,
    beta1: f32,
    beta2: f32,
    eps: f32,
    weight_decay: f32,
    c1: f32,
    c2: f32,
    momentum: f32,
}

@group(0) @binding(0) var<uniform> h: Hyper;
@group(0) @binding(1) var<storage, read_write> p: array<f32>;
@group(0) @binding(2) var<storage, read> g: array<f32>;
@group(0) @binding(3) var<storage, read_write> m: array<f32>;
@group(0) @binding(4) var<storage, read_write> v: array<f32>;

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) id: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = id.x + id.y * nwg.x * 256u;
    if (i >= h.n) { return; }
    var x = p[i];
    if (h.kind == 0u) {
        let gi = g[i] + h.weight_decay * x;
        m[i] = h.momentum * m[i] + gi;
        x = x - h.lr * m[i];
    } else {
        var gi = g[i];
        if (h.decoupled == 1u) {
            x = x - h.lr * h.weight_decay * x;
        } else {
            gi = gi + h.weight_decay * x;
        }
        m[i] = h.beta1 * m[i] + (1.0 - h.beta1) * gi;
        v[i] = h.beta2 * v[i] + (1.0 - h.beta2) * gi * gi;
        x = x - h.lr * (m[i] / h.c1) / (sqrt(v[i] / h.c2) + h.eps);
    }
    p[i] = x;
}
";

/// A parameter's optimizer moments (first, second), as read back from the device.
pub type Moments = (Vec<f32>, Vec<f32>);

/// The optimizer's pipeline and its state buffers by parameter name.
pub(super) struct State {
    pipeline: wgpu::ComputePipeline,
    layout: wgpu::BindGroupLayout,
    moments: HashMap<String, (wgpu::Buffer, wgpu::Buffer)>,
}

impl WgpuProgram {
    /// Update every `(parameter, gradient output)` pair on the device from the gradients the
    /// last run left in their buffers, then run the kernels that read only parameters again.
    pub fn update_on_device(&self, pairs: &[(String, String)], update: DeviceUpdate) -> Result<(), WgpuError> {
        let guard = self.bound.lock().expect("no run panicked holding the lock");
        let bound = guard.as_ref().ok_or_else(|| WgpuError::Device {
            place: "the optimizer step".into(),
            message: "no run has left gradients yet".into(),
        })?;
        let mut state = self.optimizer.lock().expect("no step panicked holding the lock");
        let state = match &mut *state {
            Some(s) => s,
            None => state.insert(self.optimizer_state()?),
        };
        let (kind, decoupled, hyper) = match update {
            DeviceUpdate::Sgd { lr, momentum, weight_decay } => {
                (0u32, 0u32, [lr, 0.0, 0.0, 0.0, weight_decay, 1.0, 1.0, momentum])
            }
            DeviceUpdate::Adam { lr, beta1, beta2, eps, weight_decay, c1, c2, decoupled } => {
                (1, u32::from(decoupled), [lr, beta1, beta2, eps, weight_decay, c1, c2, 0.0])
            }
        };
        let max_x = self.gpu.device.limits().max_compute_workgroups_per_dimension;
        let scope = self.gpu.device.push_error_scope(wgpu::ErrorFilter::Validation);
        let mut encoder = self.gpu.device.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: None });
        let mut keep = Vec::new();
        for (param, grad) in pairs {
            let (p, g) = (self.buffer_of_param(param)?, self.buffer_of_output(grad)?);
            let n = bound.elements[p];
            let (m, v) = state.moments.entry(param.clone()).or_insert_with(|| {
                let zeros = vec![0u32; n.max(1) as usize];
                (self.gpu.upload(&zeros), self.gpu.upload(&zeros))
            });
            let mut words: Vec<u32> = vec![n as u32, kind, decoupled, 0];
            words.extend(hyper.iter().map(|x| x.to_bits()));
            let uniform = self.gpu.device.create_buffer_init(&wgpu::util::BufferInitDescriptor {
                label: Some("optimizer"),
                contents: bytemuck::cast_slice(&words),
                usage: wgpu::BufferUsages::UNIFORM,
            });
            let entries = [
                wgpu::BindGroupEntry { binding: 0, resource: uniform.as_entire_binding() },
                wgpu::BindGroupEntry { binding: 1, resource: bound.buffers[p].as_entire_binding() },
                wgpu::BindGroupEntry { binding: 2, resource: bound.buffers[g].as_entire_binding() },
                wgpu::BindGroupEntry { binding: 3, resource: m.as_entire_binding() },
                wgpu::BindGroupEntry { binding: 4, resource: v.as_entire_binding() },
            ];
            let group = self.gpu.device.create_bind_group(&wgpu::BindGroupDescriptor {
                label: Some(param),
                layout: &state.layout,
                entries: &entries,
            });
            let workgroups = n.div_ceil(256);
            let x = workgroups.min(u64::from(max_x)) as u32;
            let y = if x == 0 { 0 } else { workgroups.div_ceil(u64::from(x)) as u32 };
            if x > 0 {
                let mut pass =
                    encoder.begin_compute_pass(&wgpu::ComputePassDescriptor { label: None, timestamp_writes: None });
                pass.set_pipeline(&state.pipeline);
                pass.set_bind_group(0, &group, &[]);
                pass.dispatch_workgroups(x, y, 1);
            }
            keep.push((uniform, group));
        }
        self.gpu.queue.submit([encoder.finish()]);
        if let Some(e) = pollster::block_on(scope.pop()) {
            return Err(WgpuError::Device { place: "the optimizer step".into(), message: e.to_string() });
        }
        drop(keep);
        self.dispatch(bound, Phase::Init)
    }

    /// Read parameters back from the device (after steps on the device).
    pub fn read_params(&self, names: &[String]) -> Result<Vec<Vec<f32>>, WgpuError> {
        let guard = self.bound.lock().expect("no run panicked holding the lock");
        let bound: &Bound = guard.as_ref().ok_or_else(|| WgpuError::Device {
            place: "reading parameters".into(),
            message: "the program has not run".into(),
        })?;
        let ids: Vec<usize> = names.iter().map(|n| self.buffer_of_param(n)).collect::<Result<_, _>>()?;
        let words = self.read(bound, &ids)?;
        Ok(words.into_iter().map(|w| w.into_iter().map(f32::from_bits).collect()).collect())
    }

    /// The optimizer's moments of each named parameter (zeros before its first step).
    pub fn read_moments(&self, names: &[String]) -> Result<Vec<Moments>, WgpuError> {
        let state = self.optimizer.lock().expect("no step panicked holding the lock");
        let mut out = Vec::with_capacity(names.len());
        for name in names {
            let n = self.param_elements(name)?;
            let moments = state.as_ref().and_then(|s| s.moments.get(name));
            out.push(match moments {
                Some((m, v)) => {
                    let mut w = self.gpu.read(vec![(m, n * 4), (v, n * 4)])?.into_iter();
                    let mut next =
                        || w.next().unwrap_or_default().into_iter().map(f32::from_bits).collect::<Vec<f32>>();
                    (next(), next())
                }
                None => (vec![0.0; n as usize], vec![0.0; n as usize]),
            });
        }
        Ok(out)
    }

    /// Set a parameter's optimizer moments (resuming from a checkpoint).
    pub fn write_moments(&self, name: &str, m: &[f32], v: &[f32]) -> Result<(), WgpuError> {
        let mut state = self.optimizer.lock().expect("no step panicked holding the lock");
        let state = match &mut *state {
            Some(s) => s,
            None => state.insert(self.optimizer_state()?),
        };
        let bits = |x: &[f32]| x.iter().map(|f| f.to_bits()).collect::<Vec<u32>>();
        state.moments.insert(name.to_string(), (self.gpu.upload(&bits(m)), self.gpu.upload(&bits(v))));
        Ok(())
    }

    /// A bound parameter's element count.
    fn param_elements(&self, name: &str) -> Result<u64, WgpuError> {
        let b = self.buffer_of_param(name)?;
        Ok(self.fixed.get(&b).map_or(0, |(_, shape)| shape.iter().product::<usize>() as u64))
    }

    fn buffer_of_param(&self, name: &str) -> Result<usize, WgpuError> {
        self.program.buffers.iter().position(|b| matches!(&b.role, Role::Param { name: n } if n == name)).ok_or_else(
            || WgpuError::Device { place: format!("parameter {name:?}"), message: "not in the program".into() },
        )
    }

    fn buffer_of_output(&self, name: &str) -> Result<usize, WgpuError> {
        self.program.outputs.iter().find(|o| o.name == name).map(|o| o.buffer).ok_or_else(|| WgpuError::Device {
            place: format!("output {name:?}"),
            message: "not in the program".into(),
        })
    }

    fn optimizer_state(&self) -> Result<State, WgpuError> {
        let scope = self.gpu.device.push_error_scope(wgpu::ErrorFilter::Validation);
        let module = self.gpu.device.create_shader_module(wgpu::ShaderModuleDescriptor {
            label: Some("optimizer"),
            source: wgpu::ShaderSource::Wgsl(SHADER.into()),
        });
        let entry = |binding: u32, ty: wgpu::BufferBindingType| wgpu::BindGroupLayoutEntry {
            binding,
            visibility: wgpu::ShaderStages::COMPUTE,
            ty: wgpu::BindingType::Buffer { ty, has_dynamic_offset: false, min_binding_size: None },
            count: None,
        };
        let storage = |read_only| wgpu::BufferBindingType::Storage { read_only };
        let entries = [
            entry(0, wgpu::BufferBindingType::Uniform),
            entry(1, storage(false)),
            entry(2, storage(true)),
            entry(3, storage(false)),
            entry(4, storage(false)),
        ];
        let layout = self
            .gpu
            .device
            .create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor { label: Some("optimizer"), entries: &entries });
        let pipeline_layout = self.gpu.device.create_pipeline_layout(&wgpu::PipelineLayoutDescriptor {
            label: Some("optimizer"),
            bind_group_layouts: &[Some(&layout)],
            immediate_size: 0,
        });
        let pipeline = self.gpu.device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
            label: Some("optimizer"),
            layout: Some(&pipeline_layout),
            module: &module,
            entry_point: Some("main"),
            compilation_options: Default::default(),
            cache: None,
        });
        if let Some(e) = pollster::block_on(scope.pop()) {
            return Err(WgpuError::Device { place: "the optimizer's pipeline".into(), message: e.to_string() });
        }
        Ok(State { pipeline, layout, moments: HashMap::new() })
    }
}
