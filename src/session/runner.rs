//! Each target's compiled program behind one trait, so that the session drives them alike:
//! bind, run, profile, update parameters in place. A target without some ability says so with
//! the trait's default (`None` or `false`), never by a silent wrong answer.

use crate::Result;
use rustral_ir::Graph;
use rustral_lowering::Program;
use rustral_runtime::HostTensor;
use rustral_runtime::cpu::{CpuProgram, KernelTime, Outputs, Storage};
use rustral_runtime::exec::Share;
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// Run state on a target (see `Session::run_state`): values by input name.
pub enum State {
    /// Host tensors (the reference target).
    Host(HashMap<String, HostTensor>),
    /// CPU storage.
    Cpu(HashMap<String, Storage>),
    /// Candle tensors.
    #[cfg(feature = "candle")]
    Candle(HashMap<String, rustral_runtime::candle::Tensor>),
    /// wgpu buffers.
    #[cfg(feature = "wgsl")]
    Wgpu(HashMap<String, rustral_runtime::wgpu::DeviceTensor>),
}

/// Each named host tensor moved onto a target by `upload`.
fn on_target<V>(
    values: HashMap<String, HostTensor>,
    upload: impl Fn(HostTensor) -> Result<V>,
) -> Result<HashMap<String, V>> {
    values.into_iter().map(|(n, t)| Ok((n, upload(t)?))).collect()
}

/// The error for a state made by another target.
fn foreign_state() -> crate::Error {
    crate::Error::Usage("run state made by a session of another target".into())
}

/// A compiled program of some target.
pub(crate) trait Runner {
    /// The lowered program (None on the reference target, which runs the graph).
    fn program(&self) -> Option<&Program>;

    /// Kernels dispatched per run.
    fn dispatches(&self) -> Option<usize>;

    /// Bind parameter values (checked against their declarations).
    fn bind(&mut self, params: &HashMap<String, HostTensor>) -> Result<()>;

    /// Run on named inputs; outputs in order.
    fn run(&self, inputs: &HashMap<String, HostTensor>) -> Result<Outputs>;

    /// Run `1 + repeat` times and time the last `repeat` (whole runs, transfers included,
    /// unless the target can keep inputs resident).
    fn run_timed(&self, inputs: &HashMap<String, HostTensor>, repeat: usize) -> Result<(Outputs, Vec<Duration>)> {
        timed(repeat, || self.run(inputs))
    }

    /// Run and time every kernel; None where the target does not time kernels.
    fn profile(&self, _inputs: &HashMap<String, HostTensor>) -> Result<Option<Vec<KernelTime>>> {
        Ok(None)
    }

    /// Change f32 parameters in place and recompute what depends on them; false where the
    /// target cannot (bind new values instead).
    fn update_params(&mut self, _f: &mut dyn FnMut(&str, &mut [f32])) -> Result<bool> {
        Ok(false)
    }

    /// Sum `outputs` across ranks in the schedule (see `Session::set_data_parallel`); false
    /// where the target runs its schedule without host steps (the caller sums after the run).
    fn set_data_parallel(&mut self, _outputs: &[String], _bucket_bytes: usize, _share: Share) -> Result<bool> {
        Ok(false)
    }

    /// This rank's share of the next runs' global batch.
    fn set_share_weight(&mut self, _weight: f64) {}

    /// Hold `values` on the target as run state (see [`crate::State`]).
    fn new_state(&self, values: HashMap<String, HostTensor>) -> Result<State> {
        Ok(State::Host(values))
    }

    /// One stateful run: `state` donated, each `(output, input)` of `carry` put back into it,
    /// the outputs named in `read` returned.
    fn run_state(
        &self,
        inputs: &HashMap<String, HostTensor>,
        state: &mut State,
        carry: &[(String, String)],
        read: &[&str],
    ) -> Result<Outputs>;

    /// The Candle program, on the Candle target.
    #[cfg(feature = "candle")]
    fn candle(&self) -> Option<&rustral_runtime::candle::CandleProgram> {
        None
    }

    /// The wgpu program, on the WGSL target.
    #[cfg(feature = "wgsl")]
    fn wgpu(&self) -> Option<&rustral_runtime::wgpu::WgpuProgram> {
        None
    }
}

/// `run` once as a warm-up, then `repeat` timed times; the last outputs and the times.
fn timed<T>(repeat: usize, mut run: impl FnMut() -> Result<T>) -> Result<(T, Vec<Duration>)> {
    let mut out = run()?;
    let mut times = Vec::with_capacity(repeat);
    for _ in 0..repeat {
        let start = Instant::now();
        out = run()?;
        times.push(start.elapsed());
    }
    Ok((out, times))
}

/// The reference interpreter over the optimised graph.
pub(crate) struct Reference {
    pub(crate) graph: Graph,
    pub(crate) params: HashMap<String, HostTensor>,
}

impl Runner for Reference {
    fn program(&self) -> Option<&Program> {
        None
    }

    fn dispatches(&self) -> Option<usize> {
        None
    }

    fn bind(&mut self, params: &HashMap<String, HostTensor>) -> Result<()> {
        self.params = params.clone();
        Ok(())
    }

    fn run(&self, inputs: &HashMap<String, HostTensor>) -> Result<Outputs> {
        let mut feeds = self.params.clone();
        feeds.extend(inputs.iter().map(|(n, t)| (n.clone(), t.clone())));
        Ok(rustral_runtime::reference::evaluate(&self.graph, &feeds)?)
    }

    fn run_state(
        &self,
        inputs: &HashMap<String, HostTensor>,
        state: &mut State,
        carry: &[(String, String)],
        read: &[&str],
    ) -> Result<Outputs> {
        let State::Host(values) = state else { return Err(foreign_state()) };
        let mut feeds = inputs.clone();
        feeds.extend(values.iter().map(|(n, t)| (n.clone(), t.clone())));
        let outputs = self.run(&feeds)?;
        let mut host = Vec::new();
        for (name, t) in outputs {
            if let Some((_, input)) = carry.iter().find(|(o, _)| *o == name) {
                values.insert(input.clone(), t.clone());
            }
            if read.contains(&name.as_str()) {
                host.push((name, t));
            }
        }
        Ok(host)
    }
}

impl Runner for CpuProgram {
    fn program(&self) -> Option<&Program> {
        Some(CpuProgram::program(self))
    }

    fn dispatches(&self) -> Option<usize> {
        Some(CpuProgram::dispatches(self))
    }

    fn bind(&mut self, params: &HashMap<String, HostTensor>) -> Result<()> {
        Ok(self.bind_params(params)?)
    }

    fn run(&self, inputs: &HashMap<String, HostTensor>) -> Result<Outputs> {
        Ok(CpuProgram::run(self, inputs)?)
    }

    /// Inputs are converted to CPU storage once, outside the timing.
    fn run_timed(&self, inputs: &HashMap<String, HostTensor>, repeat: usize) -> Result<(Outputs, Vec<Duration>)> {
        let storage: HashMap<String, Storage> =
            inputs.iter().map(|(n, t)| (n.clone(), Storage::from_host(t.clone()))).collect();
        let (out, times) = timed(repeat, || Ok(self.run_storage(&storage)?))?;
        Ok((out.into_iter().map(|(n, s)| (n, s.to_host())).collect(), times))
    }

    fn profile(&self, inputs: &HashMap<String, HostTensor>) -> Result<Option<Vec<KernelTime>>> {
        Ok(Some(self.run_profiled(inputs)?.1))
    }

    fn update_params(&mut self, f: &mut dyn FnMut(&str, &mut [f32])) -> Result<bool> {
        Ok(CpuProgram::update_params(self, f)?)
    }

    fn set_data_parallel(&mut self, outputs: &[String], bucket_bytes: usize, share: Share) -> Result<bool> {
        CpuProgram::set_data_parallel(self, outputs, bucket_bytes, share)?;
        Ok(true)
    }

    fn set_share_weight(&mut self, weight: f64) {
        CpuProgram::set_share_weight(self, weight);
    }

    fn new_state(&self, values: HashMap<String, HostTensor>) -> Result<State> {
        Ok(State::Cpu(on_target(values, |t| Ok(self.upload(t)?))?))
    }

    fn run_state(
        &self,
        inputs: &HashMap<String, HostTensor>,
        state: &mut State,
        carry: &[(String, String)],
        read: &[&str],
    ) -> Result<Outputs> {
        let State::Cpu(values) = state else { return Err(foreign_state()) };
        Ok(self.run_carry(inputs, values, carry, read)?)
    }
}

#[cfg(feature = "candle")]
impl Runner for rustral_runtime::candle::CandleProgram {
    fn program(&self) -> Option<&Program> {
        Some(rustral_runtime::candle::CandleProgram::program(self))
    }

    fn dispatches(&self) -> Option<usize> {
        Some(rustral_runtime::candle::CandleProgram::dispatches(self))
    }

    fn bind(&mut self, params: &HashMap<String, HostTensor>) -> Result<()> {
        Ok(self.bind_params(params)?)
    }

    fn run(&self, inputs: &HashMap<String, HostTensor>) -> Result<Outputs> {
        Ok(rustral_runtime::candle::CandleProgram::run(self, inputs)?)
    }

    fn profile(&self, inputs: &HashMap<String, HostTensor>) -> Result<Option<Vec<KernelTime>>> {
        Ok(Some(self.run_profiled(inputs)?.1))
    }

    fn candle(&self) -> Option<&rustral_runtime::candle::CandleProgram> {
        Some(self)
    }

    fn set_data_parallel(&mut self, outputs: &[String], bucket_bytes: usize, share: Share) -> Result<bool> {
        rustral_runtime::candle::CandleProgram::set_data_parallel(self, outputs, bucket_bytes, share)?;
        Ok(true)
    }

    fn set_share_weight(&mut self, weight: f64) {
        rustral_runtime::candle::CandleProgram::set_share_weight(self, weight);
    }

    fn new_state(&self, values: HashMap<String, HostTensor>) -> Result<State> {
        Ok(State::Candle(on_target(values, |t| Ok(self.upload(t)?))?))
    }

    fn run_state(
        &self,
        inputs: &HashMap<String, HostTensor>,
        state: &mut State,
        carry: &[(String, String)],
        read: &[&str],
    ) -> Result<Outputs> {
        let State::Candle(values) = state else { return Err(foreign_state()) };
        Ok(self.run_carry(inputs, values, carry, read)?)
    }
}

/// The WGSL program and the lowered program it came from.
#[cfg(feature = "wgsl")]
pub(crate) struct Wgsl {
    pub(crate) gpu: rustral_runtime::wgpu::WgpuProgram,
    pub(crate) program: Program,
}

#[cfg(feature = "wgsl")]
impl Runner for Wgsl {
    fn program(&self) -> Option<&Program> {
        Some(&self.program)
    }

    fn dispatches(&self) -> Option<usize> {
        Some(self.gpu.dispatches())
    }

    fn bind(&mut self, params: &HashMap<String, HostTensor>) -> Result<()> {
        Ok(self.gpu.bind_params(params)?)
    }

    fn run(&self, inputs: &HashMap<String, HostTensor>) -> Result<Outputs> {
        Ok(self.gpu.run(inputs)?)
    }

    fn profile(&self, inputs: &HashMap<String, HostTensor>) -> Result<Option<Vec<KernelTime>>> {
        Ok(Some(self.gpu.profile(inputs)?))
    }

    fn wgpu(&self) -> Option<&rustral_runtime::wgpu::WgpuProgram> {
        Some(&self.gpu)
    }

    fn new_state(&self, values: HashMap<String, HostTensor>) -> Result<State> {
        Ok(State::Wgpu(on_target(values, |t| Ok(self.gpu.resident(&t)?))?))
    }

    /// The state stays in device buffers that the program writes in place: a carried output
    /// must be its input's storage (checked), so nothing is copied or read back.
    fn run_state(
        &self,
        inputs: &HashMap<String, HostTensor>,
        state: &mut State,
        carry: &[(String, String)],
        read: &[&str],
    ) -> Result<Outputs> {
        let State::Wgpu(values) = state else { return Err(foreign_state()) };
        if let Some((o, i)) = carry.iter().find(|(o, i)| !self.gpu.writes_in_place(o, i)) {
            return Err(crate::Error::Usage(format!(
                "output {o} is not written in place into input {i} on the WGSL target"
            )));
        }
        Ok(self.gpu.run_resident(inputs, values, read)?)
    }
}
