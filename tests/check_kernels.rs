//! `rustral::check_kernels`: each fused kernel of a GPT-2 block, run by each target on a real
//! run's values, within 1e-4 of the f64 reference of the primitives it replaced; and a
//! contract doctored to another function (GELU's 0.044715 made 0.5, what a wrong rule
//! would fuse) is caught, with the rule that built the kernel named.

use rustral::check_kernels::{check_contracts, check_kernels, per_rule};
use rustral::ir::{F64, Literal, Op};
use rustral::prelude::*;
use rustral::{CompileOptions, Session, Target, host_params};

mod common;

const TOLERANCE: f64 = 1e-4;

fn targets() -> Vec<Target> {
    let mut t = vec![Target::Cpu, Target::Candle(rustral::runtime::candle::Device::Cpu)];
    if common::wgsl_available() {
        t.push(Target::Wgsl);
    }
    t
}

/// A tiny GPT-2 with seeded parameters and inputs.
struct Run {
    traced: rustral::frontend::Traced,
    store: ParamStore,
    params: std::collections::HashMap<String, HostTensor>,
    inputs: Vec<(String, HostTensor)>,
}

impl Run {
    fn gpt2() -> Run {
        let traced = common::models().into_iter().find(|(name, _)| *name == "gpt2").unwrap().1;
        let store = ParamStore::init(&traced.params, 5);
        let params = host_params(&store).unwrap();
        let inputs = common::inputs(&traced.graph, 2, 7, 50);
        Run { traced, store, params, inputs }
    }
}

#[test]
fn every_fused_kernel_is_within_tolerance_of_what_it_replaced_on_every_target() {
    let Run { traced, store, params, inputs } = Run::gpt2();
    let inputs: Vec<(&str, HostTensor)> = inputs.iter().map(|(n, t)| (n.as_str(), t.clone())).collect();
    for target in targets() {
        let options = CompileOptions { contracts: true, threads: 2, ..CompileOptions::default() };
        let mut session = Session::compile(&traced.graph, target.clone(), &options).unwrap();
        session.bind(&store).unwrap();
        let checks = check_kernels(&session, &options, &params, &inputs).unwrap();
        let fused = session.graph().node_ids().filter(|&id| session.graph().node(id).unwrap().op.is_fused()).count();
        assert_eq!(checks.len(), fused, "{target:?}: every fused kernel is checked");
        for op in ["layer_norm", "attention", "matmul_epilogue"] {
            assert!(checks.iter().any(|c| c.op == op), "{target:?}: no {op} among {checks:?}");
        }
        for c in &checks {
            assert!(c.ok(TOLERANCE), "{target:?}: {c:?}");
            // Each kernel's rules are those of the passes that built what it replaced: an
            // attention's are attention's and softmax's, never another family's.
            let family = match c.op.as_str() {
                "layer_norm" => vec!["fuse-layer-norm"],
                "attention" => vec!["fuse-attention", "fuse-softmax"],
                "matmul_epilogue" => vec!["fuse-matmul-epilogue", "fuse-gelu"],
                _ => vec![],
            };
            assert!(c.rules.iter().all(|r| family.contains(&r.pass.as_str())), "{target:?}: {c:?}");
            assert!(c.elements > 0 && !c.rules.is_empty() && !c.loc.is_empty(), "{target:?}: {c:?}");
        }
        println!("{target:?}: worst {:.2e}", checks.iter().map(|c| c.max_rel).fold(0.0, f64::max));
    }
}

#[test]
fn a_contract_for_another_function_blames_the_rule() {
    let Run { traced, store, params, inputs } = Run::gpt2();
    let inputs: Vec<(&str, HostTensor)> = inputs.iter().map(|(n, t)| (n.as_str(), t.clone())).collect();
    let options = CompileOptions { contracts: true, threads: 2, ..CompileOptions::default() };
    let mut session = Session::compile(&traced.graph, Target::Cpu, &options).unwrap();
    session.bind(&store).unwrap();
    // The GELU's primitives with 0.5 for 0.044715: a rule that fused them as GELU would be wrong.
    let mut contracts = session.contracts().clone();
    let mut doctored = 0;
    for c in contracts.values_mut() {
        let g = &mut c.replaced;
        let ids: Vec<_> = g.node_ids().collect();
        for id in ids {
            let node = g.node_mut(id).unwrap();
            if let Op::Constant { value: Literal::Splat(v) } = &mut node.op
                && (v.0 - 0.044715).abs() < 1e-6
            {
                *v = F64(0.5);
                doctored += 1;
            }
        }
    }
    assert!(doctored > 0, "no GELU constant among the contracts");
    let checks = check_contracts(session.graph(), &contracts, &session, &options, &params, &inputs).unwrap();
    let bad: Vec<_> = checks.iter().filter(|c| !c.ok(TOLERANCE)).collect();
    assert!(!bad.is_empty(), "{checks:?}");
    for c in &bad {
        assert!(c.rules.iter().any(|r| r.rule == "gelu-tanh" && r.pass == "fuse-gelu"), "{c:?}");
        assert!(c.op == "matmul_epilogue" || c.op == "gelu", "{c:?}");
    }
    // The rule's worst kernel shows the error too; the other rules stay within tolerance.
    for (rule, pass, _, worst) in per_rule(&checks) {
        let blamed = bad.iter().any(|c| c.rules.iter().any(|r| r.rule == rule && r.pass == pass));
        assert_eq!(worst > TOLERANCE, blamed, "{rule} ({pass}): {worst:e}");
    }
}
