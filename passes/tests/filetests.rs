//! Rule filetests, in the style of egg's `test_fn!` and LLVM's FileCheck: each file in
//! `tests/filetests/` is IR text in and the fused IR text out, for one rule (or a near miss that
//! must not fuse), so a rule's behaviour reads as the IR a user sees.
//!
//! ```text
//! # rule: layer-norm          (the rule that must fire; `none` for a near miss)
//! # pass: fuse-layer-norm     (the one pass that runs, then dead-code elimination)
//! # source: Flax's LayerNorm  (optional: the code base whose spelling this is)
//! # near: gelu-tanh: wanted ?c = 0.044715, found 0.044
//!                             (one line per near miss `--explain-fusion` must report; a
//!                              case without one must report none)
//! graph "t" { ... }           (the input)
//! # expect:                   (`# expect: unchanged` for a near miss)
//! graph "t" { ... }           (the output, as `rustral_ir::print` writes it)
//! ```
//!
//! Besides the text, every case is evaluated before and after on the reference interpreter
//! (same outputs within 1e-5 + 1e-4 relative): the expected text is checked by the oracle, not
//! only by the pass that produced it. `RUSTRAL_FILETEST_PRINT=1` prints each actual output.

mod common;
use rustral_ir::{Graph, parse_verified, print};
use rustral_passes::fuse::{Family, Fuse};
use rustral_passes::{Dce, FoldBatchNorm, FuseConvEpilogue, FuseElementwise, Pass, PassManager};
use std::path::Path;

struct Case {
    rule: String,
    source: Option<String>,
    near: Vec<String>,
    pass: String,
    input: String,
    expect: Option<String>,
}

fn header<'a>(text: &'a str, key: &str) -> Option<&'a str> {
    text.lines().find_map(|l| l.strip_prefix(&format!("# {key}:")).map(str::trim))
}

fn read_case(path: &Path) -> Case {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let (input, expect) = text.split_once("# expect:").unwrap_or_else(|| panic!("{}: no `# expect:`", path.display()));
    let expect = expect.trim();
    Case {
        rule: header(input, "rule").unwrap_or_else(|| panic!("{}: no `# rule:`", path.display())).to_string(),
        pass: header(input, "pass").unwrap_or_else(|| panic!("{}: no `# pass:`", path.display())).to_string(),
        source: header(input, "source").map(str::to_string),
        near: input.lines().filter_map(|l| l.strip_prefix("# near:")).map(|l| l.trim().to_string()).collect(),
        input: input.to_string(),
        expect: (expect != "unchanged").then(|| expect.to_string()),
    }
}

fn pass(name: &str) -> Box<dyn Pass> {
    match name {
        "fuse-elementwise" => return Box::new(FuseElementwise),
        "fold-batch-norm" => return Box::new(FoldBatchNorm),
        "fuse-conv-epilogue" => return Box::new(FuseConvEpilogue),
        _ => {}
    }
    let family = Family::ALL.into_iter().find(|f| f.pass_name() == name);
    Box::new(Fuse::new(family.unwrap_or_else(|| panic!("no fusion pass named {name}"))))
}

fn run_case(path: &Path) -> Result<(), String> {
    let case = read_case(path);
    let g = parse_verified(&case.input).map_err(|e| format!("input: {e}"))?;
    let mut out: Graph = g.clone();
    let compiled = PassManager::with_passes(vec![pass(&case.pass), Box::new(Dce)])
        .verify_each(true)
        .run(&mut out)
        .map_err(|e| e.to_string())?;
    let actual = print(&out);
    let near: Vec<String> = compiled.stats.passes[0]
        .egg
        .iter()
        .flat_map(|e| &e.explained)
        .flat_map(|r| &r.near_misses)
        .map(|m| format!("{}: wanted {}, found {}", m.rule, m.wanted, m.found))
        .collect();
    if std::env::var_os("RUSTRAL_FILETEST_PRINT").is_some() {
        eprintln!("== {}\n{actual}near misses: {near:?}", path.display());
    }
    let want = match &case.expect {
        Some(text) => print(&parse_verified(text).map_err(|e| format!("expected text: {e}"))?),
        None => print(&g),
    };
    if actual != want {
        return Err(format!("output differs\n--- expected\n{want}--- actual\n{actual}"));
    }
    let (mut want_near, mut near) = (case.near.clone(), near);
    want_near.sort();
    near.sort();
    if near != want_near {
        return Err(format!("near misses differ\n--- expected\n{want_near:#?}\n--- actual\n{near:#?}"));
    }
    let fired = &compiled.stats.passes[0].rules;
    match case.rule.as_str() {
        "none" if fired.values().any(|&n| n > 0) => return Err(format!("a near miss fired {fired:?}")),
        "none" => {}
        rule if fired.get(rule).copied().unwrap_or(0) == 0 => {
            return Err(format!("rule `{rule}` did not fire (fired: {fired:?})"));
        }
        _ => {}
    }
    let feeds = common::feeds(&g, None, &[("batch", 3), ("seq", 5)], 4);
    common::assert_same_outputs(&g, &out, &feeds, 1e-5, 1e-4);
    Ok(())
}

/// Every `.rir` file of `tests/filetests/`, sorted.
fn case_paths() -> Vec<std::path::PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/filetests");
    let mut paths: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("a directory entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "rir"))
        .collect();
    paths.sort();
    assert!(paths.len() >= 20, "the filetests are missing: {}", dir.display());
    paths
}

#[test]
fn every_rule_filetest_gives_its_expected_ir() {
    let paths = case_paths();
    let failures: Vec<String> = paths
        .iter()
        .filter_map(|p| run_case(p).err().map(|e| format!("{}: {e}", p.file_name().unwrap().to_string_lossy())))
        .collect();
    assert!(failures.is_empty(), "{} of {} filetests failed:\n{}", failures.len(), paths.len(), failures.join("\n\n"));
}

#[test]
fn every_fusion_family_has_a_filetest_and_a_near_miss() {
    let cases: Vec<Case> = case_paths().iter().map(|p| read_case(p)).collect();
    for family in Family::ALL {
        let name = family.pass_name();
        let of = |near: bool| cases.iter().filter(|c| c.pass == name && (c.rule == "none") == near).count();
        assert!(of(false) >= 1, "{name} has no filetest");
        assert!(of(true) >= 1, "{name} has no near-miss filetest");
    }
}

/// The spellings collected from real code bases (PyTorch, HF transformers, JAX, Flax, optax,
/// timm, Whisper, llm.c, llama2.c, ggml, tinygrad): at least 25, every family among them,
/// each fused (the first test checks that the named rule fires and the output is the
/// oracle's).
#[test]
fn spellings_from_real_code_bases_all_fuse() {
    let cases: Vec<Case> = case_paths().iter().map(|p| read_case(p)).collect();
    let spellings: Vec<&Case> = cases.iter().filter(|c| c.source.is_some() && c.rule != "none").collect();
    assert!(spellings.len() >= 25, "only {} spellings with a `# source:`", spellings.len());
    for family in Family::ALL {
        let name = family.pass_name();
        let n = spellings.iter().filter(|c| c.pass == name).count();
        assert!(n >= 2, "{name} has {n} spellings from real code bases, want at least 2");
    }
}
