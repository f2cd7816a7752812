//! Writing one shader: the header comment, the `dims` uniform, named storage bindings,
//! workgroup memory, the helper functions the body used, and `main`. Dims become WGSL
//! expressions here: a static dim is a literal, a symbolic one reads the uniform.

use super::helpers::Helper;
use super::{Access, Operand, Split, Storage};
use rustral_ir::{Dim, Op, op_text};
use std::collections::BTreeSet;
use std::fmt::Write;

/// What every shader of a program shares: the order of the symbolic dims.
pub(crate) struct Ctx<'a> {
    pub dims: &'a [String],
}

impl Ctx<'_> {
    /// A dim as a u32 expression.
    pub fn dim(&self, d: &Dim) -> String {
        match d {
            // naga rejects a division by a constant zero even where it never runs, so an empty
            // dim reads as a run-time zero.
            Dim::Static(0) => "(dims.d[0].x * 0u)".into(),
            Dim::Static(n) => format!("{n}u"),
            Dim::Sym(s) => {
                let i = self.dims.iter().position(|x| x == s).expect("every symbol is in the dims list");
                format!("dims.d[{}].{}", i / 4, ["x", "y", "z", "w"][i % 4])
            }
        }
    }

    /// The product of dims as a u32 expression (static factors folded).
    pub fn prod(&self, dims: &[Dim]) -> String {
        let mut k: u64 = 1;
        let mut parts = Vec::new();
        for d in dims {
            match d {
                Dim::Static(n) if *n > 0 => k *= *n as u64,
                _ => parts.push(self.dim(d)),
            }
        }
        if k != 1 || parts.is_empty() {
            parts.insert(0, format!("{k}u"));
        }
        if parts.len() == 1 { parts.remove(0) } else { format!("({})", parts.join(" * ")) }
    }

    /// Row-major strides of a shape, as u32 expressions.
    pub fn strides(&self, dims: &[Dim]) -> Vec<String> {
        (0..dims.len()).map(|k| self.prod(&dims[k + 1..])).collect()
    }

    /// The offset into `operand` (aligned right against `out`, broadcasting its static-1
    /// dims) of the element whose index along each `out` axis is `idx[axis]`.
    pub fn offset(&self, idx: &[String], out: &[Dim], operand: &[Dim]) -> String {
        let shift = out.len() - operand.len();
        let strides = self.strides(operand);
        let terms: Vec<String> = operand
            .iter()
            .enumerate()
            .filter(|(k, d)| !d.is_one() && idx[k + shift] != "0u")
            .map(|(k, _)| {
                if strides[k] == "1u" { idx[k + shift].clone() } else { format!("{} * {}", idx[k + shift], strides[k]) }
            })
            .collect();
        if terms.is_empty() { "0u".into() } else { terms.join(" + ") }
    }

    /// Lines splitting the linear index `lin` into one `let` per axis of `dims`, named
    /// `{prefix}{axis}`; axes not in `keep` are skipped (their extent still divides).
    pub fn unravel(&self, lin: &str, prefix: &str, dims: &[Dim], keep: impl Fn(usize) -> bool) -> String {
        let mut s = String::new();
        let axes: Vec<usize> = (0..dims.len()).filter(|&k| keep(k)).collect();
        if axes.is_empty() {
            return s;
        }
        if axes.len() == 1 {
            writeln!(s, "    let {prefix}{} = {lin};", axes[0]).expect("write to String");
            return s;
        }
        writeln!(s, "    var {prefix}rem = {lin};").expect("write to String");
        for (n, &k) in axes.iter().enumerate().rev() {
            if n == 0 {
                writeln!(s, "    let {prefix}{k} = {prefix}rem;").expect("write to String");
            } else {
                let d = self.dim(&dims[k]);
                writeln!(s, "    let {prefix}{k} = {prefix}rem % {d};").expect("write to String");
                writeln!(s, "    {prefix}rem = {prefix}rem / {d};").expect("write to String");
            }
        }
        s
    }
}

/// What the header comment names.
pub(crate) struct Head<'a> {
    pub index: usize,
    pub graph: &'a str,
    pub op: &'a Op,
    pub provenance: &'a str,
    /// The model source locations the kernel computes.
    pub loc: &'a [rustral_ir::SourceLoc],
}

/// One shader under construction.
pub(crate) struct Shader {
    header: Vec<String>,
    bindings: Vec<(String, Storage, Access, Option<Split>)>,
    /// What a nonzero status word from this kernel means (the data-dependent failures its
    /// checks detect, joined with "or"); None when it has no checks.
    pub status: Option<String>,
    helpers: BTreeSet<Helper>,
    /// Module-scope declarations of this kernel's own (functions reading its bindings).
    items: Vec<String>,
    shared: Vec<String>,
    shared_bytes: u32,
    body: String,
    pub workgroup_size: u32,
    /// Extra indent levels of the lines that follow (see [`Shader::nest`]).
    nesting: usize,
}

impl Shader {
    /// A shader for `head` reading `inputs` (binding names and operands) into `out`.
    pub fn new(head: &Head, inputs: &[(&str, &Operand)], out: &Operand, workgroup_size: u32) -> Shader {
        let shape = |o: &Operand| {
            let dims: Vec<String> = o.shape.iter().map(|d| d.to_string()).collect();
            format!("{}[{}]", o.dtype, dims.join(", "))
        };
        let mut header = vec![
            format!("// Rustral kernel {} of graph {:?}: {}", head.index, head.graph, op_text(head.op)),
            format!("// node: {:?}", head.provenance),
        ];
        if !head.loc.is_empty() {
            header.push(format!("// source: {}", rustral_ir::loc_summary(head.loc, usize::MAX)));
        }
        header.push(format!("// out: {}", shape(out)));
        for (n, o) in inputs {
            header.push(format!("// {n}: {}", shape(o)));
        }
        let mut bindings: Vec<(String, Storage, Access, Option<Split>)> =
            inputs.iter().map(|(n, o)| (n.to_string(), o.storage, Access::Read, o.split)).collect();
        bindings.push(("out".into(), out.storage, Access::ReadWrite, out.split));
        Shader {
            header,
            bindings,
            status: None,
            helpers: BTreeSet::new(),
            items: vec![],
            shared: vec![],
            shared_bytes: 0,
            body: String::new(),
            workgroup_size,
            nesting: 0,
        }
    }

    /// Ask for a helper function (and those it calls).
    pub fn need(&mut self, h: Helper) {
        for d in h.deps() {
            self.need(*d);
        }
        self.helpers.insert(h);
    }

    /// Add a module-scope declaration (a function that reads this kernel's bindings, a
    /// private variable), once.
    pub fn item(&mut self, source: String) {
        if !self.items.contains(&source) {
            self.items.push(source);
        }
    }

    /// Declare `var<workgroup> name: array<f32, n>`.
    pub fn shared(&mut self, name: &str, n: u32) {
        self.shared.push(format!("var<workgroup> {name}: array<f32, {n}>;"));
        self.shared_bytes += 4 * n;
    }

    /// Append body lines (already indented).
    pub fn push(&mut self, lines: &str) {
        let extra = "    ".repeat(self.nesting);
        for l in lines.lines() {
            writeln!(self.body, "{extra}{l}").expect("write to String");
        }
    }

    /// Append one body line at the given indent level.
    pub fn line(&mut self, indent: usize, line: &str) {
        writeln!(self.body, "{}{line}", "    ".repeat(indent + self.nesting)).expect("write to String");
    }

    /// Indent the lines that follow one level deeper (`true`) or back (`false`): a generator
    /// wrapping a body written at level 1 in a loop.
    pub fn nest(&mut self, deeper: bool) {
        self.nesting = if deeper { self.nesting + 1 } else { self.nesting.saturating_sub(1) };
    }

    /// Statement recording a data-dependent failure of this kernel; `why` is what the
    /// runtime reports when it reads the status word back.
    pub fn fail(&mut self, why: &str) -> String {
        match &mut self.status {
            Some(s) if !s.split(" or ").any(|w| w == why) => {
                s.push_str(" or ");
                s.push_str(why);
            }
            Some(_) => {}
            None => self.status = Some(why.to_string()),
        }
        "atomicStore(&status, 1u);".to_string()
    }

    /// Word `idx` of binding `name` as stored (its storage's WGSL type): `name[idx]`, or the
    /// accessor that picks the range of a split binding.
    pub fn at(&self, name: &str, idx: &str) -> String {
        match self.bindings.iter().find(|b| b.0 == name).and_then(|b| b.3) {
            Some(_) => format!("{name}_at({idx})"),
            None => format!("{name}[{idx}]"),
        }
    }

    /// Statement storing the word `v` (of `out`'s WGSL type) at `out[idx]`.
    pub fn put(&self, idx: &str, v: &str) -> String {
        match self.bindings.last().expect("out is bound").3 {
            Some(_) => format!("out_put({idx}, {v});"),
            None => format!("out[{idx}] = {v};"),
        }
    }

    /// Element `idx` of binding `name` as an f32 value.
    pub fn load(&self, name: &str, idx: &str) -> String {
        let storage = self.bindings.iter().find(|b| b.0 == name).map_or(Storage::F32, |b| b.1);
        match storage {
            Storage::F32 => self.at(name, idx),
            Storage::Bytes => {
                format!("f32(({} >> ((({idx}) & 3u) * 8u)) & 255u)", self.at(name, &format!("({idx}) >> 2u")))
            }
            _ => format!("f32({})", self.at(name, idx)),
        }
    }

    /// Statement writing the f32 value `v` (already rounded to the dtype) to `out[idx]`. For
    /// `bytes` storage, whose words four invocations cannot share, the statement adds byte `i`
    /// to the word `packed` that the per-word loop of a byte kernel writes once (see
    /// `pointwise`); `idx` must then be that loop's `i`.
    pub fn store(&mut self, idx: &str, v: &str) -> String {
        let storage = self.bindings.last().expect("out is bound").1;
        match storage {
            Storage::F32 => self.put(idx, v),
            Storage::I32 => {
                self.need(Helper::ToInt);
                self.put(idx, &format!("to_int({v})"))
            }
            Storage::U32 => self.put(idx, &format!("select(1u, 0u, {v} == 0.0)")),
            Storage::Bytes => format!("packed = packed | ((u32({v}) & 255u) << (({idx} & 3u) * 8u));"),
        }
    }

    /// Workgroup memory in bytes.
    pub fn workgroup_bytes(&self) -> u32 {
        self.shared_bytes
    }

    /// The whole shader.
    pub fn finish(self, ctx: &Ctx) -> String {
        let mut s = self.header.join("\n");
        s.push('\n');
        if !ctx.dims.is_empty() {
            let names: Vec<String> =
                ctx.dims.iter().map(|d| format!("{d} = {}", ctx.dim(&Dim::Sym(d.clone())))).collect();
            writeln!(s, "// symbolic dims: {}", names.join(", ")).expect("write to String");
        }
        let words = ctx.dims.len().div_ceil(4).max(1);
        write!(s, "\nstruct Dims {{\n    d: array<vec4<u32>, {words}>,\n}}\n\n").expect("write to String");
        s.push_str("@group(0) @binding(0) var<uniform> dims: Dims;\n");
        let mut number = 0;
        let mut accessors = Vec::new();
        for (name, storage, access, split) in &self.bindings {
            let mode = match access {
                Access::Read => "read",
                Access::ReadWrite => "read_write",
            };
            let ty = storage.wgsl();
            let names: Vec<String> = match split {
                None => vec![name.clone()],
                Some(split) => {
                    accessors.push(accessor(name, ty, *access, *split));
                    (0..split.count).map(|c| format!("{name}_{c}")).collect()
                }
            };
            for n in names {
                number += 1;
                writeln!(s, "@group(0) @binding({number}) var<storage, {mode}> {n}: array<{ty}>;")
                    .expect("write to String");
            }
        }
        if self.status.is_some() {
            writeln!(s, "@group(0) @binding({}) var<storage, read_write> status: atomic<u32>;", number + 1)
                .expect("write to String");
        }
        if !self.shared.is_empty() {
            s.push('\n');
            for l in &self.shared {
                s.push_str(l);
                s.push('\n');
            }
        }
        for h in &self.helpers {
            s.push('\n');
            s.push_str(h.source());
        }
        for item in accessors.iter().chain(&self.items) {
            s.push('\n');
            s.push_str(item);
        }
        write!(
            s,
            "\n@compute @workgroup_size({})\nfn main(\n    @builtin(workgroup_id) wid: vec3<u32>,\n    @builtin(num_workgroups) nwg: vec3<u32>,\n    @builtin(local_invocation_index) lid: u32,\n) {{\n    let group = wid.x + wid.y * nwg.x;\n",
            self.workgroup_size
        )
        .expect("write to String");
        s.push_str(&self.body);
        s.push_str("}\n");
        s
    }
}

/// The function a shader reads (`{name}_at(i)`) or writes (`out_put(i, v)`) a split binding
/// with: word `i` of the whole buffer, found in the range that holds it.
fn accessor(name: &str, ty: &str, access: Access, split: Split) -> String {
    let per = split.words;
    let last = split.count - 1;
    let mut s = String::new();
    match access {
        Access::Read => {
            writeln!(s, "fn {name}_at(i: u32) -> {ty} {{").expect("write to String");
            for c in 0..last {
                let from = if c == 0 { "i".to_string() } else { format!("i - {}u", c * per) };
                writeln!(s, "    if (i < {}u) {{ return {name}_{c}[{from}]; }}", (c + 1) * per)
                    .expect("write to String");
            }
            writeln!(s, "    return {name}_{last}[i - {}u];", last * per).expect("write to String");
        }
        Access::ReadWrite => {
            writeln!(s, "fn {name}_put(i: u32, v: {ty}) {{").expect("write to String");
            for c in 0..last {
                let from = if c == 0 { "i".to_string() } else { format!("i - {}u", c * per) };
                writeln!(s, "    if (i < {}u) {{ {name}_{c}[{from}] = v; return; }}", (c + 1) * per)
                    .expect("write to String");
            }
            writeln!(s, "    {name}_{last}[i - {}u] = v;", last * per).expect("write to String");
        }
    }
    s.push_str("}\n");
    s
}
