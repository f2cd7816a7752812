//! The device: adapter choice, pipelines with explicit bind layouts, buffers, readback.

use super::WgpuError;
use rustral_lowering::wgsl::{Access, WgslKernel};
use std::collections::HashMap;
use wgpu::util::DeviceExt;

/// A compute pipeline and its bind group layout.
type Pipeline = (wgpu::ComputePipeline, wgpu::BindGroupLayout);

/// A wgpu device and queue with the adapter's own limits.
#[derive(Clone)]
pub struct Gpu {
    pub(crate) device: wgpu::Device,
    pub(crate) queue: wgpu::Queue,
    info: wgpu::AdapterInfo,
    /// Pipelines by shader text without its comments (and bindings): the layers of a model
    /// lower to kernels that differ only in the header naming their node, and a driver
    /// compiles each pipeline it is given (lavapipe takes up to seconds for one), so every
    /// program on this device shares one pipeline per distinct shader.
    pipelines: std::sync::Arc<std::sync::Mutex<HashMap<String, Pipeline>>>,
}

impl Gpu {
    /// The default adapter (`WGPU_ADAPTER_NAME`, `WGPU_BACKEND` and `WGPU_POWER_PREF` choose
    /// another), with every limit it offers.
    pub fn new() -> Result<Gpu, WgpuError> {
        let instance = wgpu::Instance::new(wgpu::InstanceDescriptor::new_without_display_handle_from_env());
        let adapter = pollster::block_on(wgpu::util::initialize_adapter_from_env_or_default(&instance, None))
            .map_err(|e| WgpuError::NoAdapter(e.to_string()))?;
        let (device, queue) = pollster::block_on(adapter.request_device(&wgpu::DeviceDescriptor {
            label: Some("rustral"),
            required_limits: adapter.limits(),
            ..Default::default()
        }))
        .map_err(|e| WgpuError::Device { place: "the device request".into(), message: e.to_string() })?;
        Ok(Gpu { device, queue, info: adapter.get_info(), pipelines: Default::default() })
    }

    /// This device's limits as a compile profile (`--webgpu-limits native`).
    pub fn profile(&self) -> rustral_lowering::wgsl::Profile {
        let l = self.device.limits();
        let limits = rustral_lowering::wgsl::Limits {
            max_storage_buffers_per_shader_stage: u64::from(l.max_storage_buffers_per_shader_stage),
            max_compute_invocations_per_workgroup: u64::from(l.max_compute_invocations_per_workgroup),
            max_compute_workgroup_size_x: u64::from(l.max_compute_workgroup_size_x),
            max_compute_workgroup_storage_size: u64::from(l.max_compute_workgroup_storage_size),
            max_storage_buffer_binding_size: l.max_storage_buffer_binding_size,
            max_buffer_size: l.max_buffer_size,
            max_compute_workgroups_per_dimension: u64::from(l.max_compute_workgroups_per_dimension),
            min_storage_buffer_offset_alignment: u64::from(l.min_storage_buffer_offset_alignment),
        };
        rustral_lowering::wgsl::Profile { name: format!("native ({})", self.describe()), limits }
    }

    /// The adapter's name, backend and device type.
    pub fn describe(&self) -> String {
        format!("{} ({:?}, {:?})", self.info.name, self.info.backend, self.info.device_type)
    }

    /// True when the adapter is a CPU (software) implementation such as lavapipe.
    pub fn is_software(&self) -> bool {
        self.info.device_type == wgpu::DeviceType::Cpu
    }

    /// A kernel's pipeline and its bind group layout (binding 0 the `dims` uniform, then the
    /// kernel's storage bindings), made once per distinct shader.
    pub(crate) fn pipeline(&self, k: &WgslKernel) -> Result<Pipeline, String> {
        let mut key: String = rustral_lowering::wgsl::code_lines(&k.source).collect::<Vec<_>>().join("\n");
        key.push_str(&format!("\n{} {:?}", k.entry, k.bindings.iter().map(|b| b.access).collect::<Vec<_>>()));
        let mut cache = self.pipelines.lock().expect("no pipeline creation panicked");
        if let Some(p) = cache.get(&key) {
            return Ok(p.clone());
        }
        let made = self.make_pipeline(k)?;
        cache.insert(key, made.clone());
        Ok(made)
    }

    /// Distinct pipelines made on this device so far.
    pub fn pipelines(&self) -> usize {
        self.pipelines.lock().expect("no pipeline creation panicked").len()
    }

    fn make_pipeline(&self, k: &WgslKernel) -> Result<Pipeline, String> {
        let scope = self.device.push_error_scope(wgpu::ErrorFilter::Validation);
        let module = self.device.create_shader_module(wgpu::ShaderModuleDescriptor {
            label: Some(&k.name),
            source: wgpu::ShaderSource::Wgsl(k.source.as_str().into()),
        });
        let entry = |binding: u32, ty: wgpu::BufferBindingType| wgpu::BindGroupLayoutEntry {
            binding,
            visibility: wgpu::ShaderStages::COMPUTE,
            ty: wgpu::BindingType::Buffer { ty, has_dynamic_offset: false, min_binding_size: None },
            count: None,
        };
        let mut entries = vec![entry(0, wgpu::BufferBindingType::Uniform)];
        for b in &k.bindings {
            let read_only = b.access == Access::Read;
            entries.push(entry(b.binding, wgpu::BufferBindingType::Storage { read_only }));
        }
        let layout = self
            .device
            .create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor { label: Some(&k.name), entries: &entries });
        let pipeline_layout = self.device.create_pipeline_layout(&wgpu::PipelineLayoutDescriptor {
            label: Some(&k.name),
            bind_group_layouts: &[Some(&layout)],
            immediate_size: 0,
        });
        let pipeline = self.device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
            label: Some(&k.name),
            layout: Some(&pipeline_layout),
            module: &module,
            entry_point: Some(&k.entry),
            compilation_options: Default::default(),
            cache: None,
        });
        match pollster::block_on(scope.pop()) {
            Some(e) => Err(e.to_string()),
            None => Ok((pipeline, layout)),
        }
    }

    /// Fail with the limit's name when a buffer of `bytes` cannot be made.
    pub(crate) fn check_size(&self, place: &str, bytes: u64) -> Result<(), WgpuError> {
        let allowed = self.device.limits().max_buffer_size;
        if bytes > allowed {
            return Err(WgpuError::Limit {
                limit: "max_buffer_size",
                needed: bytes,
                allowed,
                place: place.to_string(),
            });
        }
        Ok(())
    }

    /// Fail with the limit's name when one storage binding of `bytes` cannot be made (a
    /// program binds a buffer larger than that in ranges).
    pub(crate) fn check_binding(&self, place: &str, bytes: u64) -> Result<(), WgpuError> {
        let allowed = self.device.limits().max_storage_buffer_binding_size;
        if bytes > allowed {
            return Err(WgpuError::Limit {
                limit: "max_storage_buffer_binding_size",
                needed: bytes,
                allowed,
                place: place.to_string(),
            });
        }
        Ok(())
    }

    const USAGE: wgpu::BufferUsages =
        wgpu::BufferUsages::STORAGE.union(wgpu::BufferUsages::COPY_DST).union(wgpu::BufferUsages::COPY_SRC);

    /// A storage buffer holding `words`.
    pub(crate) fn upload(&self, words: &[u32]) -> wgpu::Buffer {
        let data: &[u32] = if words.is_empty() { &[0] } else { words };
        self.device.create_buffer_init(&wgpu::util::BufferInitDescriptor {
            label: None,
            contents: bytemuck::cast_slice(data),
            usage: Self::USAGE,
        })
    }

    /// An uninitialised storage buffer of `bytes` (at least 4).
    pub(crate) fn storage(&self, bytes: u64) -> wgpu::Buffer {
        self.device.create_buffer(&wgpu::BufferDescriptor {
            label: None,
            size: bytes.max(4),
            usage: Self::USAGE,
            mapped_at_creation: false,
        })
    }

    /// A uniform buffer holding `words`.
    pub(crate) fn uniform(&self, words: &[u32]) -> wgpu::Buffer {
        self.device.create_buffer_init(&wgpu::util::BufferInitDescriptor {
            label: Some("dims"),
            contents: bytemuck::cast_slice(words),
            usage: wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST,
        })
    }

    /// Copy the first `bytes` of each buffer back, in one submission.
    pub(crate) fn read(&self, buffers: Vec<(&wgpu::Buffer, u64)>) -> Result<Vec<Vec<u32>>, WgpuError> {
        let fail = |message: String| WgpuError::Device { place: "the readback".into(), message };
        let mut encoder = self.device.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: None });
        let staging: Vec<(wgpu::Buffer, u64)> = buffers
            .iter()
            .map(|&(b, bytes)| {
                let s = self.device.create_buffer(&wgpu::BufferDescriptor {
                    label: Some("readback"),
                    size: bytes.max(4),
                    usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
                    mapped_at_creation: false,
                });
                if bytes > 0 {
                    encoder.copy_buffer_to_buffer(b, 0, &s, 0, bytes);
                }
                (s, bytes)
            })
            .collect();
        self.queue.submit([encoder.finish()]);
        let (tx, rx) = std::sync::mpsc::channel();
        for (i, (s, _)) in staging.iter().enumerate() {
            let tx = tx.clone();
            s.map_async(wgpu::MapMode::Read, .., move |r| {
                let _ = tx.send((i, r));
            });
        }
        self.device.poll(wgpu::PollType::wait_indefinitely()).map_err(|e| fail(e.to_string()))?;
        for _ in 0..staging.len() {
            let (_, r) = rx.recv().map_err(|e| fail(e.to_string()))?;
            r.map_err(|e| fail(e.to_string()))?;
        }
        staging
            .iter()
            .map(|(s, bytes)| {
                let view = s.get_mapped_range(..).map_err(|e| fail(e.to_string()))?;
                let words: Vec<u32> = bytemuck::cast_slice(&view[..*bytes as usize]).to_vec();
                drop(view);
                s.unmap();
                Ok(words)
            })
            .collect()
    }
}
