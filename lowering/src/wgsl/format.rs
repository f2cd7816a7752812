//! The WGSL program's on-disk format: the types `program.json` serialises
//! (`schemas/wgsl-program.schema.json` describes them for hosts in other languages), apart from
//! the lowering that fills them, so a host reads this module and nothing else.

use rustral_ir::{DType, Dim};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The format name written in every `program.json`.
pub const FORMAT: &str = "rustral-wgsl-program";
/// The format version; bumped when the layout changes incompatibly (2: `bytes` storage and
/// one status word per checked kernel at its binding's offset; 3: bindings of a range,
/// `offset` and `size`, for buffers larger than one binding).
pub const VERSION: u32 = 3;

/// A WGSL program: what a WebGPU host needs to run a lowered graph.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WgslProgram {
    /// Always [`FORMAT`].
    pub format: String,
    /// The layout version, [`VERSION`].
    pub version: u32,
    /// The graph's name.
    pub name: String,
    /// Symbolic dims in the order the `dims` uniform holds them.
    pub dims: Vec<String>,
    /// Buffers by id.
    pub buffers: Vec<WgslBuffer>,
    /// Storage slots: buffers sharing a slot share one device allocation of the largest
    /// member's size (a liveness plan over the `run` kernels).
    pub slots: usize,
    /// Kernels in dispatch order (`init` ones first).
    pub kernels: Vec<WgslKernel>,
    /// Named outputs.
    pub outputs: Vec<NamedBuffer>,
    /// Dense constants' values by buffer id (written beside the program as tensors named
    /// `const.<id>`).
    #[serde(skip)]
    pub constants: BTreeMap<usize, Vec<f64>>,
}

/// An output name and its buffer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NamedBuffer {
    /// The graph's output name.
    pub name: String,
    /// Buffer id.
    pub buffer: usize,
}

/// How a buffer's elements are stored in 4-byte words.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Storage {
    /// f32, f16, bf16 and f64 values, one word each.
    F32,
    /// i32 and i64 values, one word each.
    I32,
    /// bool as 0 or 1, one word each.
    U32,
    /// u8 (quantized blocks), four to a u32 word, little-endian: byte `i` of the tensor is
    /// bits `8 * (i % 4)..` of word `i / 4`, so the buffer holds the file's bytes as they are.
    Bytes,
}

impl Storage {
    /// The storage of a dtype.
    pub fn of(dtype: DType) -> Storage {
        match dtype {
            DType::F16 | DType::BF16 | DType::F32 | DType::F64 => Storage::F32,
            DType::I32 | DType::I64 => Storage::I32,
            DType::Bool => Storage::U32,
            DType::U8 => Storage::Bytes,
        }
    }

    /// Words holding `elements` elements.
    pub fn words(self, elements: u64) -> u64 {
        match self {
            Storage::Bytes => elements.div_ceil(4),
            _ => elements,
        }
    }

    /// The storage words of a shape, as an expression of its dims.
    pub fn count(self, shape: &[Dim]) -> Count {
        Count::ceil_div(shape, if self == Storage::Bytes { 4 } else { 1 })
    }

    /// The WGSL element type.
    pub fn wgsl(self) -> &'static str {
        match self {
            Storage::F32 => "f32",
            Storage::I32 => "i32",
            Storage::U32 | Storage::Bytes => "u32",
        }
    }
}

/// What a buffer holds.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Role {
    /// Fed per run.
    Input {
        /// The input's name.
        name: String,
    },
    /// Bound once; stored beside the program under this name.
    Param {
        /// The parameter's name.
        name: String,
    },
    /// Constant data stored beside the program under `tensor`.
    Constant {
        /// The tensor's name in the parameter file.
        tensor: String,
    },
    /// Written by a kernel.
    Intermediate {
        /// Storage slot shared with other intermediates whose lives do not overlap; `None` for
        /// the results of `init` kernels, which keep their own storage.
        slot: Option<usize>,
    },
    /// The same storage as buffer `of`, seen with this buffer's shape: a reshape, which
    /// keeps the row-major order and so needs no kernel, or an `update_slice`, whose kernel
    /// writes its update into `of` in place (a KV cache that stays on the device).
    Alias {
        /// The buffer whose storage it is (never itself an alias).
        of: usize,
    },
    /// The status words: one atomic u32 per kernel with data checks, [`STATUS_STRIDE`] bytes
    /// apart, each kernel binding its own word (its binding's `offset`); a word is 0, or
    /// nonzero once its kernel hit a data-dependent error. A word per kernel, rather than one
    /// word holding the kernel's index, keeps that index out of the shader text, so the
    /// shaders of a model's layers are identical and a host compiles each once.
    Status,
}

/// A typed buffer.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WgslBuffer {
    /// The IR dtype of its values.
    pub dtype: DType,
    /// How they are stored.
    pub storage: Storage,
    /// The IR shape.
    pub shape: Vec<Dim>,
    /// Storage words (4 bytes each): the element count, a quarter of it rounded up for
    /// `bytes` storage.
    pub elements: Count,
    /// What it holds.
    pub role: Role,
    /// Module path of the node that made it.
    pub provenance: String,
}

/// When a kernel runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Phase {
    /// Once after parameters are bound and whenever the dims change: its inputs are
    /// parameters, constants and other `init` results only (weight transposes, iotas, masks).
    Init,
    /// Every run.
    Run,
}

/// A binding's access mode.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Access {
    /// `var<storage, read>`.
    Read,
    /// `var<storage, read_write>`.
    ReadWrite,
}

/// A shader's lines without its comment lines: what it means. Kernels of a model's layers
/// differ only in their header comments, so hosts key pipelines (and dumps) by this.
pub fn code_lines(source: &str) -> impl Iterator<Item = &str> {
    source.lines().filter(|l| !l.trim_start().starts_with("//"))
}

/// Bytes between two kernels' status words: 256, the largest `minStorageBufferOffsetAlignment`
/// WebGPU allows, so every adapter can bind each word at its offset.
pub const STATUS_STRIDE: u64 = 256;

/// One storage binding of a kernel (group 0; binding 0 is always the `dims` uniform).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Binding {
    /// The binding number.
    pub binding: u32,
    /// The WGSL variable's name.
    pub name: String,
    /// Buffer id.
    pub buffer: usize,
    /// Access mode.
    pub access: Access,
    /// Where the bound range starts, in bytes: on the status binding, this kernel's word in
    /// the status buffer; on a range of a buffer too large for one binding, that range's
    /// start (a multiple of `minStorageBufferOffsetAlignment`). Absent: 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub offset: Option<u64>,
    /// Bytes the binding covers from `offset` (4 for the status word, the range's length for
    /// a range of a split buffer). Absent: the whole buffer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<u64>,
}

/// One compute shader and how to dispatch it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WgslKernel {
    /// Unique name, also the shader's file name without `.wgsl`.
    pub name: String,
    /// The IR op it computes.
    pub op: String,
    /// Module path of the (fused) node.
    pub provenance: String,
    /// The model source locations it computes, `file:line:col` each (a fused kernel's are
    /// those of every op it replaced); absent when unknown.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub loc: Vec<String>,
    /// When it runs.
    pub phase: Phase,
    /// Entry point.
    pub entry: String,
    /// `@workgroup_size`.
    pub workgroup_size: [u32; 3],
    /// Total workgroups (dispatched as the module docs say).
    pub workgroups: Count,
    /// Storage bindings.
    pub bindings: Vec<Binding>,
    /// Workgroup memory in bytes (checked against the adapter's limit).
    pub workgroup_bytes: u32,
    /// What it means when this kernel sets the status word (an index out of range, say):
    /// the message a host reports, naming the kernel. Absent for kernels without checks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure: Option<String>,
    /// The WGSL source (written as `<name>.wgsl` on disk).
    #[serde(skip)]
    pub source: String,
}

/// A product of terms `ceil(factor * prod(dims) / div)`: element counts (`div` 1) and
/// workgroup counts, as expressions of the symbolic dims.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Count(pub Vec<Term>);

/// One factor of a [`Count`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Term {
    /// Static factor.
    pub factor: u64,
    /// Symbolic dims multiplied in.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dims: Vec<String>,
    /// Divisor, rounding up.
    #[serde(default = "one", skip_serializing_if = "is_one")]
    pub div: u64,
}

fn one() -> u64 {
    1
}

fn is_one(x: &u64) -> bool {
    *x == 1
}

impl Count {
    /// The element count of a shape.
    pub fn elements(shape: &[Dim]) -> Count {
        Count::ceil_div(shape, 1)
    }

    /// `ceil(prod(shape) / div)`.
    pub fn ceil_div(shape: &[Dim], div: u64) -> Count {
        let mut t = Term { factor: 1, dims: vec![], div };
        for d in shape {
            match d {
                Dim::Static(n) => t.factor *= *n as u64,
                Dim::Sym(s) => t.dims.push(s.clone()),
            }
        }
        Count(vec![t])
    }

    /// This count times another.
    pub fn times(mut self, other: Count) -> Count {
        self.0.extend(other.0);
        self
    }

    /// The value under a binding of the symbolic dims.
    pub fn eval(&self, binding: &BTreeMap<String, usize>) -> Result<u64, String> {
        let mut total: u64 = 1;
        for t in &self.0 {
            let mut v = t.factor;
            for d in &t.dims {
                let n = binding.get(d).ok_or_else(|| format!("symbol {d} is not bound"))?;
                v = v.checked_mul(*n as u64).ok_or("size overflows u64")?;
            }
            if t.div == 0 {
                return Err("a count divides by zero".into());
            }
            total = total.checked_mul(v.div_ceil(t.div)).ok_or("size overflows u64")?;
        }
        Ok(total)
    }
}
