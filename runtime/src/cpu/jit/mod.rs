//! `FusedElementwise` kernels compiled by Cranelift: one native function per body and
//! broadcast pattern (which arguments are a single value), compiled on first use and cached
//! for the life of the process. The row interpreter in `kernels.rs` remains for hosts that
//! Cranelift cannot target and as the baseline the benches compare against.
//!
//! `RUSTRAL_JIT_DISASM=1` prints each kernel's machine code to stderr as it is compiled, for
//! checking what a body became.

mod codegen;
mod tiles;

use super::Elementwise;
use super::broadcast::{for_row_bases, strides};
use codegen::{Helper, LANES};
use cranelift_codegen::ir::UserFuncName;
use cranelift_codegen::settings::{self, Configurable};
use cranelift_frontend::{FunctionBuilder, FunctionBuilderContext};
use cranelift_jit::{JITBuilder, JITModule};
use cranelift_module::{FuncId, Linkage, Module, default_libcall_names};
use rayon::prelude::*;
use rustral_ir::ElementwiseExpr;
use std::collections::HashMap;
use std::mem::MaybeUninit;
use std::sync::{Mutex, OnceLock};

/// The longest body the JIT compiles. Cranelift's time on one straight-line body grows faster
/// than its length (register allocation over thousands of live values); the passes cut fused
/// groups far below this (`fuse-elementwise`'s `MAX_GROUP_OPS`), so only a hand-written
/// `fused_elementwise` is longer, and the row interpreter runs it instead, in time linear in
/// its length.
pub(crate) const MAX_BODY_NODES: usize = 2_048;

/// A compiled body: `f(args, out, n)` writes `n` (a multiple of `LANES`) outputs.
type KernelFn = unsafe extern "C" fn(*const *const f32, *mut f32, usize);

/// The compiled kernels, keyed by body and which arguments are broadcast scalars.
struct Jit {
    module: JITModule,
    helpers: HashMap<Helper, FuncId>,
    /// Function addresses as integers (raw pointers are not `Send`), or why compiling failed.
    kernels: HashMap<(ElementwiseExpr, Vec<bool>), Result<usize, String>>,
    /// Numbers the functions' symbol names.
    next: u32,
}

fn jit() -> &'static Mutex<Result<Jit, String>> {
    static JIT: OnceLock<Mutex<Result<Jit, String>>> = OnceLock::new();
    JIT.get_or_init(|| Mutex::new(Jit::new()))
}

impl Jit {
    fn new() -> Result<Jit, String> {
        let mut flags = settings::builder();
        flags.set("opt_level", "speed").map_err(|e| e.to_string())?;
        flags.set("is_pic", "false").map_err(|e| e.to_string())?;
        flags.set("use_colocated_libcalls", "false").map_err(|e| e.to_string())?;
        let isa = cranelift_native::builder()
            .map_err(|e| format!("Cranelift does not support this host: {e}"))?
            .finish(settings::Flags::new(flags))
            .map_err(|e| e.to_string())?;
        let mut builder = JITBuilder::with_isa(isa, default_libcall_names());
        builder.symbol(Helper::Unary.symbol(), helpers::unary as *const u8);
        builder.symbol(Helper::Pow.symbol(), helpers::pow as *const u8);
        let mut module = JITModule::new(builder);
        let mut helpers = HashMap::new();
        for h in Helper::ALL {
            let sig = codegen::helper_signature(module.make_signature());
            let id = module.declare_function(h.symbol(), Linkage::Import, &sig).map_err(|e| e.to_string())?;
            helpers.insert(h, id);
        }
        Ok(Jit { module, helpers, kernels: HashMap::new(), next: 0 })
    }

    fn compile(&mut self, body: &ElementwiseExpr, scalar: &[bool]) -> Result<usize, String> {
        if body.nodes.len() > MAX_BODY_NODES {
            return Err(format!("a body of {} nodes is over the JIT's {MAX_BODY_NODES}", body.nodes.len()));
        }
        let name = format!("fused_elementwise_{}", self.next);
        self.next += 1;
        let sig = codegen::kernel_signature(self.module.make_signature());
        let id = self.module.declare_function(&name, Linkage::Local, &sig).map_err(|e| e.to_string())?;
        let mut ctx = self.module.make_context();
        ctx.func.signature = sig;
        ctx.func.name = UserFuncName::user(0, id.as_u32());
        let mut fctx = FunctionBuilderContext::new();
        {
            let mut b = FunctionBuilder::new(&mut ctx.func, &mut fctx);
            let mut refs = HashMap::new();
            for (&h, &hid) in &self.helpers {
                refs.insert(h, self.module.declare_func_in_func(hid, b.func));
            }
            codegen::emit(&mut b, body, scalar, |h| refs[&h]);
            b.finalize(self.module.target_config());
        }
        ctx.set_disasm(std::env::var_os("RUSTRAL_JIT_DISASM").is_some());
        self.module.define_function(id, &mut ctx).map_err(|e| format!("{e:?}"))?;
        if let Some(code) = ctx.compiled_code().and_then(|c| c.vcode.as_ref()) {
            eprintln!("{code}");
        }
        self.module.finalize_definitions().map_err(|e| e.to_string())?;
        Ok(self.module.get_finalized_function(id) as usize)
    }
}

/// The compiled kernel for `body` with these scalar arguments, compiling it on first use.
/// An error says why Cranelift could not compile it (the caller then interprets the body).
fn kernel(body: &ElementwiseExpr, scalar: &[bool]) -> Result<KernelFn, String> {
    let mut guard = jit().lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let jit = guard.as_mut().map_err(|e| e.clone())?;
    let key = (body.clone(), scalar.to_vec());
    let address = match jit.kernels.get(&key) {
        Some(found) => found.clone(),
        None => {
            let compiled = jit.compile(body, scalar);
            jit.kernels.insert(key, compiled.clone());
            compiled
        }
    }?;
    // SAFETY: `address` is a function finalized by the JIT module, which lives (in a static)
    // for the rest of the process, with the signature `codegen::kernel_signature` builds.
    Ok(unsafe { std::mem::transmute::<usize, KernelFn>(address) })
}

/// How operands are read: as flat runs the length of the output (or single values), or a
/// row of the output at a time through broadcast strides. `scalar[i]`: operand `i` is one
/// value for the whole run or row.
enum Layout {
    Flat { scalar: Vec<bool> },
    Rows { strides: Vec<Vec<usize>>, scalar: Vec<bool> },
}

fn layout(shapes: &[&[usize]], out: &[usize]) -> Layout {
    let total: usize = out.iter().product();
    let count = |s: &[usize]| s.iter().product::<usize>();
    if shapes.iter().all(|s| count(s) == total || count(s) == 1) {
        return Layout::Flat { scalar: shapes.iter().map(|s| count(s) == 1 && total != 1).collect() };
    }
    let width = out.last().copied().unwrap_or(1);
    let strides: Vec<Vec<usize>> = shapes.iter().map(|s| strides(s, out)).collect();
    let scalar = strides.iter().map(|st| width == 1 || st.last().is_none_or(|&s| s == 0)).collect();
    Layout::Rows { strides, scalar }
}

/// Compile `body` for operands of these shapes now, so that runs do not; says why not when
/// Cranelift cannot. A body that runs a tile at a time has nothing to compile.
pub(super) fn warm(body: &ElementwiseExpr, shapes: &[&[usize]], out: &[usize]) -> Result<(), String> {
    if tiles::prefers_tiles(body) {
        return Ok(());
    }
    match layout(shapes, out) {
        Layout::Flat { scalar } | Layout::Rows { scalar, .. } => kernel(body, &scalar).map(|_| ()),
    }
}

/// Elements per parallel task on the flat path.
const BLOCK: usize = 1 << 14;

/// What evaluates a run of the body: a Cranelift kernel, or the tile loops (`tiles.rs`) with
/// one thread's scratch.
#[derive(Clone, Copy)]
enum Kernel {
    Jit(KernelFn),
    Tiles,
}

impl Kernel {
    /// Evaluate `body` over `dst` (which may start uninitialised; true means every value was
    /// written) from operands that start at the run's first value (or hold its one value when
    /// scalar); false when an operand is shorter than the run.
    fn apply(
        self,
        body: &ElementwiseExpr,
        ops: &[tiles::Operand<'_>],
        dst: &mut [MaybeUninit<f32>],
        scratch: &mut Vec<[f32; tiles::TILE]>,
    ) -> bool {
        match self {
            Kernel::Jit(f) => {
                if ops.iter().any(|o| o.data.len() < if o.scalar { 1 } else { dst.len() }) {
                    return false;
                }
                let ptrs: Vec<(*const f32, bool)> = ops.iter().map(|o| (o.data.as_ptr(), o.scalar)).collect();
                call(f, &ptrs, dst);
                true
            }
            Kernel::Tiles => {
                if scratch.is_empty() {
                    *scratch = tiles::scratch(body);
                }
                tiles::run(body, ops, dst, scratch)
            }
        }
    }
}

/// Evaluate `body` over f32 operands broadcast to `out`, or say why the JIT cannot.
/// `mode` chooses Cranelift or the tile loops (`Elementwise::Jit`: as `tiles::prefers_tiles`
/// says).
pub(super) fn run(
    body: &ElementwiseExpr,
    operands: &[(&[f32], &[usize])],
    out: &[usize],
    mode: Elementwise,
) -> Result<Vec<f32>, String> {
    let total: usize = out.iter().product();
    // Not zeroed first: every run writes all of its values (or the result is dropped unread),
    // and zeroing a large output is a pass over memory as long as the kernel's own writes.
    let mut result: Vec<f32> = Vec::with_capacity(total);
    if total == 0 {
        return Ok(result);
    }
    let spare = &mut result.spare_capacity_mut()[..total];
    let shapes: Vec<&[usize]> = operands.iter().map(|(_, s)| *s).collect();
    let layout = layout(&shapes, out);
    let scalar = match &layout {
        Layout::Flat { scalar } | Layout::Rows { scalar, .. } => scalar,
    };
    let tiled = match mode {
        Elementwise::Tiles => tiles::fits(body),
        Elementwise::Cranelift => false,
        Elementwise::Jit | Elementwise::Interpreted => tiles::prefers_tiles(body),
    };
    let k = if tiled { Kernel::Tiles } else { Kernel::Jit(kernel(body, scalar)?) };
    let done = match &layout {
        Layout::Flat { scalar } => spare
            .par_chunks_mut(BLOCK)
            .enumerate()
            .map_init(Vec::new, |scratch, (c, dst)| {
                let start = c * BLOCK;
                let ops: Vec<tiles::Operand<'_>> = operands
                    .iter()
                    .zip(scalar)
                    .map(|((d, _), &s)| tiles::Operand {
                        data: if s { d } else { d.get(start..).unwrap_or_default() },
                        scalar: s,
                    })
                    .collect();
                k.apply(body, &ops, dst, scratch)
            })
            .all(|ok| ok),
        Layout::Rows { strides, scalar } => {
            let width = out.last().copied().unwrap_or(1);
            let rows_per_block = (BLOCK / width).max(1);
            spare
                .par_chunks_mut(rows_per_block * width)
                .enumerate()
                .map_init(Vec::new, |scratch, (blk, dst)| {
                    let first = blk * rows_per_block;
                    let mut ops: Vec<tiles::Operand<'_>> = Vec::with_capacity(operands.len());
                    let mut ok = true;
                    for_row_bases(out, strides, first..first + dst.len() / width, |r, bases| {
                        ops.clear();
                        ops.extend(operands.iter().zip(bases).zip(scalar).map(|(((d, _), &b), &s)| tiles::Operand {
                            data: d.get(b..).unwrap_or_default(),
                            scalar: s,
                        }));
                        ok &= k.apply(body, &ops, &mut dst[(r - first) * width..(r - first + 1) * width], scratch);
                    });
                    ok
                })
                .all(|ok| ok)
        }
    };
    if !done {
        return Err("an operand is shorter than the output it is broadcast to".to_string());
    }
    // SAFETY: the runs cover `0..total` and each one that returned true wrote all its values.
    unsafe { result.set_len(total) };
    Ok(result)
}

/// Run `f` over `dst`, writing every value: the whole multiple of `LANES` in place, the last
/// few values through zero-padded copies (so the kernel never reads or writes past a slice).
fn call(f: KernelFn, args: &[(*const f32, bool)], dst: &mut [MaybeUninit<f32>]) {
    let n = dst.len();
    let main = n - n % LANES;
    let ptrs: Vec<*const f32> = args.iter().map(|&(p, _)| p).collect();
    if main > 0 {
        // SAFETY: every non-scalar pointer has at least `n >= main` readable values (the
        // callers slice them from a row or block of the output's length), `dst` has `n`.
        unsafe { f(ptrs.as_ptr(), dst.as_mut_ptr().cast::<f32>(), main) };
    }
    let tail = n - main;
    if tail > 0 {
        let pads: Vec<[f32; LANES]> = args
            .iter()
            .map(|&(p, scalar)| {
                let mut pad = [0.0f32; LANES];
                let count = if scalar { 1 } else { tail };
                // SAFETY: as above: `count` values remain after offset `main` (or one scalar).
                let src = unsafe { std::slice::from_raw_parts(if scalar { p } else { p.wrapping_add(main) }, count) };
                pad[..count].copy_from_slice(src);
                pad
            })
            .collect();
        let pad_ptrs: Vec<*const f32> = pads.iter().map(|p| p.as_ptr()).collect();
        let mut out = [0.0f32; LANES];
        // SAFETY: `LANES` values behind every pointer, `LANES` to write.
        unsafe { f(pad_ptrs.as_ptr(), out.as_mut_ptr(), LANES) };
        dst[main..].write_copy_of_slice(&out[..tail]);
    }
}

/// The functions JIT code calls for ops it has no inline form of: four lanes each, the same
/// scalar functions the interpreter uses.
mod helpers {
    use rustral_ir::{BinaryOp, UnaryOp};

    fn lanes(a: *const f32, b: *const f32, out: *mut f32, f: impl Fn(f32, f32) -> f32) {
        // SAFETY: the JIT passes three 16-byte stack buffers.
        let (a, b, out) = unsafe {
            (std::slice::from_raw_parts(a, 4), std::slice::from_raw_parts(b, 4), std::slice::from_raw_parts_mut(out, 4))
        };
        for i in 0..4 {
            out[i] = f(a[i], b[i]);
        }
    }

    /// `b` holds the op's index in `UnaryOp::ALL` (as f32, the same in every lane).
    pub extern "C" fn unary(a: *const f32, b: *const f32, out: *mut f32) {
        lanes(a, b, out, |x, code| match UnaryOp::ALL.get(code as usize) {
            Some(&u) => super::super::kernels::unary(u, x),
            None => f32::NAN,
        });
    }

    pub extern "C" fn pow(a: *const f32, b: *const f32, out: *mut f32) {
        lanes(a, b, out, |x, y| super::super::kernels::binary(BinaryOp::Pow, x, y));
    }
}

#[cfg(test)]
mod tests;
