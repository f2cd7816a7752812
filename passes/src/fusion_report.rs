//! The text `rustral-compile --explain-fusion` prints: for every fusion pass, each region it
//! saturated (its size, the e-graph's, the iterations, why saturation stopped, the time and
//! whether it was rebuilt), the rules by the time they cost, the near misses, and the regions
//! split or left unfused. Everything comes from [`CompileStats`], so `stats.json` holds the
//! same facts for a script.

use crate::stats::{CompileStats, EggStats, RuleReport};
use std::collections::BTreeMap;
use std::fmt::Write;

/// The report for every pass of `stats` that ran equality saturation.
pub fn explain_fusion(stats: &CompileStats) -> String {
    let mut out = String::new();
    for pass in &stats.passes {
        if let Some(egg) = &pass.egg {
            explain_pass(&mut out, &pass.pass, pass.wall_ms, &pass.rules, egg);
        }
    }
    if out.is_empty() {
        out.push_str("no fusion pass ran (fusion runs at -O2)\n");
    }
    out
}

fn explain_pass(out: &mut String, name: &str, ms: f64, fired: &BTreeMap<String, usize>, egg: &EggStats) {
    let rebuilt = egg.explained.iter().filter(|r| r.rebuilt).count();
    let fused: Vec<String> = fired.iter().filter(|(_, n)| **n > 0).map(|(r, n)| format!("{r} x{n}")).collect();
    let _ = writeln!(
        out,
        "{name}: {} regions, {rebuilt} rebuilt, {ms:.1} ms; {}",
        egg.regions,
        if fused.is_empty() { "nothing fused".to_string() } else { format!("fused by {}", fused.join(", ")) }
    );
    let width = egg.explained.iter().map(|r| r.region.len()).max().unwrap_or(0).max(6);
    let _ = writeln!(out, "  {:width$}  nodes  e-nodes  classes  iters  stop             ms  rebuilt", "region");
    let mut totals: BTreeMap<&str, RuleReport> = BTreeMap::new();
    for r in &egg.explained {
        let _ = writeln!(
            out,
            "  {:width$}  {:>5}  {:>7}  {:>7}  {:>5}  {:15} {:>5.1}  {}",
            r.region,
            r.nodes,
            r.egraph_nodes,
            r.egraph_classes,
            r.iterations,
            r.stop,
            r.ms,
            if r.rebuilt { "yes" } else { "no" }
        );
        for (rule, x) in &r.rules {
            let t = totals.entry(rule).or_default();
            t.algebra = x.algebra;
            t.matches += x.matches;
            t.applied += x.applied;
            t.search_ms += x.search_ms;
            t.apply_ms += x.apply_ms;
        }
    }
    let mut rules: Vec<(&str, RuleReport)> = totals.into_iter().collect();
    rules.sort_by(|a, b| (b.1.search_ms + b.1.apply_ms).total_cmp(&(a.1.search_ms + a.1.apply_ms)).then(a.0.cmp(b.0)));
    let total_ms: f64 = rules.iter().map(|(_, r)| r.search_ms + r.apply_ms).sum();
    let width = rules.iter().map(|(n, _)| n.len()).max().unwrap_or(0).max(4);
    let _ = writeln!(out, "  {:width$}  kind     matches  applied  search ms  apply ms  share", "rule");
    for (rule, r) in &rules {
        let share = if total_ms > 0.0 { 100.0 * (r.search_ms + r.apply_ms) / total_ms } else { 0.0 };
        let _ = writeln!(
            out,
            "  {rule:width$}  {:7}  {:>7}  {:>7}  {:>9.2}  {:>8.2}  {share:>4.0}%",
            if r.algebra { "algebra" } else { "family" },
            r.matches,
            r.applied,
            r.search_ms,
            r.apply_ms
        );
    }
    for r in &egg.explained {
        for m in &r.near_misses {
            let at = if m.at == r.region { String::new() } else { format!(" at `{}`", m.at) };
            let _ = writeln!(out, "  near miss in {}: {}{at} wants {}, found {}", r.region, m.rule, m.wanted, m.found);
        }
    }
    for s in &egg.split {
        let _ = writeln!(out, "  split: {s}");
    }
    for a in &egg.abandoned {
        let _ = writeln!(out, "  left unfused: {a}");
    }
}
