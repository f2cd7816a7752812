//! `ForwardCtx`: the explicit context a model is traced through. Everything that could be
//! hidden state elsewhere (mode, seeds, run id, which dims are symbolic, the profiler) is a
//! field here, and every tensor op records a node with the current module path.

use crate::error::{Error, Result};
use crate::init::{Init, ParamSpec};
use crate::tensor::Tensor;
use rustral_ir::{DType, Dim, F64, Graph, Literal, NodeId, Op, Shape, SourceLoc, TensorType};
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::rc::Rc;

/// Whether the model is traced for training (dropout active) or inference (no dropout nodes).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Mode {
    /// Dropout masks are drawn from seeds derived from the trace seed.
    Train,
    /// Dropout is the identity and records nothing.
    #[default]
    Inference,
}

/// Which named dims stay symbolic. A pinned dim becomes static wherever model code names it,
/// so one model file traces to a fully static graph when a target needs one.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ShapePolicy {
    /// Symbol name to the size it is pinned to.
    pub pinned: BTreeMap<String, usize>,
}

impl ShapePolicy {
    /// Every named dim symbolic.
    pub fn symbolic() -> ShapePolicy {
        ShapePolicy::default()
    }

    /// Pin `name` to `size`.
    pub fn pin(mut self, name: &str, size: usize) -> ShapePolicy {
        self.pinned.insert(name.to_string(), size);
        self
    }

    /// The shape after pinning.
    pub fn apply(&self, dims: &[Dim]) -> Shape {
        Shape(dims.to_vec()).substitute(&self.pinned)
    }
}

/// One recorded op, as the profiler hook sees it.
#[derive(Clone, Debug)]
pub struct TraceEvent<'a> {
    /// The new node.
    pub node: NodeId,
    /// Its op's name.
    pub op: &'static str,
    /// The module path that recorded it.
    pub path: &'a str,
    /// Its type.
    pub ty: &'a TensorType,
}

/// A callback told about every recorded op (counting ops per module, say).
pub type Profiler = Box<dyn FnMut(&TraceEvent<'_>)>;

/// How to trace: mode, seed, run id, shape policy and the graph's name.
#[derive(Clone, Debug)]
pub struct TraceOptions {
    /// Train or inference.
    pub mode: Mode,
    /// Seeds parameter initialisers and dropout masks.
    pub seed: u64,
    /// Identifies the run in manifests and logs.
    pub run_id: String,
    /// Which dims are symbolic.
    pub shape: ShapePolicy,
    /// The graph's name.
    pub name: String,
    /// Trace for generation with a KV cache of this many positions (see [`KvCache`]); None
    /// traces the plain forward pass.
    pub kv_cache: Option<usize>,
    /// Parameters (full names) bound in a block-quantized format: layers that own one declare
    /// it as `u8` blocks and trace `quant_matmul` / `dequantize` on it (see [`ForwardCtx::quantized`]).
    pub quantized: std::collections::BTreeMap<String, rustral_ir::QuantFormat>,
}

/// What a KV-cache trace adds to a causal LM's graph. Inputs: `position` (an i64 scalar, the
/// index of the first new token) and, per attention layer, `past.{module path}.key` and
/// `.value` of shape `[batch, kv_heads, capacity, head_dim]`. Outputs: the same caches
/// written at `position..position + seq`, named `present.{module path}.key` / `.value`, which
/// the next step feeds back as `past.*`. One trace serves prefill (`seq` symbolic) and decode
/// (`seq` pinned to 1): positions come from the input, never from a recompile.
#[derive(Clone, Debug)]
pub struct KvCache {
    /// Positions the cache holds.
    pub capacity: usize,
    /// The `position` input, declared on first use.
    position: Option<Tensor>,
    /// `(output name, tensor)` of the written caches, in trace order.
    outputs: Vec<(String, Tensor)>,
}

/// The prefix of cache inputs (`past.h.0.attn.key`).
pub const PAST: &str = "past.";
/// The prefix of the written caches among the outputs (`present.h.0.attn.key`).
pub const PRESENT: &str = "present.";
/// The input holding the first new token's position.
pub const POSITION: &str = "position";
/// The prefix of a parameter's new value among the outputs (`update.bn1.running_mean`),
/// written by [`ForwardCtx::update_param`] and copied into the parameter by `Trainer`.
pub const UPDATE: &str = "update.";

impl Default for TraceOptions {
    fn default() -> TraceOptions {
        TraceOptions {
            mode: Mode::Inference,
            seed: 0,
            run_id: "run-0".into(),
            shape: ShapePolicy::symbolic(),
            name: "model".into(),
            kv_cache: None,
            quantized: std::collections::BTreeMap::new(),
        }
    }
}

/// The state tensors share with their context: the graph being built and the scope stack.
pub(crate) struct TraceState {
    pub(crate) graph: Graph,
    pub(crate) scopes: Vec<String>,
    /// The model lines that entered the current scopes from outside this crate (a layer's
    /// `scope` call, `#[track_caller]` through the layer): where nodes a layer records from
    /// inside a closure are located, since a closure's calls carry the closure's own lines.
    pub(crate) sites: Vec<SourceLoc>,
    pub(crate) profiler: Option<Profiler>,
}

impl TraceState {
    pub(crate) fn path(&self) -> String {
        self.scopes.join(".")
    }

    /// Record the model line that created `id`: the caller, unless that is a line of this
    /// crate (a layer's closure), then the model line that entered the layer.
    pub(crate) fn locate(&mut self, id: NodeId, caller: &std::panic::Location<'_>) {
        let loc = match self.sites.last() {
            Some(site) if crate::error::in_this_crate(caller.file()) => site.clone(),
            _ => SourceLoc::from_caller(caller),
        };
        self.graph.set_loc(id, vec![loc]);
    }
}

pub(crate) type Shared = Rc<RefCell<TraceState>>;

/// The context a model is traced through.
pub struct ForwardCtx {
    pub(crate) state: Shared,
    options: TraceOptions,
    params: Vec<ParamSpec>,
    dropouts: u32,
    /// The `rng_step` input, declared by the first random op.
    step: Option<Tensor>,
    /// The KV cache, when tracing for generation.
    kv: Option<KvCache>,
    /// `(output name, new value)` of parameters the step writes ([`ForwardCtx::update_param`]).
    updates: Vec<(String, Tensor)>,
}

/// The graph input holding the step number (an `i64` scalar) that random ops mix into their
/// streams, so each training step draws fresh dropout masks; `Trainer` feeds it.
pub const RNG_STEP: &str = "rng_step";

/// A traced model: its graph and the parameters it declared (with their initialisers).
#[derive(Debug)]
pub struct Traced {
    /// The verified graph.
    pub graph: Graph,
    /// Parameters in declaration order.
    pub params: Vec<ParamSpec>,
}

/// A trace as JSON: the graph in the IR's JSON form and the parameter declarations.
#[derive(serde::Serialize, serde::Deserialize)]
struct TracedRepr {
    graph: rustral_ir::GraphRepr,
    params: Vec<ParamSpec>,
}

impl Traced {
    /// Deterministic JSON of the graph and parameter declarations, for handing a trace to
    /// another process (`rustral-compile` traces model files in their own build).
    pub fn to_json(&self) -> String {
        let repr = TracedRepr { graph: rustral_ir::GraphRepr::from_graph(&self.graph), params: self.params.clone() };
        serde_json::to_string(&repr).expect("traces always serialize")
    }

    /// Read `to_json`'s output back; the graph is verified.
    pub fn from_json(s: &str) -> Result<Traced> {
        let repr: TracedRepr = serde_json::from_str(s)
            .map_err(|e| rustral_ir::IrError::Decode { format: "trace json", message: e.to_string() })?;
        let graph = repr.graph.into_graph("trace json")?;
        rustral_ir::verify(&graph).map_err(rustral_ir::IrError::from)?;
        Ok(Traced { graph, params: repr.params })
    }
}

/// Trace `f` into a graph whose outputs are the returned tensors, named `out0`, `out1`, ...
pub fn trace(options: TraceOptions, f: impl FnOnce(&mut ForwardCtx) -> Result<Vec<Tensor>>) -> Result<Traced> {
    trace_model(options, f)
}

/// As `trace`, for an entry point with its own error type that frontend errors convert into:
/// a model file's `pub fn model(ctx: &mut ForwardCtx) -> rustral::Result<Vec<Tensor>>`.
pub fn trace_model<E: From<Error>>(
    options: TraceOptions,
    f: impl FnOnce(&mut ForwardCtx) -> Result<Vec<Tensor>, E>,
) -> Result<Traced, E> {
    let mut ctx = ForwardCtx::new(options);
    let outputs = f(&mut ctx)?.into_iter().enumerate().map(|(i, t)| (format!("out{i}"), t)).collect();
    Ok(ctx.finish(outputs)?)
}

/// Trace `f` into a graph whose outputs are the returned named tensors.
pub fn trace_named(
    options: TraceOptions,
    f: impl FnOnce(&mut ForwardCtx) -> Result<Vec<(String, Tensor)>>,
) -> Result<Traced> {
    let mut ctx = ForwardCtx::new(options);
    let outputs = f(&mut ctx)?;
    ctx.finish(outputs)
}

impl ForwardCtx {
    /// A fresh context with an empty graph.
    pub fn new(options: TraceOptions) -> ForwardCtx {
        let state = TraceState {
            graph: Graph::new(options.name.clone()),
            scopes: Vec::new(),
            sites: Vec::new(),
            profiler: None,
        };
        let kv = options.kv_cache.map(|capacity| KvCache { capacity, position: None, outputs: Vec::new() });
        ForwardCtx {
            state: Rc::new(RefCell::new(state)),
            options,
            params: Vec::new(),
            dropouts: 0,
            step: None,
            kv,
            updates: Vec::new(),
        }
    }

    /// Train or inference.
    pub fn mode(&self) -> Mode {
        self.options.mode
    }

    /// The run id.
    pub fn run_id(&self) -> &str {
        &self.options.run_id
    }

    /// The trace seed.
    pub fn seed(&self) -> u64 {
        self.options.seed
    }

    /// The shape policy.
    pub fn shape_policy(&self) -> &ShapePolicy {
        &self.options.shape
    }

    /// Install a profiler hook, told about every op recorded from now on.
    pub fn set_profiler(&mut self, profiler: Profiler) {
        self.state.borrow_mut().profiler = Some(profiler);
    }

    /// The current module path (`encoder.layer.0.attention`).
    pub fn path(&self) -> String {
        self.state.borrow().path()
    }

    /// Run `f` inside the module scope `name` (dots allowed): nodes record the extended path
    /// and parameters are named under it.
    #[track_caller]
    pub fn scope<R>(&mut self, name: &str, f: impl FnOnce(&mut ForwardCtx) -> R) -> R {
        let caller = std::panic::Location::caller();
        let site = !crate::error::in_this_crate(caller.file());
        if site {
            self.state.borrow_mut().sites.push(SourceLoc::from_caller(caller));
        }
        let out = if name.is_empty() {
            f(self)
        } else {
            self.state.borrow_mut().scopes.push(name.to_string());
            let out = f(self);
            self.state.borrow_mut().scopes.pop();
            out
        };
        if site {
            self.state.borrow_mut().sites.pop();
        }
        out
    }

    #[track_caller]
    fn declare(&mut self, op: Op, ty: TensorType) -> Result<Tensor> {
        let caller = std::panic::Location::caller();
        let path = self.path();
        let id = self.state.borrow_mut().graph.declare(op, ty, &path).map_err(|e| Error::at(caller, e.into()))?;
        self.locate(id, caller);
        Ok(Tensor::recorded(&self.state, id))
    }

    /// Record the model line that created `id`.
    fn locate(&self, id: NodeId, caller: &std::panic::Location<'_>) {
        self.state.borrow_mut().locate(id, caller);
    }

    fn shape(&self, dims: &[Dim]) -> Shape {
        self.options.shape.apply(dims)
    }

    /// A graph input (not scoped: inputs are named as given).
    #[track_caller]
    pub fn input(&mut self, name: &str, dims: &[Dim], dtype: DType) -> Result<Tensor> {
        let caller = std::panic::Location::caller();
        let ty = TensorType::new(dtype, self.shape(dims));
        let id = self.state.borrow_mut().graph.input(name, ty).map_err(|e| Error::at(caller, e.into()))?;
        self.locate(id, caller);
        Ok(Tensor::recorded(&self.state, id))
    }

    /// An f32 parameter named `{path}.{name}`, initialised by `init` (see `Traced::params`).
    /// Parameter shapes must be static.
    #[track_caller]
    pub fn param(&mut self, name: &str, dims: &[Dim], init: Init) -> Result<Tensor> {
        self.param_typed(name, dims, DType::F32, init)
    }

    /// The block format parameter `name` (in the current scope) is bound in, when the trace
    /// options say it is quantized.
    pub fn quantized(&self, name: &str) -> Option<rustral_ir::QuantFormat> {
        let path = self.path();
        let full = if path.is_empty() { name.to_string() } else { format!("{path}.{name}") };
        self.options.quantized.get(&full).copied()
    }

    /// A `[rows, k]` weight bound in `format`'s blocks: a `u8` parameter `[rows, row_bytes]`.
    #[track_caller]
    pub fn quantized_param(
        &mut self,
        name: &str,
        rows: usize,
        k: usize,
        format: rustral_ir::QuantFormat,
    ) -> Result<Tensor> {
        let caller = std::panic::Location::caller();
        let row_bytes = format.row_bytes(k).map_err(|e| {
            let path = self.path();
            let error = Error::Param {
                name: if path.is_empty() { name.to_string() } else { format!("{path}.{name}") },
                message: e.to_string(),
            };
            Error::at(caller, error)
        })?;
        self.param_typed(name, &[Dim::fixed(rows), Dim::fixed(row_bytes)], DType::U8, Init::Zeros)
    }

    /// A parameter of any float dtype.
    #[track_caller]
    pub fn param_typed(&mut self, name: &str, dims: &[Dim], dtype: DType, init: Init) -> Result<Tensor> {
        let caller = std::panic::Location::caller();
        let path = self.path();
        let full = if path.is_empty() { name.to_string() } else { format!("{path}.{name}") };
        let bad_init = match init {
            Init::Normal { std } => !(std.is_finite() && std >= 0.0),
            Init::Uniform { low, high } => !(low.is_finite() && high.is_finite() && low < high),
            Init::Zeros | Init::Ones => false,
        };
        if bad_init {
            return Err(located(Error::Param { name: full, message: format!("invalid initialiser {init:?}") }));
        }
        let shape = self.shape(dims);
        let Some(static_dims) = shape.0.iter().map(Dim::as_static).collect::<Option<Vec<usize>>>() else {
            let message = format!("shape {shape} is not static (parameters need fixed sizes)");
            return Err(located(Error::Param { name: full, message }));
        };
        let ty = TensorType::new(dtype, shape);
        let id = self.state.borrow_mut().graph.param(&full, ty, &path).map_err(|e| Error::at(caller, e.into()))?;
        self.locate(id, caller);
        self.params.push(ParamSpec { name: full, dtype, shape: static_dims, init });
        Ok(Tensor::recorded(&self.state, id))
    }

    /// A constant filled with `value`.
    #[track_caller]
    pub fn full(&mut self, value: f64, dims: &[Dim], dtype: DType) -> Result<Tensor> {
        let ty = TensorType::new(dtype, self.shape(dims));
        self.declare(Op::Constant { value: Literal::Splat(F64(value)) }, ty)
    }

    /// A scalar constant.
    #[track_caller]
    pub fn scalar(&mut self, value: f64, dtype: DType) -> Result<Tensor> {
        self.full(value, &[], dtype)
    }

    /// A constant with one value per element (row-major).
    #[track_caller]
    pub fn constant(&mut self, values: &[f64], dims: &[usize], dtype: DType) -> Result<Tensor> {
        let ty = TensorType::new(dtype, Shape::of(dims));
        self.declare(Op::Constant { value: Literal::Dense(values.iter().map(|&v| F64(v)).collect()) }, ty)
    }

    /// Each element's index along `axis` (positions, masks).
    #[track_caller]
    pub fn iota(&mut self, dims: &[Dim], axis: usize, dtype: DType) -> Result<Tensor> {
        let ty = TensorType::new(dtype, self.shape(dims));
        self.declare(Op::Iota { axis }, ty)
    }

    /// Uniform `[0, 1)` noise from the next seed of this trace's dropout stream, mixed with the
    /// run's step (the `rng_step` input, declared on first use): the same seed and step give
    /// the same values on every target, another step other values.
    #[track_caller]
    pub fn random_uniform(&mut self, dims: &[Dim], dtype: DType) -> Result<Tensor> {
        let caller = std::panic::Location::caller();
        let seed = self.next_seed();
        let ty = TensorType::new(dtype, self.shape(dims));
        let step = match &self.step {
            Some(s) => s.clone(),
            None => {
                let s = self.input(RNG_STEP, &[], DType::I64)?;
                self.step = Some(s.clone());
                s
            }
        };
        let path = self.path();
        let random = Op::RandomUniform { seed };
        let id = self
            .state
            .borrow_mut()
            .graph
            .declare_with(random, &[step.id], ty, &path)
            .map_err(|e| Error::at(caller, e.into()))?;
        self.locate(id, caller);
        Ok(Tensor::recorded(&self.state, id))
    }

    /// Seeds for random ops: a pure function of the trace seed and a counter, so a trace is
    /// reproducible and two dropouts never share a mask.
    fn next_seed(&mut self) -> u32 {
        self.dropouts += 1;
        let mixed =
            crate::init::splitmix64(self.options.seed ^ u64::from(self.dropouts).wrapping_mul(0x9E37_79B9_7F4A_7C15));
        (mixed >> 32) as u32
    }

    /// The KV cache's capacity when tracing for generation.
    pub fn kv_capacity(&self) -> Option<usize> {
        self.kv.as_ref().map(|kv| kv.capacity)
    }

    /// The position of the first token of this step (the `position` input, an i64 scalar),
    /// when tracing with a KV cache.
    pub fn position(&mut self) -> Result<Option<Tensor>> {
        let declared = match &self.kv {
            None => return Ok(None),
            Some(kv) => kv.position.clone(),
        };
        if let Some(p) = declared {
            return Ok(Some(p));
        }
        let p = self.input(POSITION, &[], DType::I64)?;
        if let Some(kv) = &mut self.kv {
            kv.position = Some(p.clone());
        }
        Ok(Some(p))
    }

    /// Declare the cache `past.{path}.{name}` of `[batch, heads, capacity, head_dim]`, write
    /// `new: [batch, heads, seq, head_dim]` into it at the position, and return the written
    /// cache (also a graph output, `present.{path}.{name}`). None without a KV cache.
    pub fn cache(&mut self, name: &str, new: &Tensor) -> Result<Option<Tensor>> {
        let Some(capacity) = self.kv_capacity() else { return Ok(None) };
        let position = self.position()?.expect("a KV cache has a position");
        let dims = [new.dim(0)?, new.dim(1)?, Dim::fixed(capacity), new.dim(3)?];
        let key = format!("{}.{name}", self.path());
        let past = self.input(&format!("{PAST}{key}"), &dims, new.dtype())?;
        let written = self.scope("cache", |_| past.update_slice(new, &position, 2))?;
        if let Some(kv) = &mut self.kv {
            kv.outputs.push((format!("{PRESENT}{key}"), written.clone()));
        }
        Ok(Some(written))
    }

    /// Give parameter `name` (of the current scope, declared before) the value `value` after
    /// this step: batch norm's running statistics in training mode. The value becomes the
    /// output `update.{full name}`, which `Trainer` copies into the parameter after each step
    /// (and does not differentiate): state a model changes is explicit in its graph.
    #[track_caller]
    pub fn update_param(&mut self, name: &str, value: &Tensor) -> Result<()> {
        let path = self.path();
        let full = if path.is_empty() { name.to_string() } else { format!("{path}.{name}") };
        let Some(spec) = self.params.iter().find(|p| p.name == full) else {
            let message = "not a parameter declared before its update".to_string();
            return Err(located(Error::Param { name: full, message }));
        };
        let static_dims: Option<Vec<usize>> = value.dims().iter().map(Dim::as_static).collect();
        if value.dtype() != spec.dtype || static_dims.as_deref() != Some(&spec.shape[..]) {
            let message = format!("updated with {}, declared {} {:?}", value.ty(), spec.dtype, spec.shape);
            return Err(located(Error::Param { name: full, message }));
        }
        if self.updates.iter().any(|(n, _)| n == &format!("{UPDATE}{full}")) {
            return Err(located(Error::Param { name: full, message: "updated twice in one step".into() }));
        }
        self.updates.push((format!("{UPDATE}{full}"), value.clone()));
        Ok(())
    }

    /// Finish: set outputs (and a KV-cache trace's written caches, then parameter updates,
    /// after them) and verify.
    pub fn finish(self, mut outputs: Vec<(String, Tensor)>) -> Result<Traced> {
        if let Some(kv) = &self.kv {
            outputs.extend(kv.outputs.iter().cloned());
        }
        outputs.extend(self.updates.iter().cloned());
        let mut state = self.state.borrow_mut();
        for (name, t) in &outputs {
            if !Rc::ptr_eq(&t.state, &self.state) {
                return Err(Error::ForeignTensor { op: "output".into(), path: name.clone() });
            }
            state.graph.set_output(name, t.id)?;
        }
        rustral_ir::verify(&state.graph).map_err(rustral_ir::IrError::from)?;
        let graph = std::mem::take(&mut state.graph);
        Ok(Traced { graph, params: self.params })
    }
}

/// `error` at the model line that called the API function this is in (`#[track_caller]` all the
/// way from there).
#[track_caller]
fn located(error: impl Into<Error>) -> Error {
    Error::at(std::panic::Location::caller(), error.into())
}
