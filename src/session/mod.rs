//! The session API: compile a traced graph for a target, bind parameters once, run with named
//! inputs. `OptLevel::O0` is the op-by-op mode (every node its own kernel, no fusion), the
//! baseline fusion is measured against.

mod runner;

use crate::Result;
use runner::Runner;
pub use runner::State;
use rustral_frontend::ParamStore;
use rustral_ir::Graph;
use rustral_lowering::Program;
use rustral_lowering::lower;
use rustral_passes::{CompileStats, OptLevel, PassManager};
use rustral_runtime::HostTensor;
use rustral_runtime::cpu::{CpuProgram, Elementwise, KernelTime, Outputs};
use rustral_runtime::exec::Share;
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
    /// Record what every fused node replaced (see `Session::contracts` and
    /// [`crate::check_kernels`]).
    pub contracts: bool,
    /// The WebGPU limits the WGSL target compiles for (WebGPU's defaults unless set: a
    /// program that fits them runs on every WebGPU host).
    #[cfg(feature = "wgsl")]
    pub webgpu_limits: rustral_lowering::wgsl::Profile,
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
            contracts: false,
            #[cfg(feature = "wgsl")]
            webgpu_limits: rustral_lowering::wgsl::Profile::default(),
        }
    }
}

/// A compiled graph with its parameters bound.
pub struct Session {
    graph: Graph,
    stats: CompileStats,
    runner: Box<dyn Runner>,
    params: HashMap<String, HostTensor>,
    dumps: Vec<(&'static str, String)>,
    contracts: std::collections::BTreeMap<rustral_ir::NodeId, rustral_passes::Contract>,
    /// `(output, input)` pairs a stateful run carries: `present.X` back into `past.X`.
    carry: Vec<(String, String)>,
    target: Target,
}

fn named(inputs: &[(&str, HostTensor)]) -> HashMap<String, HostTensor> {
    inputs.iter().map(|(n, t)| (n.to_string(), t.clone())).collect()
}

impl Session {
    /// Optimise `graph` with `options` and prepare it for `target`.
    pub fn compile(graph: &Graph, target: Target, options: &CompileOptions) -> Result<Session> {
        Session::compile_on(graph, target, options, None)
    }

    /// As [`Session::compile`] for the same target as `other`, on its device: a prefill and a
    /// decode program share their KV caches this way (on the WGSL target, one wgpu device).
    pub fn compile_beside(graph: &Graph, other: &Session, options: &CompileOptions) -> Result<Session> {
        Session::compile_on(graph, other.target.clone(), options, Some(other))
    }

    fn compile_on(
        graph: &Graph,
        target: Target,
        options: &CompileOptions,
        beside: Option<&Session>,
    ) -> Result<Session> {
        let _ = &beside;
        let mut pm = PassManager::new(options.level);
        for name in &options.disabled {
            pm = pm.disable(name)?;
        }
        let mut g = graph.clone();
        let compiled = pm.dump_each(options.dump_each).record_contracts(options.contracts).run(&mut g)?;
        let runner: Box<dyn Runner> = match target.clone() {
            Target::Cpu => {
                let mut program = CpuProgram::new(lower(&g)?, options.threads)?;
                program.set_elementwise(options.elementwise);
                Box::new(program)
            }
            Target::Reference => Box::new(runner::Reference { graph: g.clone(), params: HashMap::new() }),
            #[cfg(feature = "candle")]
            Target::Candle(device) => Box::new(rustral_runtime::candle::CandleProgram::new(lower(&g)?, device)),
            #[cfg(feature = "wgsl")]
            Target::Wgsl => {
                let program = lower(&g)?;
                let wgsl = rustral_lowering::wgsl::lower_wgsl_for(&program, g.name(), &options.webgpu_limits)?;
                let gpu = match beside.and_then(|s| s.runner.wgpu()) {
                    Some(w) => rustral_runtime::wgpu::WgpuProgram::with_gpu(wgsl, w.gpu().clone())?,
                    None => rustral_runtime::wgpu::WgpuProgram::new(wgsl)?,
                };
                Box::new(runner::Wgsl { gpu, program })
            }
        };
        let inputs: Vec<String> = g.inputs().into_iter().map(|(n, _)| n).collect();
        let carry = g
            .outputs()
            .iter()
            .filter_map(|o| {
                let rest = o.name.strip_prefix(rustral_frontend::PRESENT)?;
                let input = format!("{}{rest}", rustral_frontend::PAST);
                inputs.contains(&input).then(|| (o.name.clone(), input))
            })
            .collect();
        Ok(Session {
            graph: g,
            stats: compiled.stats,
            runner,
            params: HashMap::new(),
            dumps: compiled.dumps,
            contracts: compiled.contracts,
            carry,
            target,
        })
    }

    /// The target it was compiled for.
    pub fn target(&self) -> &Target {
        &self.target
    }

    /// Hold `values` (by input name, usually zero KV caches) on the target as run state for
    /// [`Session::run_state`]. Sessions of one target share state (compile the second with
    /// [`Session::compile_beside`]).
    pub fn new_state(&self, values: HashMap<String, HostTensor>) -> Result<State> {
        self.runner.new_state(values)
    }

    /// The `(output, input)` pairs a stateful run carries (`present.X` into `past.X`).
    pub fn carried(&self) -> &[(String, String)] {
        &self.carry
    }

    /// Run with `state` as the carried inputs (`past.*`): the outputs they pair with
    /// (`present.*`) become the new state, on the target, written in place, and only the
    /// outputs named in `read` come back to the host. A decode step reads back its logits alone.
    pub fn run_state(&self, inputs: &[(&str, HostTensor)], state: &mut State, read: &[&str]) -> Result<Outputs> {
        self.runner.run_state(&named(inputs), state, &self.carry, read)
    }

    /// Each fused node of the compiled graph with the primitives it replaced, when compiled
    /// with `contracts`.
    pub fn contracts(&self) -> &std::collections::BTreeMap<rustral_ir::NodeId, rustral_passes::Contract> {
        &self.contracts
    }

    /// `(pass, IR text)` after each pass that ran, when compiled with `dump_each`.
    pub fn dumps(&self) -> &[(&'static str, String)] {
        &self.dumps
    }

    /// The lowered program (not on the reference target).
    pub fn program(&self) -> Option<&Program> {
        self.runner.program()
    }

    /// On the Candle target: op counts by how they lowered (`native`: candle's own kernels,
    /// `decomposed`: several candle calls, `host`: the reference on the host).
    #[cfg(feature = "candle")]
    pub fn candle_report(
        &self,
    ) -> Option<std::collections::BTreeMap<&'static str, std::collections::BTreeMap<String, usize>>> {
        self.runner.candle().map(|c| c.report())
    }

    /// On the WGSL target: the program with its shaders, and the adapter's description.
    #[cfg(feature = "wgsl")]
    pub fn wgsl(&self) -> Option<(&rustral_lowering::wgsl::WgslProgram, String)> {
        self.runner.wgpu().map(|w| (w.program(), w.adapter()))
    }

    /// On the WGSL target: write the program folder (`program.json`, one `.wgsl` per kernel,
    /// `params.safetensors` with the bound parameters) that any WebGPU host can run.
    #[cfg(feature = "wgsl")]
    pub fn save_wgsl(&self, dir: &std::path::Path) -> Result<()> {
        match self.runner.wgpu() {
            Some(w) => Ok(rustral_runtime::wgpu::save(dir, w.program(), &self.params)?),
            None => Err(crate::Error::Usage("save_wgsl needs a session compiled for Target::Wgsl".into())),
        }
    }

    /// Kernels dispatched per run on the lowered targets (those reading only parameters and
    /// constants run once when they are bound).
    pub fn dispatches(&self) -> Option<usize> {
        self.runner.dispatches()
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
        self.bind_host(&host_params(store)?)
    }

    /// Bind parameters already on the host as tensors (see [`host_params`]): sessions that
    /// share a checkpoint (a generator's prefill and decode) convert it once.
    pub fn bind_host(&mut self, params: &HashMap<String, HostTensor>) -> Result<()> {
        self.runner.bind(params)?;
        // Only the WGSL target's saved programs need the host copy afterwards.
        #[cfg(feature = "wgsl")]
        if self.runner.wgpu().is_some() {
            self.params = params.clone();
        }
        Ok(())
    }

    /// Make this a rank of a data-parallel run: each run sums `outputs` (the loss, the
    /// gradients) over `share`'s ranks, each rank's values times its share of the global
    /// batch, in buckets of about `bucket_bytes` started as the schedule computes them (host
    /// steps of the Program: see `Program::collectives`). Returns false, scheduling nothing,
    /// on targets that run the schedule without host steps (WGSL, the reference): sum the
    /// outputs after the run there.
    pub fn set_data_parallel(&mut self, outputs: &[String], bucket_bytes: usize, share: Share) -> Result<bool> {
        self.runner.set_data_parallel(outputs, bucket_bytes, share)
    }

    /// This rank's share of the global batch for the next runs (see
    /// [`Session::set_data_parallel`]).
    pub fn set_share_weight(&mut self, weight: f64) {
        self.runner.set_share_weight(weight);
    }

    /// Change the bound parameters in place where the target allows it (the CPU target):
    /// `f` gets each parameter's name and f32 values. Returns false, changing nothing, on other
    /// targets (bind the new values instead).
    pub fn update_params(&mut self, mut f: impl FnMut(&str, &mut [f32])) -> Result<bool> {
        self.runner.update_params(&mut f)
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
        let Some(w) = self.runner.wgpu() else { return Ok(None) };
        let out = w.run_only(&named(inputs), &[loss])?;
        w.update_on_device(pairs, update)?;
        Ok(Some(out.first().map_or(f64::NAN, |(_, t)| t.to_vec()[0])))
    }

    /// On the WGSL target: the named parameters' current values on the device.
    #[cfg(feature = "wgsl")]
    pub fn device_params(&self, names: &[String]) -> Result<Option<Vec<Vec<f32>>>> {
        match self.runner.wgpu() {
            Some(w) => Ok(Some(w.read_params(names)?)),
            None => Ok(None),
        }
    }

    /// On the WGSL target: the optimizer moments of the named parameters on the device.
    #[cfg(feature = "wgsl")]
    pub fn device_moments(&self, names: &[String]) -> Result<Option<Vec<rustral_runtime::wgpu::Moments>>> {
        match self.runner.wgpu() {
            Some(w) => Ok(Some(w.read_moments(names)?)),
            None => Ok(None),
        }
    }

    /// On the WGSL target: set a parameter's optimizer moments on the device (false elsewhere).
    #[cfg(feature = "wgsl")]
    pub fn set_device_moments(&self, name: &str, m: &[f32], v: &[f32]) -> Result<bool> {
        match self.runner.wgpu() {
            Some(w) => {
                w.write_moments(name, m, v)?;
                Ok(true)
            }
            None => Ok(false),
        }
    }

    /// Run on named inputs; outputs in order.
    pub fn run(&self, inputs: &[(&str, HostTensor)]) -> Result<Vec<(String, HostTensor)>> {
        self.runner.run(&named(inputs))
    }

    /// Run `1 + repeat` times (one warm-up run, then `repeat` timed runs) and return the last
    /// outputs with the timed runs' wall times. On the CPU target inputs are converted once,
    /// outside the timing; elsewhere each time is a whole run, uploads and downloads included.
    pub fn run_timed(
        &self,
        inputs: &[(&str, HostTensor)],
        repeat: usize,
    ) -> Result<(Outputs, Vec<std::time::Duration>)> {
        self.runner.run_timed(&named(inputs), repeat)
    }

    /// Run and time every kernel (the CPU and Candle targets time each kernel in the run; the
    /// WGSL target submits each kernel alone and waits). None on the reference target.
    pub fn profile(&self, inputs: &[(&str, HostTensor)]) -> Result<Option<Vec<KernelTime>>> {
        self.runner.profile(&named(inputs))
    }
}

/// A store's values as host tensors by name, for [`Session::bind_host`].
pub fn host_params(store: &ParamStore) -> Result<HashMap<String, HostTensor>> {
    let mut params = HashMap::new();
    for (name, v) in store.iter() {
        let t = HostTensor::new(v.dtype, &v.shape, v.data.clone())
            .map_err(|e| rustral_frontend::Error::Param { name: name.clone(), message: e.to_string() })?;
        params.insert(name.clone(), t);
    }
    Ok(params)
}
