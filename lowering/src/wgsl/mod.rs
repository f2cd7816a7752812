//! The WGSL target's lowering: a [`Program`] becomes a [`WgslProgram`], one WGSL compute
//! shader per kernel plus everything a WebGPU host needs to run them: buffers with sizes as
//! expressions of the symbolic dims, bindings, dispatch sizes, the dispatch order, and which
//! buffers are inputs, parameters and outputs (`schemas/wgsl-program.schema.json`).
//!
//! Conventions every shader shares (the schema repeats them for foreign hosts):
//! - binding 0 of group 0 is the `dims` uniform, `array<vec4<u32>, K>` holding the symbolic
//!   dims in the order of [`WgslProgram::dims`] (dim `i` is `dims.d[i / 4][i % 4]`), so one set
//!   of shaders serves every batch and sequence length;
//! - a kernel of `n` workgroups is dispatched as `(min(n, max_x), ceil(n / max_x), 1)` and
//!   linearises `workgroup_id.x + workgroup_id.y * num_workgroups.x`;
//! - values are computed in f32 whatever their dtype, rounded to the dtype after every op, as
//!   the reference interpreter does in f64; f16, bf16 and f64 are stored as f32 words, i32 and
//!   i64 as i32 (i64 values outside the i32 range wrap), bool as u32 0 or 1;
//! - data-dependent failures (a gather index or a cross-entropy target out of range, an
//!   integer division by zero, a slice past the end) set the failing kernel's own word of the
//!   `status` buffer (see [`Role::Status`]).
//!
//! Every shader is parsed and validated by naga before it leaves the compiler.

mod attention;
mod emit;
mod format;
mod helpers;
mod limits;
mod matmul;
mod pointwise;
mod quant;
mod rows;
mod validate;
mod window;

use crate::plan::MemoryPlan;
use crate::program::{Buffer, BufferKind, Kernel, Program};
use rustral_ir::{DType, Dim, Literal, Op};
use std::collections::{BTreeMap, BTreeSet};
use thiserror::Error;

pub use format::*;
pub use limits::{Limits, PROFILES, Profile};

/// Why WGSL lowering failed.
#[derive(Debug, Error)]
pub enum WgslError {
    /// A generated shader did not validate: a compiler bug, reported with the shader.
    #[error(
        "WGSL for kernel {kernel} ({op} at {provenance:?}) does not validate (a compiler bug):\n{message}\n--- shader ---\n{shader}"
    )]
    Invalid {
        /// Kernel name.
        kernel: String,
        /// Its op.
        op: String,
        /// Module path of the node.
        provenance: String,
        /// naga's message.
        message: String,
        /// The shader.
        shader: String,
    },
    /// An op the WGSL target cannot express.
    #[error("kernel {kernel} ({op} at {provenance:?}): {message}")]
    Unsupported {
        /// Kernel name.
        kernel: String,
        /// Its op.
        op: String,
        /// Module path of the node.
        provenance: String,
        /// Why.
        message: String,
    },
    /// The program does not fit the WebGPU limits it is compiled for.
    #[error(
        "{place} needs {needed} where the {profile} WebGPU limits allow {allowed} ({limit}; --webgpu-limits chooses another profile)"
    )]
    Limit {
        /// The kernel or buffer.
        place: String,
        /// WebGPU's name of the limit.
        limit: &'static str,
        /// What it needs.
        needed: u64,
        /// What the profile allows.
        allowed: u64,
        /// The profile's name (`default`, `chrome`, `native` or a file).
        profile: String,
    },
}

/// What kernel generators see of a buffer.
#[derive(Clone, Debug)]
pub(crate) struct Operand {
    pub dtype: DType,
    pub storage: Storage,
    pub shape: Vec<Dim>,
    /// How it is bound when it is larger than one binding (a shader reads and writes it
    /// through an accessor function, see [`emit::Shader::at`]).
    pub split: Option<Split>,
}

impl Operand {
    fn of(b: &Buffer, limits: &Limits) -> Operand {
        let storage = Storage::of(b.ty.dtype);
        let split = Split::of(&storage.count(&b.ty.shape.0), limits);
        Operand { dtype: b.ty.dtype, storage, shape: b.ty.shape.0.clone(), split }
    }
}

/// A buffer of static size larger than `maxStorageBufferBindingSize` (GPT-2's 154 MB token
/// embedding under WebGPU's default 128 MiB) bound as `count` consecutive ranges of `words`
/// words each (the last one shorter), every range starting at a multiple of
/// `minStorageBufferOffsetAlignment`. The buffer itself stays one allocation, so it must
/// still fit `maxBufferSize`; symbolic sizes are never split (their size is known only at
/// run time, when the host checks it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Split {
    /// Words per binding.
    pub words: u64,
    /// Bindings.
    pub count: u64,
}

impl Split {
    fn of(elements: &Count, limits: &Limits) -> Option<Split> {
        let words = elements.eval(&BTreeMap::new()).ok()?;
        let max = limits.max_storage_buffer_binding_size / 4;
        let align = (limits.min_storage_buffer_offset_alignment / 4).max(1);
        let per = max / align * align;
        // Not split: what fits, what no aligned range holds, what a u32 index cannot reach,
        // and what would take more bindings than a shader may have (the limit check then
        // names the buffer).
        if words <= max || per == 0 || words > u64::from(u32::MAX) {
            return None;
        }
        let count = words.div_ceil(per);
        (count < limits.max_storage_buffers_per_shader_stage).then_some(Split { words: per, count })
    }

    /// Per range: its byte offset and byte size, for a buffer of `words` words.
    fn ranges(self, words: u64) -> impl Iterator<Item = (u64, u64)> {
        (0..self.count).map(move |c| (c * self.words * 4, self.words.min(words - c * self.words) * 4))
    }
}

/// A kernel as a generator made it, before it is numbered and validated.
pub(crate) struct Generated {
    pub source: String,
    pub workgroup_size: u32,
    pub workgroups: Count,
    /// Operand binding names, in operand order (the output is `out`).
    pub names: Vec<String>,
    /// What a nonzero status word means, when the kernel has checks.
    pub status: Option<String>,
    pub workgroup_bytes: u32,
}

/// Lower a program to WGSL; `name` is the graph's name.
pub fn lower_wgsl(p: &Program, name: &str) -> Result<WgslProgram, WgslError> {
    lower_wgsl_for(p, name, &Profile::default())
}

/// [`lower_wgsl`] for the WebGPU limits of `profile`: every kernel and every buffer of known
/// size must fit them, or the error names what does not.
pub fn lower_wgsl_for(p: &Program, name: &str, profile: &Profile) -> Result<WgslProgram, WgslError> {
    let program = lower_unchecked(p, name, &profile.limits)?;
    limits::check(&program, &profile.limits, &profile.name)?;
    Ok(program)
}

fn lower_unchecked(p: &Program, name: &str, limits: &Limits) -> Result<WgslProgram, WgslError> {
    let syms: BTreeSet<String> = p
        .buffers
        .iter()
        .flat_map(|b| {
            b.ty.shape.0.iter().filter_map(|d| match d {
                Dim::Sym(s) => Some(s.clone()),
                Dim::Static(_) => None,
            })
        })
        .collect();
    let dims: Vec<String> = syms.into_iter().collect();
    let ctx = emit::Ctx { dims: &dims };

    // Sources other than inputs, params and dense constants become init kernels.
    let mut kernels: Vec<Kernel> = Vec::new();
    let mut constants = BTreeMap::new();
    for (b, buf) in p.buffers.iter().enumerate() {
        if let BufferKind::Constant(op) = &buf.kind {
            match op {
                Op::Constant { value: Literal::Dense(vs) } => {
                    constants.insert(b, vs.iter().map(|v| v.0).collect());
                }
                op => kernels.push(Kernel {
                    op: op.clone(),
                    name: op.name().to_string(),
                    inputs: vec![],
                    output: b,
                    provenance: buf.provenance.clone(),
                    loc: buf.loc.clone(),
                }),
            }
        }
    }
    // A reshape is a view of its operand's storage: no kernel. An update_slice writes into its
    // target's storage (a KV cache grows in place): its result is a view of the target, and
    // its kernel binds only the update and the position.
    let mut alias: BTreeMap<usize, usize> = BTreeMap::new();
    let mut program_kernels = p.kernels.clone();
    let last_read = last_reads(p);
    for (i, k) in program_kernels.iter_mut().enumerate() {
        let root = alias.get(&k.inputs[0]).copied().unwrap_or(k.inputs[0]);
        match k.op {
            Op::Reshape { .. } => {
                alias.insert(k.output, root);
            }
            Op::UpdateSlice { .. } => {
                let writable = matches!(p.buffers[root].kind, BufferKind::Input(_) | BufferKind::Intermediate);
                let dies_here = alias.iter().filter(|(_, r)| **r == root).map(|(v, _)| *v).chain([root]).all(|b| {
                    last_read.get(&b).is_none_or(|&last| last <= i) && !p.outputs.iter().any(|(_, o)| *o == b)
                });
                if !(writable && dies_here) {
                    return Err(WgslError::Unsupported {
                        kernel: format!("k_{}", k.name),
                        op: k.name.clone(),
                        provenance: k.provenance.clone(),
                        message: "the WGSL target writes update_slice in place, so its target must be an input or \
                                  intermediate read by nothing after it (not a parameter, constant or output)"
                            .into(),
                    });
                }
                alias.insert(k.output, root);
                k.inputs.remove(0);
            }
            _ => {}
        }
    }
    let root = |b: usize| alias.get(&b).copied().unwrap_or(b);
    // Kernels reading only parameters, constants and init results run once (init phase).
    let mut fixed: BTreeSet<usize> = p
        .buffers
        .iter()
        .enumerate()
        .filter(|(b, buf)| matches!(buf.kind, BufferKind::Param(_)) || constants.contains_key(b))
        .map(|(b, _)| b)
        .collect();
    fixed.extend(kernels.iter().map(|k| k.output));
    let mut run = Vec::new();
    for k in program_kernels.iter().filter(|k| !matches!(k.op, Op::Reshape { .. })) {
        if k.inputs.iter().all(|i| fixed.contains(&root(*i))) {
            fixed.insert(k.output);
            kernels.push(k.clone());
        } else {
            run.push(k.clone());
        }
    }
    let n_init = kernels.len();
    kernels.extend(run);

    let slot_of = plan_slots(p, &kernels[n_init..], &fixed, &root);
    let mut buffers: Vec<WgslBuffer> = p
        .buffers
        .iter()
        .enumerate()
        .map(|(b, buf)| WgslBuffer {
            dtype: buf.ty.dtype,
            storage: Storage::of(buf.ty.dtype),
            shape: buf.ty.shape.0.clone(),
            elements: Storage::of(buf.ty.dtype).count(&buf.ty.shape.0),
            role: match &buf.kind {
                _ if alias.contains_key(&b) => Role::Alias { of: alias[&b] },
                BufferKind::Input(n) => Role::Input { name: n.clone() },
                BufferKind::Param(n) => Role::Param { name: n.clone() },
                BufferKind::Constant(_) if constants.contains_key(&b) => {
                    Role::Constant { tensor: format!("const.{b}") }
                }
                _ => Role::Intermediate { slot: slot_of.get(&b).copied() },
            },
            provenance: buf.provenance.clone(),
        })
        .collect();
    let slots = slot_of.values().map(|s| s + 1).max().unwrap_or(0);

    let mut out = Vec::with_capacity(kernels.len());
    let mut status_buffer = None;
    let mut checked = 0u64;
    for (i, k) in kernels.iter().enumerate() {
        let kname = format!("k{i:03}_{}", k.name);
        let operands: Vec<Operand> = k.inputs.iter().map(|&b| Operand::of(&p.buffers[b], limits)).collect();
        let result = Operand::of(&p.buffers[k.output], limits);
        let head = emit::Head { index: i, graph: name, op: &k.op, provenance: &k.provenance, loc: &k.loc };
        let unsupported = |message: String| WgslError::Unsupported {
            kernel: kname.clone(),
            op: k.name.clone(),
            provenance: k.provenance.clone(),
            message,
        };
        // WGSL indexes with u32: a larger tensor would print literals naga and Tint reject.
        for o in operands.iter().chain([&result]) {
            let n = o.shape.iter().try_fold(1u64, |n, d| n.checked_mul(d.as_static().unwrap_or(1) as u64));
            if n.is_none_or(|n| n > u64::from(u32::MAX)) {
                return Err(unsupported(format!(
                    "a tensor of shape {:?} has more than 2^32 - 1 elements, the most WGSL's u32 indices reach",
                    o.shape.iter().map(|d| d.to_string()).collect::<Vec<_>>()
                )));
            }
        }
        let g = generate(&ctx, &head, &k.op, &operands, &result).map_err(unsupported)?;
        // One binding per operand, or one per range of a split one, in the order the shader
        // declares them (operands, then `out`, then the status word).
        let mut bindings: Vec<Binding> = Vec::new();
        let bound = k.inputs.iter().zip(&g.names).zip(&operands).map(|((&b, n), o)| (b, n.as_str(), o, Access::Read));
        for (buffer, n, operand, access) in bound.chain([(k.output, "out", &result, Access::ReadWrite)]) {
            let number = |bindings: &Vec<Binding>| bindings.len() as u32 + 1;
            match operand.split {
                None => bindings.push(Binding {
                    binding: number(&bindings),
                    name: n.to_string(),
                    buffer,
                    access,
                    offset: None,
                    size: None,
                }),
                Some(split) => {
                    let words = operand.storage.count(&operand.shape).eval(&BTreeMap::new()).unwrap_or(0);
                    for (c, (offset, size)) in split.ranges(words).enumerate() {
                        bindings.push(Binding {
                            binding: number(&bindings),
                            name: format!("{n}_{c}"),
                            buffer,
                            access,
                            offset: Some(offset),
                            size: Some(size),
                        });
                    }
                }
            }
        }
        if g.status.is_some() {
            let s = *status_buffer.get_or_insert_with(|| {
                buffers.push(WgslBuffer {
                    dtype: DType::I32,
                    storage: Storage::U32,
                    shape: vec![Dim::Static(1)],
                    elements: Count::elements(&[Dim::Static(1)]),
                    role: Role::Status,
                    provenance: String::new(),
                });
                buffers.len() - 1
            });
            bindings.push(Binding {
                binding: bindings.len() as u32 + 1,
                name: "status".into(),
                buffer: s,
                access: Access::ReadWrite,
                offset: Some(checked * STATUS_STRIDE),
                size: Some(4),
            });
            checked += 1;
        }
        let kernel = WgslKernel {
            name: kname,
            op: k.name.clone(),
            provenance: k.provenance.clone(),
            loc: k.loc.iter().map(ToString::to_string).collect(),
            phase: if i < n_init { Phase::Init } else { Phase::Run },
            entry: "main".into(),
            workgroup_size: [g.workgroup_size, 1, 1],
            workgroups: g.workgroups,
            bindings,
            workgroup_bytes: g.workgroup_bytes,
            failure: g.status,
            source: g.source,
        };
        validate::check(&kernel)?;
        out.push(kernel);
    }
    if let Some(s) = status_buffer {
        // One word per checked kernel, STATUS_STRIDE bytes apart.
        let words = (checked - 1) * (STATUS_STRIDE / 4) + 1;
        buffers[s].shape = vec![Dim::Static(words as usize)];
        buffers[s].elements = Count::elements(&buffers[s].shape);
    }
    Ok(WgslProgram {
        format: FORMAT.into(),
        version: VERSION,
        name: name.into(),
        dims,
        buffers,
        slots,
        kernels: out,
        outputs: p.outputs.iter().map(|(n, b)| NamedBuffer { name: n.clone(), buffer: *b }).collect(),
        constants,
    })
}

/// Per buffer, the schedule position of the last kernel reading it.
fn last_reads(p: &Program) -> BTreeMap<usize, usize> {
    let mut last = BTreeMap::new();
    for (k, kernel) in p.kernels.iter().enumerate() {
        for &i in &kernel.inputs {
            last.insert(i, k);
        }
    }
    last
}

/// Storage slots for the intermediates the `run` kernels write (`init` results and
/// everything else keep their own storage, since a later run reads them again). Reads of an
/// alias count as reads of the storage it views.
fn plan_slots(
    p: &Program,
    run: &[Kernel],
    fixed: &BTreeSet<usize>,
    root: &dyn Fn(usize) -> usize,
) -> BTreeMap<usize, usize> {
    let buffers: Vec<Buffer> = p
        .buffers
        .iter()
        .enumerate()
        .map(|(b, buf)| {
            let mut buf = buf.clone();
            if fixed.contains(&b) || root(b) != b {
                buf.kind = BufferKind::Constant(Op::Iota { axis: 0 });
            }
            buf
        })
        .collect();
    let kernels: Vec<Kernel> =
        run.iter().map(|k| Kernel { inputs: k.inputs.iter().map(|&i| root(i)).collect(), ..k.clone() }).collect();
    let outputs: Vec<(String, usize)> = p.outputs.iter().map(|(n, b)| (n.clone(), root(*b))).collect();
    MemoryPlan::new(&buffers, &kernels, &outputs).slot_of
}

fn generate(
    ctx: &emit::Ctx,
    head: &emit::Head,
    op: &Op,
    operands: &[Operand],
    out: &Operand,
) -> Result<Generated, String> {
    match op {
        Op::Reduce { op: r, axes, .. } => Ok(rows::reduce(ctx, head, *r, axes, &operands[0], out)),
        Op::LayerNorm { eps } => Ok(rows::norm(ctx, head, eps.0, true, operands, out)),
        Op::RmsNorm { eps } => Ok(rows::norm(ctx, head, eps.0, false, operands, out)),
        Op::Softmax { axis } => Ok(rows::softmax(ctx, head, *axis, &operands[0], out)),
        Op::CrossEntropy => Ok(rows::cross_entropy(ctx, head, &operands[0], &operands[1], out)),
        Op::MatMul => Ok(matmul::matmul(ctx, head, rustral_ir::Activation::None, operands, out)),
        Op::MatMulEpilogue { activation } => Ok(matmul::matmul(ctx, head, *activation, operands, out)),
        Op::Attention { scale, causal } => attention::attention(ctx, head, scale.0, *causal, operands, out),
        Op::CachedAttention { scale } => attention::cached_attention(ctx, head, scale.0, operands, out),
        Op::UpdateSlice { axis } => Ok(pointwise::update_slice(ctx, head, *axis, operands, out)),
        Op::Dequantize { format } => quant::dequantize(ctx, head, *format, operands, out),
        Op::QuantMatMul { format } => quant::quant_matmul(ctx, head, *format, operands, out),
        Op::Conv2d { .. }
        | Op::Conv2dEpilogue { .. }
        | Op::MaxPool2d { .. }
        | Op::AvgPool2d { .. }
        | Op::Unfold { .. }
        | Op::Fold { .. } => window::window(ctx, head, op, operands, out),
        // One invocation per output element: elementwise ops, layout ops, and the sources made
        // on the device (inputs, parameters and dense constants are bound, and say so there).
        Op::Unary(_)
        | Op::Binary(_)
        | Op::Where
        | Op::Cast { .. }
        | Op::Gelu { .. }
        | Op::Silu
        | Op::FusedElementwise { .. }
        | Op::Reshape { .. }
        | Op::Permute { .. }
        | Op::BroadcastTo { .. }
        | Op::Slice { .. }
        | Op::Concat { .. }
        | Op::Gather { .. }
        | Op::Input { .. }
        | Op::Param { .. }
        | Op::Constant { .. }
        | Op::Iota { .. }
        | Op::RandomUniform { .. } => pointwise::pointwise(ctx, head, op, operands, out),
    }
}

#[cfg(test)]
mod tests;
