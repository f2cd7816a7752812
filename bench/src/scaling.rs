//! Compile time against graph size: the O2 passes, lowering and the CPU target's kernel
//! compilation (the Cranelift JIT) timed on graphs of 1k to 100k nodes and on GPT-2 of 12 to
//! 2,000 layers. Compile time per node should stay flat: no pass may do work quadratic in
//! the graph, the number of fused groups, a fused body's length or a region's size.
//!
//! Each point is measured in fresh processes (`rustral-bench scaling --point`), because the
//! JIT caches kernels for the life of a process and a smaller point would warm a larger one;
//! the harness keeps the median of three.

use rustral_frontend::nn::{LayerNorm, Module};
use rustral_frontend::{DType, Dim, ForwardCtx, Init, Result, Tensor, TraceOptions, Traced, trace};
use rustral_lowering::lower;
use rustral_models::{Gpt2, Gpt2Config};
use rustral_passes::{OptLevel, PassManager};
use rustral_runtime::cpu::CpuProgram;
use serde::{Deserialize, Serialize};
use std::time::Instant;

/// A family of graphs that grow with one size parameter.
#[derive(Clone, Copy, Debug)]
pub struct Family {
    /// Its name on the command line and in the report.
    pub name: &'static str,
    /// What grows.
    pub description: &'static str,
    /// The sizes the full bench runs (what `size` means is the family's).
    pub sizes: &'static [usize],
    /// The graph of one size.
    pub build: fn(usize) -> Traced,
}

/// Every family.
pub fn families() -> Vec<Family> {
    vec![
        Family {
            name: "clusters",
            description: "n small matmuls, each followed by its own 3-op elementwise group (n fused kernels)",
            sizes: &[200, 600, 2_000, 6_000, 20_000],
            build: clusters,
        },
        Family {
            name: "chain",
            description: "one chain of n elementwise ops reading one input (one group, split into bounded kernels)",
            sizes: &[1_000, 3_000, 10_000, 30_000, 100_000],
            build: chain,
        },
        Family {
            name: "layer_norms",
            description: "n LayerNorms in one module (one fusion region, split to stay under the e-graph limit)",
            sizes: &[100, 300, 1_000, 3_000, 10_000],
            build: layer_norms,
        },
        Family {
            name: "gpt2_layers",
            description: "a GPT-2 (tiny widths) of n layers",
            sizes: &[12, 48, 200, 1_000, 2_000],
            build: gpt2_layers,
        },
    ]
}

/// The family called `name`.
pub fn family(name: &str) -> Option<Family> {
    families().into_iter().find(|f| f.name == name)
}

fn traced(name: String, f: impl FnOnce(&mut ForwardCtx) -> Result<Vec<Tensor>>) -> Traced {
    trace(TraceOptions { name, ..TraceOptions::default() }, f).expect("scaling graphs trace")
}

fn x(ctx: &mut ForwardCtx, width: usize) -> Result<Tensor> {
    ctx.input("x", &[Dim::fixed(4), Dim::fixed(width)], DType::F32)
}

/// `n` times: `h = tanh(h @ w * 0.5 + 0.25)`, each step in its own module (`l.3`).
pub fn clusters(n: usize) -> Traced {
    traced(format!("clusters-{n}"), |ctx| {
        let mut h = x(ctx, 8)?;
        let w = ctx.param("w", &[Dim::fixed(8), Dim::fixed(8)], Init::Normal { std: 0.3 })?;
        for i in 0..n {
            h = ctx.scope(&format!("l.{i}"), |_| h.matmul(&w)?.mul_scalar(0.5)?.add_scalar(0.25)?.tanh())?;
        }
        Ok(vec![h])
    })
}

/// One chain of `n` elementwise ops on one input, alternating a product by a constant, an
/// activation and a sum with the input (so the values stay bounded).
pub fn chain(n: usize) -> Traced {
    traced(format!("chain-{n}"), |ctx| {
        let x = x(ctx, 64)?;
        let mut h = x.clone();
        for i in 0..n {
            h = match i % 3 {
                0 => h.mul_scalar(0.5)?,
                1 => h.tanh()?,
                _ => h.add(&x)?,
            };
        }
        Ok(vec![h])
    })
}

/// `n` LayerNorms one after another, all in one module (`norms.ln_7`: no numeric component, so
/// one fusion region).
pub fn layer_norms(n: usize) -> Traced {
    traced(format!("layer-norms-{n}"), |ctx| {
        let mut h = x(ctx, 32)?;
        ctx.scope("norms", |ctx| {
            for i in 0..n {
                h = LayerNorm::new(&format!("ln_{i}"), 32, 1e-5).forward(ctx, &h)?;
            }
            Ok::<(), rustral_frontend::Error>(())
        })?;
        Ok(vec![h])
    })
}

/// GPT-2 of `n` layers at the tiny test widths.
pub fn gpt2_layers(n: usize) -> Traced {
    let model = Gpt2 { config: Gpt2Config::tiny(n) };
    traced(format!("gpt2-tiny-{n}"), |ctx| {
        let ids = model.input(ctx)?;
        Ok(vec![model.forward(ctx, &ids)?])
    })
}

/// One measured point.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Point {
    /// The family.
    pub family: String,
    /// Its size parameter.
    pub size: usize,
    /// Nodes in the traced graph.
    pub nodes: usize,
    /// Nodes after the O2 passes.
    pub nodes_after: usize,
    /// Kernels in the CPU program.
    pub kernels: usize,
    /// Seconds in the O2 passes (verification after each pass off, as in a release compile).
    pub passes_s: f64,
    /// Seconds lowering to a program.
    pub lower_s: f64,
    /// Seconds making the CPU program (compiling its JIT kernels).
    pub cpu_s: f64,
    /// The slowest pass and its seconds.
    pub slowest_pass: (String, f64),
    /// Seconds per pass (summed over its runs in the pipeline).
    pub pass_s: std::collections::BTreeMap<String, f64>,
    /// Fused op kinds in the final graph.
    pub fused: std::collections::BTreeMap<String, usize>,
}

impl Point {
    /// One line for the terminal.
    pub fn line(&self) -> String {
        format!(
            "{:>12} n={:<7} nodes {:>7} kernels {:>6}  passes {:>8.3} s  lower {:>7.3} s  cpu {:>7.3} s  {:>6.1} us/node  (slowest {} {:.3} s)",
            self.family,
            self.size,
            self.nodes,
            self.kernels,
            self.passes_s,
            self.lower_s,
            self.cpu_s,
            self.us_per_node(),
            self.slowest_pass.0,
            self.slowest_pass.1
        )
    }

    /// Microseconds of compile time (all three stages) per traced node.
    pub fn us_per_node(&self) -> f64 {
        (self.passes_s + self.lower_s + self.cpu_s) * 1e6 / self.nodes.max(1) as f64
    }
}

/// Trace, compile and lower one point, in this process.
pub fn measure(family: &Family, size: usize) -> std::result::Result<Point, String> {
    let traced = (family.build)(size);
    let mut g = traced.graph.clone();
    let nodes = g.len();
    let start = Instant::now();
    let compiled = PassManager::new(OptLevel::O2).verify_each(false).run(&mut g).map_err(|e| e.to_string())?;
    let passes_s = start.elapsed().as_secs_f64();
    let start = Instant::now();
    let program = lower(&g).map_err(|e| e.to_string())?;
    let lower_s = start.elapsed().as_secs_f64();
    let kernels = program.kernels.len();
    let start = Instant::now();
    let cpu = CpuProgram::new(program, 1).map_err(|e| e.to_string())?;
    let cpu_s = start.elapsed().as_secs_f64();
    drop(cpu);
    let slowest = compiled
        .stats
        .passes
        .iter()
        .max_by(|a, b| a.wall_ms.total_cmp(&b.wall_ms))
        .map_or((String::new(), 0.0), |p| (p.pass.clone(), p.wall_ms / 1e3));
    let mut pass_s = std::collections::BTreeMap::new();
    for p in &compiled.stats.passes {
        *pass_s.entry(p.pass.clone()).or_insert(0.0) += p.wall_ms / 1e3;
    }
    Ok(Point {
        pass_s,
        family: family.name.to_string(),
        size,
        nodes,
        nodes_after: compiled.stats.nodes,
        kernels,
        passes_s,
        lower_s,
        cpu_s,
        slowest_pass: slowest,
        fused: compiled.stats.fused,
    })
}

/// The report: one table per family, compile time per node and its ratio to the smallest
/// point's (flat is 1.0x).
pub fn render(points: &[Point], machine: &rustral_runtime::provenance::Machine) -> String {
    let mut md = String::from("# Compile time against graph size\n\n");
    md.push_str(&format!(
        "Machine: {} ({} cores), {}. Measured by `cargo run --release -p rustral-bench -- scaling`; \
         each point the median of three fresh processes. Per node: trace-graph nodes, all three stages.\n\n",
        machine.name(),
        machine.cores,
        machine.os
    ));
    for f in families() {
        let rows: Vec<&Point> = points.iter().filter(|p| p.family == f.name).collect();
        let Some(first) = rows.first() else { continue };
        md.push_str(&format!("## {}\n\n{}.\n\n", f.name, f.description));
        md.push_str("| n | nodes | kernels | passes s | lower s | cpu s | µs/node | vs smallest | slowest pass |\n");
        md.push_str("|---:|---:|---:|---:|---:|---:|---:|---:|---|\n");
        for p in &rows {
            md.push_str(&format!(
                "| {} | {} | {} | {:.3} | {:.3} | {:.3} | {:.1} | {:.2}x | {} {:.3} s |\n",
                p.size,
                p.nodes,
                p.kernels,
                p.passes_s,
                p.lower_s,
                p.cpu_s,
                p.us_per_node(),
                p.us_per_node() / first.us_per_node(),
                p.slowest_pass.0,
                p.slowest_pass.1
            ));
        }
        md.push('\n');
    }
    md
}
