//! What a run shows beyond its outputs: where the time goes by kernel (`--profile`) and how
//! far each fused kernel is from the primitives it replaced (`--check-kernels`), both naming
//! the model lines each kernel computes.

use crate::fail::Fail;
use rustral::check_kernels::{KernelCheck, per_rule};
use rustral::ir::loc_summary;
use rustral::runtime::HostTensor;
use rustral::{CompileOptions, Session};
use serde_json::{Value, json};
use std::collections::HashMap;

/// Model lines shown per kernel before "(+N more)".
const LINES_SHOWN: usize = 4;

/// One kernel's median time over the profiled runs.
pub struct ProfileRow {
    /// Its index in the program's kernels (`k003`, the WGSL program's `k003_*.wgsl`).
    pub kernel: usize,
    pub op: String,
    pub provenance: String,
    pub source: String,
    pub ms: f64,
    pub fallback: bool,
}

/// Profile `runs` runs; None where the target keeps no per-kernel times (the reference).
pub fn profile(session: &Session, inputs: &[(&str, HostTensor)], runs: usize) -> Result<Option<Vec<ProfileRow>>, Fail> {
    let mut all: Vec<Vec<rustral::runtime::cpu::KernelTime>> = Vec::with_capacity(runs);
    for _ in 0..runs.max(1) {
        match session.profile(inputs)? {
            Some(times) => all.push(times),
            None => return Ok(None),
        }
    }
    let rows = all[0]
        .iter()
        .enumerate()
        .map(|(k, t)| {
            let mut ms: Vec<f64> =
                all.iter().filter_map(|run| run.get(k)).map(|t| t.time.as_secs_f64() * 1e3).collect();
            ms.sort_by(f64::total_cmp);
            ProfileRow {
                kernel: t.kernel,
                op: t.op.clone(),
                provenance: t.provenance.clone(),
                source: loc_summary(&t.loc, LINES_SHOWN),
                ms: ms[ms.len() / 2],
                fallback: t.fallback,
            }
        })
        .collect();
    Ok(Some(rows))
}

/// The profile as a table, slowest first.
pub fn profile_lines(rows: &[ProfileRow], runs: usize) -> Vec<String> {
    let total: f64 = rows.iter().map(|r| r.ms).sum();
    let mut sorted: Vec<&ProfileRow> = rows.iter().collect();
    sorted.sort_by(|a, b| b.ms.total_cmp(&a.ms).then(a.kernel.cmp(&b.kernel)));
    let op_width = rows.iter().map(|r| r.op.len() + if r.fallback { 11 } else { 0 }).max().unwrap_or(2).max(2);
    let module_width = rows.iter().map(|r| r.provenance.len()).max().unwrap_or(6).max(6);
    let mut lines = vec![
        format!(
            "profile: {} kernels, {total:.3} ms in all (each kernel's median of {runs} profiled run(s))",
            rows.len()
        ),
        format!(
            "  {:>9}  {:>6}  {:>6}  {:op_width$}  {:module_width$}  source",
            "ms", "share", "kernel", "op", "module"
        ),
    ];
    for r in sorted {
        let op = if r.fallback { format!("{} (fallback)", r.op) } else { r.op.clone() };
        let share = if total > 0.0 { 100.0 * r.ms / total } else { 0.0 };
        lines.push(
            format!(
                "  {:>9.3}  {share:>5.1}%  {:>6}  {op:op_width$}  {:module_width$}  {}",
                r.ms,
                format!("k{:03}", r.kernel),
                r.provenance,
                r.source
            )
            .trim_end()
            .to_string(),
        );
    }
    lines
}

/// The profile for stats.json.
pub fn profile_json(rows: &[ProfileRow]) -> Value {
    rows.iter()
        .map(|r| {
            json!({"kernel": r.kernel, "op": r.op, "module": r.provenance, "source": r.source, "ms": r.ms, "fallback": r.fallback})
        })
        .collect()
}

/// Check every fused kernel; returns the checks and the fused nodes that have no contract
/// (their primitives could not be cut out of the graph), which are not checked.
pub fn check_kernels(
    session: &Session,
    options: &CompileOptions,
    params: &HashMap<String, HostTensor>,
    inputs: &[(&str, HostTensor)],
) -> Result<(Vec<KernelCheck>, Vec<String>), Fail> {
    let checks = rustral::check_kernels::check_kernels(session, options, params, inputs)?;
    let g = session.graph();
    let numbering = g.numbering();
    let mut unchecked: Vec<(usize, String)> = g
        .node_ids()
        .filter_map(|id| Some((id, g.node(id)?)))
        .filter(|(id, n)| n.op.is_fused() && !checks.iter().any(|c| c.node == numbering[id]))
        .map(|(id, n)| (numbering[&id], format!("%{} {} at {:?}", numbering[&id], n.op.name(), n.provenance)))
        .collect();
    unchecked.sort();
    Ok((checks, unchecked.into_iter().map(|(_, s)| s).collect()))
}

/// The report: a line per kernel, then per rule, then the kernels not checked, then the blame.
pub fn check_lines(checks: &[KernelCheck], unchecked: &[String], tolerance: f64) -> (Vec<String>, Option<String>) {
    let mut lines = vec![format!(
        "check-kernels: {} fused kernels against the f64 reference of the primitives each replaced, \
         on this run's values (tolerance {tolerance:e} of 1 + |reference|)",
        checks.len()
    )];
    let op_width = checks.iter().map(|c| c.op.len()).max().unwrap_or(2).max(2);
    let module_width = checks.iter().map(|c| c.provenance.len()).max().unwrap_or(6).max(6);
    let rules = |c: &KernelCheck| c.rules.iter().map(|r| r.rule.as_str()).collect::<Vec<_>>().join(",");
    let rules_width = checks.iter().map(|c| rules(c).len()).max().unwrap_or(5).max(5);
    lines.push(format!(
        "  {:>6}  {:op_width$}  {:module_width$}  {:>9}  {:>9}  {:rules_width$}  source",
        "node", "op", "module", "max abs", "max rel", "rules"
    ));
    for c in checks {
        lines.push(
            format!(
                "  {:>6}  {:op_width$}  {:module_width$}  {:>9.2e}  {:>9.2e}  {:rules_width$}  {}{}",
                format!("%{}", c.node),
                c.op,
                c.provenance,
                c.max_abs,
                c.max_rel,
                rules(c),
                loc_summary(&c.loc, LINES_SHOWN),
                if c.ok(tolerance) { "" } else { "  BEYOND TOLERANCE" }
            )
            .trim_end()
            .to_string(),
        );
    }
    lines.push("  per rule (pass): kernels, worst max rel".into());
    for (rule, pass, n, worst) in per_rule(checks) {
        let verdict = if worst <= tolerance { "ok" } else { "BEYOND TOLERANCE" };
        lines.push(format!("    {rule} ({pass}): {n}, {worst:.2e} {verdict}"));
    }
    if !unchecked.is_empty() {
        lines.push(format!(
            "  not checked ({}: no contract, their primitives could not be cut out): {}",
            unchecked.len(),
            unchecked.join(", ")
        ));
    }
    let bad: Vec<String> = checks
        .iter()
        .filter(|c| !c.ok(tolerance))
        .map(|c| {
            let at = loc_summary(&c.loc, LINES_SHOWN);
            let at = if at.is_empty() { String::new() } else { format!(", {at}") };
            format!(
                "kernel %{} ({} at {:?}{at}) is {:.2e} from the primitives it replaced: blame {}",
                c.node,
                c.op,
                c.provenance,
                c.max_rel,
                c.rules.iter().map(|r| format!("rule {} of {}", r.rule, r.pass)).collect::<Vec<_>>().join(", ")
            )
        })
        .collect();
    if bad.is_empty() {
        lines.push(format!("check-kernels passed: every fused kernel within {tolerance:e} of its primitives"));
        (lines, None)
    } else {
        lines.extend(bad.iter().map(|b| format!("  {b}")));
        (lines, Some(bad.join("; ")))
    }
}

/// A number for JSON, which has no infinity or NaN: those are written as strings (`inf`),
/// never as `null`, which would read as a missing value.
pub fn finite(x: f64) -> Value {
    if x.is_finite() { json!(x) } else { json!(x.to_string()) }
}

/// The checks for stats.json.
pub fn checks_json(checks: &[KernelCheck]) -> Value {
    checks
        .iter()
        .map(|c| {
            let loc: Vec<String> = c.loc.iter().map(ToString::to_string).collect();
            let rules: Vec<Value> = c.rules.iter().map(|r| json!({"rule": r.rule, "pass": r.pass})).collect();
            json!({"node": c.node, "op": c.op, "module": c.provenance, "loc": loc, "pass": c.pass, "rules": rules,
                   "elements": c.elements, "max_abs": finite(c.max_abs), "max_rel": finite(c.max_rel)})
        })
        .collect()
}
