//! The numeric contract of every rewrite: each fused kernel, run by the target on the real
//! values of a run, against the f64 reference evaluation of the primitives it replaced, on the
//! same operand values. A kernel whose error is beyond tolerance blames the rules that built
//! it (`rustral-compile --check-kernels`).
//!
//! The compiled graph is run again with every checked kernel's result and operands as extra
//! outputs (compiled at -O0, so the program is the same kernels); each contract's primitives
//! are then promoted to f64 and evaluated by the reference interpreter on the operand values
//! the target computed, so an error upstream is not charged to the kernel downstream.

use crate::{CompileOptions, Result, Session};
use rustral_ir::{Graph, NodeId, SourceLoc};
use rustral_passes::{Contract, OptLevel, RuleRef};
use rustral_runtime::HostTensor;
use std::collections::{BTreeMap, HashMap};

/// One fused kernel against the primitives it replaced.
#[derive(Clone, Debug, PartialEq)]
pub struct KernelCheck {
    /// The node's printed number (`%n`) in the compiled graph.
    pub node: usize,
    /// The fused op.
    pub op: String,
    /// Its module path.
    pub provenance: String,
    /// The model source locations it computes.
    pub loc: Vec<SourceLoc>,
    /// The pass that built it.
    pub pass: String,
    /// The rules that built it: those that fired in its region and those of the fused nodes
    /// it absorbed, each with its pass.
    pub rules: Vec<RuleRef>,
    /// Elements compared.
    pub elements: usize,
    /// Largest `|kernel - reference|`.
    pub max_abs: f64,
    /// Largest `|kernel - reference| / (1 + |reference|)`.
    pub max_rel: f64,
}

impl KernelCheck {
    /// Whether the kernel is within `tolerance` (relative to `1 + |reference|`).
    pub fn ok(&self, tolerance: f64) -> bool {
        self.max_rel <= tolerance
    }
}

/// The worst kernel of each rule: `(rule, pass, kernels checked, worst relative error)`.
pub fn per_rule(checks: &[KernelCheck]) -> Vec<(String, String, usize, f64)> {
    let mut rules: BTreeMap<(String, String), (usize, f64)> = BTreeMap::new();
    for c in checks {
        for r in &c.rules {
            let e = rules.entry((r.rule.clone(), r.pass.clone())).or_insert((0, 0.0));
            e.0 += 1;
            e.1 = e.1.max(c.max_rel);
        }
    }
    rules.into_iter().map(|((r, p), (n, worst))| (r, p, n, worst)).collect()
}

/// Check every fused kernel of `session` (compiled with `CompileOptions::contracts`) on
/// `inputs`, with `params` bound.
pub fn check_kernels(
    session: &Session,
    options: &CompileOptions,
    params: &HashMap<String, HostTensor>,
    inputs: &[(&str, HostTensor)],
) -> Result<Vec<KernelCheck>> {
    check_contracts(session.graph(), session.contracts(), session, options, params, inputs)
}

/// [`check_kernels`] with the contracts given: `graph` is the compiled graph they name nodes
/// of, run on `beside`'s target (tests hand it a doctored contract to see the blame land).
pub fn check_contracts(
    graph: &Graph,
    contracts: &BTreeMap<NodeId, Contract>,
    beside: &Session,
    options: &CompileOptions,
    params: &HashMap<String, HostTensor>,
    inputs: &[(&str, HostTensor)],
) -> Result<Vec<KernelCheck>> {
    let mut probe = graph.clone();
    let live: Vec<(NodeId, &Contract)> =
        contracts.iter().filter(|(id, _)| graph.node(**id).is_some()).map(|(&id, c)| (id, c)).collect();
    for &(id, _) in &live {
        probe.set_output(&format!("__kernel.{}", id.index()), id)?;
        for (k, o) in graph.operands(id).into_iter().enumerate() {
            probe.set_output(&format!("__kernel.{}.arg{k}", id.index()), o)?;
        }
    }
    let as_built = CompileOptions { level: OptLevel::O0, disabled: vec![], contracts: false, ..options.clone() };
    let mut run = Session::compile_beside(&probe, beside, &as_built)?;
    run.bind_host(params)?;
    let values: HashMap<String, HostTensor> = run.run(inputs)?.into_iter().collect();
    let numbering = graph.numbering();
    let mut checks = Vec::with_capacity(live.len());
    for (id, contract) in live {
        let node = graph.node(id).expect("live nodes exist");
        let got = &values[&format!("__kernel.{}", id.index())];
        let mut feeds = HashMap::new();
        for k in 0..graph.operands(id).len() {
            let mut t = values[&format!("__kernel.{}.arg{k}", id.index())].clone();
            if t.dtype.is_float() {
                t.dtype = rustral_ir::DType::F64;
            }
            feeds.insert(format!("arg{k}"), t);
        }
        let wide = rustral_passes::grad::promote_f64(&contract.replaced)?;
        let want = rustral_runtime::reference::evaluate(&wide, &feeds)?;
        let want = &want[0].1;
        let (mut max_abs, mut max_rel) = (0.0f64, 0.0f64);
        if want.shape() != got.shape() {
            (max_abs, max_rel) = (f64::INFINITY, f64::INFINITY);
        } else {
            for (&w, &g) in want.data.iter().zip(got.data.iter()) {
                let (a, r) = difference(w, g);
                max_abs = max_abs.max(a);
                max_rel = max_rel.max(r);
            }
        }
        checks.push(KernelCheck {
            node: numbering[&id],
            op: node.op.name().to_string(),
            provenance: node.provenance.clone(),
            loc: node.loc.clone(),
            pass: contract.pass.clone(),
            rules: contract.rules.clone(),
            elements: got.data.len(),
            max_abs,
            max_rel,
        });
    }
    checks.sort_by_key(|c| c.node);
    Ok(checks)
}

/// `|a - b|` and `|a - b| / (1 + |a|)` for a reference value `a`: 0 when both are NaN or
/// the same infinity, infinite when only one is NaN or infinite (a relative error of two
/// infinities would be NaN, which `max` drops: a check would pass in silence).
pub fn difference(a: f64, b: f64) -> (f64, f64) {
    if a == b || (a.is_nan() && b.is_nan()) {
        (0.0, 0.0)
    } else if !a.is_finite() || !b.is_finite() {
        (f64::INFINITY, f64::INFINITY)
    } else {
        let e = (a - b).abs();
        (e, e / (1.0 + a.abs()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn non_finite_values_match_only_themselves() {
        let inf = f64::INFINITY;
        assert_eq!(difference(f64::NAN, f64::NAN), (0.0, 0.0));
        assert_eq!(difference(inf, inf), (0.0, 0.0));
        for (a, b) in [(inf, 1.0), (1.0, inf), (f64::NAN, 1.0), (1.0, f64::NAN), (inf, -inf), (f64::NAN, inf)] {
            assert_eq!(difference(a, b), (inf, inf), "{a} vs {b}");
        }
        assert_eq!(difference(1.0, 1.5), (0.5, 0.25));
    }
}
