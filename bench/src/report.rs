//! The report over a folder of manifests: a Markdown file with what each pass buys per
//! workload and target, how op-level speedups transfer to models (with the share of model time
//! per op kind that explains it), and the comparison with PyTorch where its manifests are
//! present; one SVG bar chart per workload.

use crate::manifest::{self, Manifest};
use crate::workloads;
use plotters::prelude::*;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

/// Read every `*.json` manifest in `dir` (each validated), sorted by file name.
pub fn load(dir: &Path) -> Result<Vec<Manifest>, String> {
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .map_err(|e| format!("{}: {e}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    files.sort();
    files
        .iter()
        .map(|f| {
            let text = std::fs::read_to_string(f).map_err(|e| format!("{}: {e}", f.display()))?;
            let value: serde_json::Value = serde_json::from_str(&text).map_err(|e| format!("{}: {e}", f.display()))?;
            manifest::validate(&value).map_err(|e| format!("{} does not validate:\n{e}", f.display()))?;
            serde_json::from_value(value).map_err(|e| format!("{}: {e}", f.display()))
        })
        .collect()
}

/// Runs keyed by (workload, target, threads), then by pipeline label.
type Grouped<'a> = BTreeMap<(String, String, usize), BTreeMap<String, &'a Manifest>>;

fn group(ms: &[Manifest]) -> Grouped<'_> {
    let mut g: Grouped<'_> = BTreeMap::new();
    for m in ms.iter().filter(|m| !is_generation(&m.workload.name)) {
        g.entry((m.workload.name.clone(), m.target.clone(), m.threads))
            .or_default()
            .insert(m.pipeline.label.clone(), m);
    }
    g
}

fn median(runs: &BTreeMap<String, &Manifest>, label: &str) -> Option<f64> {
    runs.get(label).map(|m| m.stats.median_ms)
}

/// The kernel paths the report's manifests ran, each with who ran it (`avx512 (rustral)`,
/// `torch avx512`), so that a figure is never read as another path's.
fn kernel_paths(ms: &[Manifest]) -> String {
    let mut seen: Vec<String> = Vec::new();
    for m in ms {
        let k = &m.machine.cpu_kernels;
        let label = if k.is_empty() {
            "not recorded".to_string()
        } else if k.contains(' ') {
            k.clone()
        } else if m.machine.gemm.is_empty() || m.machine.gemm == "gemm crate" {
            format!("{k} (rustral)")
        } else {
            format!("{k} (rustral, GEMMs by {})", m.machine.gemm)
        };
        if !seen.contains(&label) {
            seen.push(label);
        }
    }
    seen.join(", ")
}

/// Write `report.md` and the charts into `out`; returns the Markdown.
pub fn render(ms: &[Manifest], out: &Path) -> Result<String, String> {
    std::fs::create_dir_all(out).map_err(|e| format!("{}: {e}", out.display()))?;
    let groups = group(ms);
    let mut md = String::new();
    let first = ms.first().ok_or("no manifests")?;
    let _ = writeln!(md, "# Pass ablation report\n");
    let _ = writeln!(
        md,
        "Machine: {} ({} logical cores, {:.0} GiB), {}. CPU features: {}; kernels: {}. Build: git {}{}, {}. \
         Medians of each run's timings; a pass \"buys\" t(O2 without it) / t(O2).\n",
        first.machine.name(),
        first.machine.cores,
        first.machine.memory_bytes as f64 / (1u64 << 30) as f64,
        first.machine.os,
        if first.machine.cpu_features.is_empty() {
            "not recorded".to_string()
        } else if first.machine.cpuid_hidden.is_empty() {
            first.machine.cpu_features.join(" ")
        } else {
            format!(
                "{} (a stand-in for a narrower CPU: {} hidden from CPUID)",
                first.machine.cpu_features.join(" "),
                first.machine.cpuid_hidden.join(" ")
            )
        },
        kernel_paths(ms),
        &first.build.git_sha[..first.build.git_sha.len().min(10)],
        if first.build.git_dirty { " (dirty)" } else { "" },
        first.build.rustc
    );

    let _ = writeln!(md, "## What each pass buys\n");
    let _ = writeln!(
        md,
        "| workload | target | threads | O0 ms | O2 ms | O0 / O2 | kernels O0 / O2 | {} |",
        short_names().join(" | ")
    );
    let _ = writeln!(md, "|---|---|---|---|---|---|---|{}", "---|".repeat(short_names().len()));
    // Passes whose absence made a workload measurably faster: what the report must not hide.
    let mut slower: Vec<String> = Vec::new();
    for ((name, target, threads), runs) in &groups {
        let Some(o2) = median(runs, "O2") else { continue };
        let o0 = median(runs, "O0");
        let kernels = |l: &str| runs.get(l).map_or("-".into(), |m| m.program.kernels.to_string());
        let mut row = format!(
            "| {name} | {target} | {threads} | {} | {o2:.3} | {} | {} / {} |",
            o0.map_or("-".into(), |v| format!("{v:.3}")),
            o0.map_or("-".into(), |v| format!("{:.2}x", v / o2)),
            kernels("O0"),
            kernels("O2")
        );
        let mut bars: Vec<(String, f64)> = Vec::new();
        if let Some(v) = o0 {
            bars.push(("all fusion (O0 -> O2)".into(), v / o2));
        }
        for p in crate::ablate::fusion_passes() {
            match median(runs, &format!("O2-{p}")) {
                Some(v) => {
                    let off = runs[&format!("O2-{p}")];
                    let same = same_program(off, runs["O2"]);
                    let (ratio, noise) = buys(off, runs["O2"]).unwrap_or((v / o2, false));
                    let mark = if same {
                        "="
                    } else if noise {
                        "~"
                    } else {
                        ""
                    };
                    let _ = write!(row, " {ratio:.2}x{mark} |");
                    if mark.is_empty() && ratio < 1.0 {
                        slower.push(format!("{p} on {name} ({target}, {threads} threads; {ratio:.2}x)"));
                    }
                    if !same {
                        bars.push((p.trim_start_matches("fuse-").into(), ratio));
                    }
                }
                None => row.push_str(" - |"),
            }
        }
        let _ = writeln!(md, "{row}");
        let file = format!("speedup_{name}_{target}_{threads}t.svg");
        chart(&out.join(&file), &format!("{name} on {target}, {threads} threads: what each pass buys"), &bars)?;
    }
    let _ = writeln!(
        md,
        "\nThe pipelines of a workload ran interleaved (one run of each per round), so a ratio is the median \
         of the per-round ratios t(O2 without the pass) / t(O2). `=`: switching the pass off left the \
         program's kernels unchanged (the pass found nothing to fuse, or another pass fused the same ops), so \
         the ratio is noise. `~`: the program changed but the ratio's 95% confidence interval (distribution-free, \
         over the rounds) contains 1.0: no difference this machine could measure.\n"
    );
    if slower.is_empty() {
        let _ = writeln!(md, "No fusion pass made a workload measurably slower than its absence.\n");
    } else {
        let _ = writeln!(md, "Fusion passes that made a workload measurably slower: {}.\n", slower.join("; "));
    }
    for ((name, target, threads), runs) in &groups {
        if runs.contains_key("O2") {
            let _ = writeln!(md, "![{name}](speedup_{name}_{target}_{threads}t.svg)");
        }
    }

    transfer(&mut md, &groups);
    shares(&mut md, &groups);
    versus_torch(&mut md, &groups);
    rounds(&mut md, out)?;
    generation(&mut md, ms);
    std::fs::write(out.join("report.md"), &md).map_err(|e| format!("{}: {e}", out.display()))?;
    Ok(md)
}

/// What switching a pass off costs, from runs timed in the same rounds: the median of the
/// per-round ratios t(off) / t(O2), and whether its 95% interval contains 1.0 (no measurable
/// difference). `None` when the runs cannot be paired (different counts of timings).
fn buys(off: &Manifest, o2: &Manifest) -> Option<(f64, bool)> {
    let ratios = crate::stats::paired_ratios(&off.timings_ms, &o2.timings_ms)?;
    let (median, [lo, hi]) = crate::stats::median_ci95(&ratios)?;
    Some((median, lo <= 1.0 && 1.0 <= hi))
}

/// The same kernels per op kind: the pass changed nothing.
fn same_program(a: &Manifest, b: &Manifest) -> bool {
    a.program.kernels == b.program.kernels && a.program.kernel_ops == b.program.kernel_ops
}

fn short_names() -> Vec<String> {
    crate::ablate::fusion_passes().iter().map(|p| format!("-{}", p.trim_start_matches("fuse-"))).collect()
}

/// The op kind each fusion pass produces, as kernels name it.
fn produced_by(pass: &str) -> &'static str {
    rustral_passes::fuse::fusion_passes()
        .into_iter()
        .find(|(p, _)| *p == pass)
        .and_then(|(_, fuses)| fuses.first().copied())
        .unwrap_or("?")
}

/// Operator-to-task transfer: an op's fusion speedup measured alone against the same fusion's
/// speedup inside a model, and the share of model time that bounds what it can buy there.
fn transfer(md: &mut String, groups: &Grouped<'_>) {
    let _ = writeln!(md, "\n## Operator-to-task transfer\n");
    let _ = writeln!(
        md,
        "For each fusion pass: the speedup it buys on its op alone (t(op, O2 without it) / t(op, O2)); inside the \
         model, the time of the kernels it makes at O2 (`fused ms`) and what the same work costs without it \
         (`unfused ms` = t(model without it) - (t(model, O2) - fused ms)), their ratio (the in-model op speedup), \
         the share of the unfused model's time that work takes, and the model speedup: Amdahl's law from that \
         share with the alone-speedup, then measured. Where the pass's op sits inside another fused kernel (GELU \
         in a matmul epilogue) `fused ms` is not separable and shows as -.\n"
    );
    let _ = writeln!(
        md,
        "| model | target | threads | pass | op alone | fused ms | unfused ms | op in model | share | predicted | measured |"
    );
    let _ = writeln!(md, "|---|---|---|---|---|---|---|---|---|---|---|");
    for ((model, target, threads), runs) in groups {
        if runs.values().next().is_none_or(|m| m.workload.kind != workloads::Kind::Model) {
            continue;
        }
        for w in workloads::all().iter().filter(|w| w.kind == workloads::Kind::Op) {
            let Some(pass) = w.fused_by else { continue };
            let Some(op_runs) = groups.get(&(w.name.to_string(), target.clone(), *threads)) else { continue };
            let label = format!("O2-{pass}");
            let (Some(op_o2), Some(op_off), Some(m_o2), Some(m_off)) =
                (median(op_runs, "O2"), median(op_runs, &label), median(runs, "O2"), median(runs, &label))
            else {
                continue;
            };
            if same_program(runs[&label], runs["O2"]) {
                continue;
            }
            let alone = buys(op_runs[&label], op_runs["O2"]).map_or(op_off / op_o2, |b| b.0);
            let measured = buys(runs[&label], runs["O2"]).map_or(m_off / m_o2, |b| b.0);
            let fused = runs["O2"].kernel_ms_by_op.get(produced_by(pass)).copied().unwrap_or(0.0);
            let unfused = (m_off - (m_o2 - fused)).max(0.0);
            let share = (unfused / m_off).clamp(0.0, 1.0);
            let predicted = 1.0 / ((1.0 - share) + share / alone);
            let (fused_s, in_model) = if fused > 0.0 {
                (format!("{fused:.2}"), format!("{:.2}x", unfused / fused))
            } else {
                ("-".into(), "-".into())
            };
            let _ = writeln!(
                md,
                "| {model} | {target} | {threads} | {pass} | {alone:.2}x | {fused_s} | {unfused:.2} | {in_model} | {:.1}% | \
                 {predicted:.2}x | {measured:.2}x |",
                share * 100.0,
            );
        }
    }
}

/// Share of model time per op kind at O2 (from each run's profiled run).
fn shares(md: &mut String, groups: &Grouped<'_>) {
    let _ = writeln!(md, "\n## Where model time goes (O2, per op kind)\n");
    for ((model, target, threads), runs) in groups {
        let Some(m) = runs.get("O2").filter(|m| m.workload.kind == workloads::Kind::Model) else { continue };
        if m.kernel_ms_by_op.is_empty() {
            continue;
        }
        let total: f64 = m.kernel_ms_by_op.values().sum();
        let mut kinds: Vec<(&String, &f64)> = m.kernel_ms_by_op.iter().collect();
        kinds.sort_by(|a, b| b.1.total_cmp(a.1));
        let parts: Vec<String> = kinds.iter().map(|(k, v)| format!("{k} {:.1}%", **v / total * 100.0)).collect();
        let _ = writeln!(md, "- {model} on {target}, {threads} threads ({total:.1} ms profiled): {}", parts.join(", "));
    }
}

/// The peers `versus_torch` reads, in the order it lists them: PyTorch eager, torch.compile
/// and ONNX Runtime (bench/python/torch_bench.py writes all three).
const PEERS: [&str; 3] = ["torch-eager", "torch-compile", "onnxruntime"];

/// Rustral's O2 against PyTorch and ONNX Runtime where manifests from bench/python are present.
fn versus_torch(md: &mut String, groups: &Grouped<'_>) {
    let mut rows = Vec::new();
    for ((name, target, threads), runs) in groups {
        if target != "cpu" {
            continue;
        }
        let Some(ours) = median(runs, "O2") else { continue };
        for other in PEERS {
            if let Some(theirs) =
                groups.get(&(name.clone(), other.to_string(), *threads)).and_then(|r| r.values().next())
            {
                let t = theirs.stats.median_ms;
                rows.push(format!("| {name} | {threads} | {ours:.3} | {other} | {t:.3} | {:.2}x |", t / ours));
            }
        }
    }
    if rows.is_empty() {
        return;
    }
    let _ = writeln!(md, "\n## Against PyTorch and ONNX Runtime (same machine, same session)\n");
    let _ = writeln!(
        md,
        "One run of each side, minutes apart (the peers after the whole ablation): on a shared VM that drifts, \
         read the interleaved rounds below where present.\n"
    );
    let _ = writeln!(md, "| workload | threads | Rustral O2 ms | peer | peer ms | peer / Rustral |");
    let _ = writeln!(md, "|---|---|---|---|---|---|");
    for r in rows {
        let _ = writeln!(md, "{r}");
    }
}

/// The table of `rounds/rounds.json` beside the report (`bench/python/rounds.py`: Rustral O2
/// and the peers timed back to back in each round, a ratio taken within each round), when present.
fn rounds(md: &mut String, out: &Path) -> Result<(), String> {
    let path = out.join("rounds").join("rounds.json");
    let Ok(text) = std::fs::read_to_string(&path) else { return Ok(()) };
    let v: serde_json::Value = serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?;
    let bad = || format!("{}: not a rounds.py table", path.display());
    let machine = &v["machine"];
    let name = match machine["cpu_id"].as_str() {
        Some(id) if !id.is_empty() => format!("{} [{id}]", machine["cpu_model"].as_str().ok_or_else(bad)?),
        _ => machine["cpu_model"].as_str().ok_or_else(bad)?.to_string(),
    };
    let _ = writeln!(md, "\n## Against PyTorch and ONNX Runtime, interleaved rounds (`bench/python/rounds.py`)\n");
    let _ = writeln!(
        md,
        "Machine: {name}; build git {}. {} rounds of {} timed runs: in each round Rustral's O2 and the peers ran \
         back to back (the order alternating), and `peer / Rustral` is the median over the rounds of the ratio \
         of their medians within a round; `range` is the lowest and highest round.\n",
        v["build"]["git_sha"].as_str().map_or("?", |s| &s[..s.len().min(10)]),
        v["rounds"],
        v["repeats"],
    );
    let _ = writeln!(md, "| workload | threads | Rustral O2 ms | peer | peer ms | peer / Rustral | range |");
    let _ = writeln!(md, "|---|---|---|---|---|---|---|");
    for r in v["rows"].as_array().ok_or_else(bad)? {
        let f = |k: &str| r[k].as_f64().ok_or_else(bad);
        let _ = writeln!(
            md,
            "| {} | {} | {:.3} | {} | {:.3} | {:.2}x | {:.2}-{:.2} |",
            r["workload"].as_str().ok_or_else(bad)?,
            r["threads"],
            f("rustral_ms")?,
            r["peer"].as_str().ok_or_else(bad)?,
            f("peer_ms")?,
            f("ratio")?,
            f("low")?,
            f("high")?
        );
    }
    Ok(())
}

/// Manifests of the generation benchmark (`{model}_prefill`, `{model}_decode`): reported in
/// their own section, not as pass ablations.
fn is_generation(name: &str) -> bool {
    let row = crate::generate::GGUF_ROW;
    crate::generate::lm_workloads()
        .iter()
        .map(|w| w.name)
        .chain([row])
        .any(|w| name == format!("{w}_prefill") || name == format!("{w}_decode"))
}

/// The memory-bandwidth bound of a decode manifest (its description records the weight bytes a
/// token reads and the bandwidth measured beside it): tokens/s at that bandwidth.
fn bandwidth_bound(description: &str) -> Option<f64> {
    let after = |key: &str| -> Option<f64> { description.split(key).nth(1)?.split_whitespace().next()?.parse().ok() };
    let mb = after("reads ")?;
    let gbps = after("memory bandwidth ")?;
    Some(gbps * 1e3 / mb)
}

/// Prefill and decode times per model and target, next to Hugging Face's `generate`.
fn generation(md: &mut String, ms: &[Manifest]) {
    let runs: Vec<&Manifest> = ms.iter().filter(|m| is_generation(&m.workload.name)).collect();
    if runs.is_empty() {
        return;
    }
    let _ = writeln!(md, "\n## Generation (`rustral-bench generate`, `bench/python/generate_bench.py`)\n");
    // These rows may come from another session than the ablation's: name their machines.
    let mut machines: Vec<String> = Vec::new();
    for m in &runs {
        let line = format!("{} ({} logical cores)", m.machine.name(), m.machine.cores);
        if !machines.contains(&line) {
            machines.push(line);
        }
    }
    let _ = writeln!(md, "Measured on: {}.\n", machines.join("; "));
    let _ = writeln!(
        md,
        "| phase | target | threads | median ms | tokens/s | HF generate ms | HF / Rustral | llama.cpp ms | llama.cpp / Rustral | bandwidth bound tokens/s |"
    );
    let _ = writeln!(md, "|---|---|---|---|---|---|---|---|---|---|");
    let peers = ["hf-generate", "llama.cpp"];
    for m in runs.iter().filter(|m| !peers.contains(&m.target.as_str())) {
        let peer = |target: &str| {
            runs.iter().find(|h| h.target == target && h.workload.name == m.workload.name && h.threads == m.threads)
        };
        let (hf, llama) = (peer("hf-generate"), peer("llama.cpp"));
        // A prefill's description names its prompt ("prefill of a 128-token prompt").
        let tokens: f64 = if m.workload.name.ends_with("_prefill") {
            m.workload
                .description
                .split_whitespace()
                .find_map(|w| w.strip_suffix("-token")?.parse().ok())
                .unwrap_or(1.0)
        } else {
            1.0
        };
        let t = m.stats.median_ms;
        let _ = writeln!(
            md,
            "| {} | {} | {} | {t:.2} | {:.1} | {} | {} | {} | {} | {} |",
            m.workload.name,
            m.target,
            m.threads,
            tokens * 1e3 / t,
            hf.map_or("-".into(), |h| format!("{:.2}", h.stats.median_ms)),
            hf.map_or("-".into(), |h| format!("{:.2}x", h.stats.median_ms / t)),
            llama.map_or("-".into(), |h| format!("{:.2}", h.stats.median_ms)),
            llama.map_or("-".into(), |h| format!("{:.2}x", h.stats.median_ms / t)),
            bandwidth_bound(&m.workload.description).map_or("-".into(), |b| format!("{b:.0}")),
        );
    }
}

/// A bar chart of speedups (1.0 drawn as the baseline).
fn chart(path: &Path, title: &str, bars: &[(String, f64)]) -> Result<(), String> {
    let fail = |e: &dyn std::fmt::Display| format!("{}: {e}", path.display());
    let root = SVGBackend::new(path, (760, 420)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| fail(&e))?;
    let top = bars.iter().map(|b| b.1).fold(1.0f64, f64::max) * 1.15;
    let n = bars.len().max(1);
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d((0..n).into_segmented(), 0f64..top)
        .map_err(|e| fail(&e))?;
    let labels: Vec<String> = bars.iter().map(|b| b.0.clone()).collect();
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(n + 1)
        .x_label_formatter(&|x| match x {
            SegmentValue::CenterOf(i) => labels.get(*i).cloned().unwrap_or_default(),
            _ => String::new(),
        })
        .y_desc("speedup (x)")
        .draw()
        .map_err(|e| fail(&e))?;
    chart
        .draw_series(bars.iter().enumerate().map(|(i, (_, v))| {
            let color = if i == 0 { RGBColor(230, 126, 34) } else { RGBColor(52, 101, 164) };
            let mut bar =
                Rectangle::new([(SegmentValue::Exact(i), 0.0), (SegmentValue::Exact(i + 1), *v)], color.filled());
            bar.set_margin(0, 0, 12, 12);
            bar
        }))
        .map_err(|e| fail(&e))?;
    chart
        .draw_series(bars.iter().enumerate().map(|(i, (_, v))| {
            Text::new(format!("{v:.2}x"), (SegmentValue::CenterOf(i), *v + top * 0.03), ("sans-serif", 13))
        }))
        .map_err(|e| fail(&e))?;
    chart
        .draw_series(std::iter::once(PathElement::new(
            vec![(SegmentValue::Exact(0), 1.0), (SegmentValue::Exact(n), 1.0)],
            BLACK,
        )))
        .map_err(|e| fail(&e))?;
    root.present().map_err(|e| fail(&e))
}
