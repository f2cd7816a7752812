//! What `rustral-compile --explain-fusion` reports for each region: every rule's matches,
//! applications and time (egg's backoff scheduler, wrapped so that each search and each
//! apply is counted and timed), and the near misses: family patterns that matched the
//! region's structure but failed one condition, such as GELU's `0.044715` written `0.044`.

use super::Saturation;
use super::analysis::{TensorAnalysis, TensorGraph};
use super::rules::CondKind;
use crate::stats::{NearMiss, RuleReport};
use egg::{BackoffScheduler, Id, Rewrite, RewriteScheduler, SearchMatches, Searcher, SymbolLang};
use std::cell::RefCell;
use std::collections::{BTreeMap, HashSet};
use std::rc::Rc;
use std::time::Instant;

/// Each rule's counts and times, shared between the scheduler (inside the runner) and the
/// pass that reads them when the runner is done.
pub type Ledger = Rc<RefCell<BTreeMap<String, RuleReport>>>;

/// egg's default scheduler, counting and timing every search and apply.
pub struct Timed {
    inner: BackoffScheduler,
    ledger: Ledger,
}

impl Timed {
    /// A scheduler writing into `ledger`.
    pub fn new(ledger: Ledger) -> Timed {
        Timed { inner: BackoffScheduler::default(), ledger }
    }
}

fn ms_since(start: Instant) -> f64 {
    start.elapsed().as_secs_f64() * 1e3
}

impl RewriteScheduler<SymbolLang, TensorAnalysis> for Timed {
    fn can_stop(&mut self, iteration: usize) -> bool {
        <BackoffScheduler as RewriteScheduler<SymbolLang, TensorAnalysis>>::can_stop(&mut self.inner, iteration)
    }

    fn search_rewrite<'a>(
        &mut self,
        iteration: usize,
        egraph: &TensorGraph,
        rewrite: &'a Rewrite<SymbolLang, TensorAnalysis>,
    ) -> Vec<SearchMatches<'a, SymbolLang>> {
        let start = Instant::now();
        let found = self.inner.search_rewrite(iteration, egraph, rewrite);
        let mut ledger = self.ledger.borrow_mut();
        let entry = ledger.entry(rewrite.name.to_string()).or_default();
        entry.search_ms += ms_since(start);
        entry.matches += found.iter().map(|m| m.substs.len()).sum::<usize>();
        found
    }

    fn apply_rewrite(
        &mut self,
        _iteration: usize,
        egraph: &mut TensorGraph,
        rewrite: &Rewrite<SymbolLang, TensorAnalysis>,
        matches: Vec<SearchMatches<SymbolLang>>,
    ) -> usize {
        let start = Instant::now();
        let applied = rewrite.apply(egraph, &matches).len();
        let mut ledger = self.ledger.borrow_mut();
        let entry = ledger.entry(rewrite.name.to_string()).or_default();
        entry.apply_ms += ms_since(start);
        entry.applied += applied;
        applied
    }
}

/// The most near misses reported per region: enough to see what a spelling lacks, not a
/// listing of every partial match in a large layer.
const MAX_NEAR_MISSES: usize = 8;

/// The family rules of `run` whose pattern matches a class of the saturated `egraph` with
/// every condition but one met, among the `live` classes (the program the region ends as;
/// `None`: every class, the region stays as written) where the family built nothing. `at` names a class's module path. One
/// miss per value and condition: the variants of a rule (operands swapped) that fail the same
/// way are one finding.
pub fn near_misses(
    egraph: &mut TensorGraph,
    run: &Saturation<'_>,
    live: Option<&HashSet<Id>>,
    at: &dyn Fn(Id) -> String,
) -> Vec<NearMiss> {
    let mut found: BTreeMap<(String, String), (String, String)> = BTreeMap::new();
    for rule in run.rules.iter().filter(|r| run.family.contains(r.name())) {
        for m in rule.lhs.search(egraph) {
            let class = egraph.find(m.eclass);
            let built = egraph[class].nodes.iter().any(|n| run.fuses.iter().any(|k| n.op.as_str().starts_with(k)));
            if built || live.is_some_and(|l| !l.contains(&class)) {
                continue;
            }
            for subst in &m.substs {
                let failed: Vec<_> = rule.conds.iter().filter(|c| !c.holds(egraph, class, subst)).collect();
                let [cond] = failed[..] else { continue };
                let operand = &egraph[subst[cond.var]].data;
                if cond.kind == CondKind::Shape && operand.ty == egraph[class].data.ty {
                    continue;
                }
                let value = match (operand.splat, &operand.ty) {
                    (Some(v), _) => format!("{v}"),
                    (None, Some(t)) => format!("a non-constant {t}"),
                    (None, None) => "an untyped value".to_string(),
                };
                found.entry((at(class), cond.what.clone())).or_insert((rule.name().to_string(), value));
                break;
            }
        }
    }
    found
        .into_iter()
        .take(MAX_NEAR_MISSES)
        .map(|((at, wanted), (rule, found))| NearMiss { rule, at, wanted, found })
        .collect()
}
