//! The session API: compile a traced graph for a target, bind parameters once, run with named
//! inputs. `OptLevel::O0` is the op-by-op mode (every node its own kernel, no fusion), the
//! baseline fusion is measured against.

use crate::Result;
use rustral_frontend::ParamStore;
use rustral_ir::Graph;
use rustral_lowering::Program;
use rustral_lowering::lower;
use rustral_passes::{CompileStats, OptLevel, PassManager};
use rustral_runtime::HostTensor;
use rustral_runtime::cpu::{CpuProgram, Elementwise, KernelTime, Outputs, Storage};
use std::collections::HashMap;

/// Where a program runs. Model code never names one; choosing it is this one argument.
#[derive(Clone, Debug)]
pub enum Target {
    /// The reference interpreter (f64, slow, the oracle).
    Reference,
    /// The CPU target.
    Cpu,
    /// candle-core calls on a candle device (`Device::Cpu`; CUDA and Metal with the `cuda`
    /// and `metal` features).
    #[cfg(feature = "candle")]
    Candle(rustral_runtime::candle::Device),
    /// WGSL compute shaders run by wgpu on the default WebGPU adapter (`WGPU_ADAPTER_NAME`
    /// and `WGPU_BACKEND` choose another; Mesa's software Vulkan driver where there is no GPU).
    #[cfg(feature = "wgsl")]
    Wgsl,
}

/// The compiled program of whichever target.
enum Backend {
    Reference,
    Cpu(CpuProgram),
    #[cfg(feature = "candle")]
    Candle(rustral_runtime::candle::CandleProgram),
    #[cfg(feature = "wgsl")]
    Wgsl(Box<rustral_runtime::wgpu::WgpuProgram>, Program),
}

/// How to compile.
#[derive(Clone, Debug)]
pub struct CompileOptions {
    /// Pass pipeline.
    pub level: OptLevel,
    /// Passes switched off by name.
    pub disabled: Vec<String>,
    /// Threads for CPU targets.
    pub threads: usize,
    /// How the CPU target runs fused elementwise kernels (Cranelift JIT by default).
    pub elementwise: Elementwise,
    /// Keep the IR text after every pass (see `Session::dumps`).
    pub dump_each: bool,
}

impl Default for CompileOptions {
    fn default() -> CompileOptions {
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
        CompileOptions {
            level: OptLevel::O2,
            disabled: vec![],
            threads,
            elementwise: Elementwise::Jit,
            dump_each: false,
        }
    }
}

/// A compiled graph with its parameters bound.
pub struct Session {
    graph: Graph,
    stats: CompileStats,
    backend: Backend,
    params: HashMap<String, HostTensor>,
    dumps: Vec<(&'static str, String)>,
}

impl Session {
    /// Optimise `graph` with `options` and prepare it for `target`.
    pub fn compile(graph: &Graph, target: Target, options: &CompileOptions) -> Result<Session> {
        let mut pm = PassManager::new(options.level);
        for name in &options.disabled {
            pm = pm.disable(name)?;
        }
        let mut g = graph.clone();
        let compiled = pm.dump_each(options.dump_each).run(&mut g)?;
        let backend = match target {
            Target::Cpu => {
                let mut program = CpuProgram::new(lower(&g)?, options.threads)?;
                program.set_elementwise(options.elementwise);
                Backend::Cpu(program)
            }
            Target::Reference => Backend::Reference,
            #[cfg(feature = "candle")]
            Target::Candle(device) => Backend::Candle(rustral_runtime::candle::CandleProgram::new(lower(&g)?, device)),
            #[cfg(feature = "wgsl")]
            Target::Wgsl => {
                let program = lower(&g)?;
                let wgsl = rustral_lowering::wgsl::lower_wgsl(&program, g.name())?;
                Backend::Wgsl(Box::new(rustral_runtime::wgpu::WgpuProgram::new(wgsl)?), program)
            }
        };
        Ok(Session { graph: g, stats: compiled.stats, backend, params: HashMap::new(), dumps: compiled.dumps })
    }

    /// `(pass, IR text)` after each pass that ran, when compiled with `dump_each`.
    pub fn dumps(&self) -> &[(&'static str, String)] {
        &self.dumps
    }

    /// The lowered program (not on the reference target).
    pub fn program(&self) -> Option<&Program> {
        match &self.backend {
            Backend::Cpu(c) => Some(c.program()),
            #[cfg(feature = "candle")]
            Backend::Candle(c) => Some(c.program()),
            #[cfg(feature = "wgsl")]
            Backend::Wgsl(_, p) => Some(p),
            Backend::Reference => None,
        }
    }

    /// On the Candle target: op counts by how they lowered (`native`: candle's own kernels,
    /// `decomposed`: several candle calls, `host`: the reference on the host).
    #[cfg(feature = "candle")]
    pub fn candle_report(
        &self,
    ) -> Option<std::collections::BTreeMap<&'static str, std::collections::BTreeMap<String, usize>>> {
        match &self.backend {
            Backend::Candle(c) => Some(c.report()),
            _ => None,
        }
    }

    /// On the WGSL target: the program with its shaders, and the adapter's description.
    #[cfg(feature = "wgsl")]
    pub fn wgsl(&self) -> Option<(&rustral_lowering::wgsl::WgslProgram, String)> {
        match &self.backend {
            Backend::Wgsl(w, _) => Some((w.program(), w.adapter())),
            _ => None,
        }
    }

    /// On the WGSL target: write the program folder (`program.json`, one `.wgsl` per kernel,
    /// `params.safetensors` with the bound parameters) that any WebGPU host can run.
    #[cfg(feature = "wgsl")]
    pub fn save_wgsl(&self, dir: &std::path::Path) -> Result<()> {
        match &self.backend {
            Backend::Wgsl(w, _) => Ok(rustral_runtime::wgpu::save(dir, w.program(), &self.params)?),
            _ => Err(crate::Error::Usage("save_wgsl needs a session compiled for Target::Wgsl".into())),
        }
    }

    /// Kernels dispatched per run on the lowered targets (those reading only parameters and
    /// constants run once when they are bound, on the Candle and WGSL targets).
    pub fn dispatches(&self) -> Option<usize> {
        match &self.backend {
            Backend::Cpu(c) => Some(c.dispatches()),
            #[cfg(feature = "candle")]
            Backend::Candle(c) => Some(c.dispatches()),
            #[cfg(feature = "wgsl")]
            Backend::Wgsl(w, _) => Some(w.dispatches()),
            Backend::Reference => None,
        }
    }

    /// The optimised graph.
    pub fn graph(&self) -> &Graph {
        &self.graph
    }

    /// What the passes did.
    pub fn stats(&self) -> &CompileStats {
        &self.stats
    }

    /// Bind parameter values (checked against their declarations).
    pub fn bind(&mut self, store: &ParamStore) -> Result<()> {
        let mut params = HashMap::new();
        for (name, v) in store.iter() {
            let t = HostTensor::new(v.dtype, &v.shape, v.data.clone())
                .map_err(|e| rustral_frontend::Error::Param { name: name.clone(), message: e.to_string() })?;
            params.insert(name.clone(), t);
        }
        match &mut self.backend {
            Backend::Cpu(cpu) => cpu.bind_params(&params)?,
            #[cfg(feature = "candle")]
            Backend::Candle(c) => c.bind_params(&params)?,
            #[cfg(feature = "wgsl")]
            Backend::Wgsl(w, _) => w.bind_params(&params)?,
            Backend::Reference => {}
        }
        self.params = params;
        Ok(())
    }

    /// Change the bound parameters in place where the target allows it (the CPU target):
    /// `f` gets each parameter's name and f32 values. Returns false, changing nothing, on other
    /// targets (bind the new values instead).
    pub fn update_params(&mut self, f: impl FnMut(&str, &mut [f32])) -> Result<bool> {
        match &mut self.backend {
            Backend::Cpu(cpu) => Ok(cpu.update_params(f)?),
            _ => Ok(false),
        }
    }

    /// On the WGSL target: run, read back only output `loss`, and update each `(parameter,
    /// gradient output)` pair on the device (parameters and optimizer state never leave it).
    /// None on other targets.
    #[cfg(feature = "wgsl")]
    pub fn step_on_device(
        &mut self,
        inputs: &[(&str, HostTensor)],
        loss: &str,
        pairs: &[(String, String)],
        update: rustral_runtime::wgpu::DeviceUpdate,
    ) -> Result<Option<f64>> {
        let Backend::Wgsl(w, _) = &self.backend else { return Ok(None) };
        let inputs: HashMap<String, HostTensor> = inputs.iter().map(|(n, t)| (n.to_string(), t.clone())).collect();
        let out = w.run_only(&inputs, &[loss])?;
        w.update_on_device(pairs, update)?;
        Ok(Some(out.first().map_or(f64::NAN, |(_, t)| t.to_vec()[0])))
    }

    /// On the WGSL target: the named parameters' current values on the device.
    #[cfg(feature = "wgsl")]
    pub fn device_params(&self, names: &[String]) -> Result<Option<Vec<Vec<f32>>>> {
        match &self.backend {
            Backend::Wgsl(w, _) => Ok(Some(w.read_params(names)?)),
            _ => Ok(None),
        }
    }

    /// On the WGSL target: the optimizer moments of the named parameters on the device.
    #[cfg(feature = "wgsl")]
    pub fn device_moments(&self, names: &[String]) -> Result<Option<Vec<rustral_runtime::wgpu::Moments>>> {
        match &self.backend {
            Backend::Wgsl(w, _) => Ok(Some(w.read_moments(names)?)),
            _ => Ok(None),
        }
    }

    /// On the WGSL target: set a parameter's optimizer moments on the device (false elsewhere).
    #[cfg(feature = "wgsl")]
    pub fn set_device_moments(&self, name: &str, m: &[f32], v: &[f32]) -> Result<bool> {
        match &self.backend {
            Backend::Wgsl(w, _) => {
                w.write_moments(name, m, v)?;
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    /// Run on named inputs; outputs in order.
    pub fn run(&self, inputs: &[(&str, HostTensor)]) -> Result<Vec<(String, HostTensor)>> {
        let inputs: HashMap<String, HostTensor> = inputs.iter().map(|(n, t)| (n.to_string(), t.clone())).collect();
        match &self.backend {
            Backend::Cpu(cpu) => Ok(cpu.run(&inputs)?),
            #[cfg(feature = "candle")]
            Backend::Candle(c) => Ok(c.run(&inputs)?),
            #[cfg(feature = "wgsl")]
            Backend::Wgsl(w, _) => Ok(w.run(&inputs)?),
            Backend::Reference => {
                let mut feeds = self.params.clone();
                feeds.extend(inputs);
                Ok(rustral_runtime::reference::evaluate(&self.graph, &feeds)?)
            }
        }
    }

    /// Run `1 + repeat` times (one warm-up run, then `repeat` timed runs) and return the last
    /// outputs with the timed runs' wall times. On the CPU target inputs are converted once,
    /// outside the timing; elsewhere each time is a whole run, uploads and downloads included.
    pub fn run_timed(
        &self,
        inputs: &[(&str, HostTensor)],
        repeat: usize,
    ) -> Result<(Outputs, Vec<std::time::Duration>)> {
        let mut times = Vec::with_capacity(repeat);
        match &self.backend {
            Backend::Cpu(cpu) => {
                let storage: HashMap<String, Storage> =
                    inputs.iter().map(|(n, t)| (n.to_string(), Storage::from_host(t.clone()))).collect();
                let mut out = cpu.run_storage(&storage)?;
                for _ in 0..repeat {
                    let start = std::time::Instant::now();
                    out = cpu.run_storage(&storage)?;
                    times.push(start.elapsed());
                }
                Ok((out.into_iter().map(|(n, s)| (n, s.to_host())).collect(), times))
            }
            _ => {
                let mut out = self.run(inputs)?;
                for _ in 0..repeat {
                    let start = std::time::Instant::now();
                    out = self.run(inputs)?;
                    times.push(start.elapsed());
                }
                Ok((out, times))
            }
        }
    }

    /// Run on the CPU target and time every kernel (None on the reference target).
    pub fn profile(&self, inputs: &[(&str, HostTensor)]) -> Result<Option<Vec<KernelTime>>> {
        let Backend::Cpu(cpu) = &self.backend else { return Ok(None) };
        let inputs: HashMap<String, HostTensor> = inputs.iter().map(|(n, t)| (n.to_string(), t.clone())).collect();
        Ok(Some(cpu.run_profiled(&inputs)?.1))
    }
}
