//! The ablation harness: statistics against values worked out by hand and Student's t tables,
//! manifests against their schema (a complete one validates, one missing a field does not),
//! and a report rendered from real manifests.

use rustral_bench::ablate::{PassSet, measure};
use rustral_bench::manifest::{self, validate};
use rustral_bench::report;
use rustral_bench::stats::{median_ci95, paired_ratios, summarize, t_975};
use rustral_bench::workloads;
use rustral_passes::OptLevel;

#[test]
fn statistics_match_hand_computed_values() {
    // 2, 4, 4, 4, 5, 5, 7, 9: sum 40, mean 5; squared deviations sum to 32, so the sample
    // variance is 32 / 7; the middle two values are 4 and 5.
    let s = summarize(&[2.0, 4.0, 4.0, 4.0, 5.0, 5.0, 7.0, 9.0]);
    assert_eq!(s.n, 8);
    assert!((s.mean_ms - 5.0).abs() < 1e-12);
    assert!((s.median_ms - 4.5).abs() < 1e-12);
    let std = (32.0f64 / 7.0).sqrt();
    assert!((s.std_ms - std).abs() < 1e-12);
    // t(0.975, 7) = 2.364624 (Student's t table).
    let half = 2.364624 * std / 8f64.sqrt();
    assert!((s.ci95_ms[0] - (5.0 - half)).abs() < 1e-6 && (s.ci95_ms[1] - (5.0 + half)).abs() < 1e-6, "{s:?}");
    assert_eq!((s.min_ms, s.max_ms), (2.0, 9.0));

    let odd = summarize(&[3.0, 1.0, 2.0]);
    assert_eq!(odd.median_ms, 2.0);
    let one = summarize(&[1.5]);
    assert_eq!((one.std_ms, one.ci95_ms), (0.0, [1.5, 1.5]));
}

#[test]
fn t_quantiles_match_tables() {
    // Table values of t(0.975, df).
    for (df, t) in
        [(1, 12.706205), (4, 2.776445), (9, 2.262157), (30, 2.042272), (40, 2.021075), (60, 2.000298), (120, 1.979930)]
    {
        assert!((t_975(df) - t).abs() < 2e-4, "df {df}: {} vs {t}", t_975(df));
    }
    assert!((t_975(1_000_000) - 1.959964).abs() < 1e-5);
}

#[test]
fn median_intervals_are_order_statistics() {
    // n = 10: P(Binomial(10, 1/2) <= 1) = 11/1024 <= 0.025 < P(<= 2) = 56/1024, so k = 2 and the
    // interval is [x(2), x(9)] of the sorted values.
    let xs = [9.0, 1.0, 8.0, 2.0, 7.0, 3.0, 6.0, 4.0, 5.0, 10.0];
    assert_eq!(median_ci95(&xs), Some((5.5, [2.0, 9.0])));
    // n = 5: even P(X = 0) = 1/32 > 0.025, so only the whole range covers the median at 95%.
    assert_eq!(median_ci95(&[3.0, 1.0, 2.0, 5.0, 4.0]), Some((3.0, [1.0, 5.0])));
    // n = 100: the textbook ranks are 40 and 61 (P(X <= 39) = 0.0176, P(X <= 40) = 0.0284).
    let hundred: Vec<f64> = (1..=100).rev().map(f64::from).collect();
    assert_eq!(median_ci95(&hundred), Some((50.5, [40.0, 61.0])));
    // n = 2000 does not underflow (0.5^2000 is below f64's range): ranks 956 and 1045, from
    // exact binomial sums (Python's math.comb), near the normal approximation's
    // 1000.5 -/+ 1.96 * sqrt(500) = 956.7 .. 1044.3.
    let many: Vec<f64> = (1..=2000).map(f64::from).collect();
    assert_eq!(median_ci95(&many), Some((1000.5, [956.0, 1045.0])));
    assert_eq!(median_ci95(&[]), None);

    assert_eq!(paired_ratios(&[2.0, 9.0], &[1.0, 3.0]), Some(vec![2.0, 3.0]));
    assert_eq!(paired_ratios(&[2.0], &[1.0, 3.0]), None, "runs of different rounds do not pair");
}

fn small_runs(sets: Vec<PassSet>) -> Vec<manifest::Manifest> {
    let w = workloads::by_name("layer_norm").expect("layer_norm workload");
    measure("cpu", &w, &sets, 1, 3, 0.0).expect("runs")
}

fn small_run(label: &str, level: OptLevel, disabled: Vec<&'static str>) -> manifest::Manifest {
    small_runs(vec![PassSet { label: label.into(), level, disabled }]).remove(0)
}

#[test]
fn manifests_validate_and_a_missing_field_fails() {
    let m = small_run("O2", OptLevel::O2, vec![]);
    assert_eq!(m.timings_ms.len(), 3);
    assert_eq!(m.program.kernels, 1, "LayerNorm fuses into one kernel at O2");
    assert!(m.kernel_ms_by_op.contains_key("layer_norm"));
    let value = serde_json::to_value(&m).unwrap();
    validate(&value).expect("a manifest the harness wrote validates");

    for path in [&["stats"][..], &["machine", "cores"], &["build", "git_sha"], &["pipeline", "passes"]] {
        let mut v = value.clone();
        let (last, parents) = path.split_last().unwrap();
        let mut obj = &mut v;
        for p in parents {
            obj = obj.get_mut(*p).unwrap();
        }
        obj.as_object_mut().unwrap().remove(*last);
        let err = validate(&v).expect_err("a manifest missing a field must not validate");
        assert!(err.contains(last), "{path:?}: {err}");
    }
    let mut wrong = value.clone();
    wrong["threads"] = serde_json::json!(0);
    assert!(validate(&wrong).is_err(), "zero threads");
}

#[test]
fn report_renders_tables_and_charts() {
    let dir = tempfile::tempdir().unwrap();
    let ms = small_runs(vec![
        PassSet { label: "O0".into(), level: OptLevel::O0, disabled: vec![] },
        PassSet { label: "O2".into(), level: OptLevel::O2, disabled: vec![] },
        PassSet { label: "O2-fuse-layer-norm".into(), level: OptLevel::O2, disabled: vec!["fuse-layer-norm"] },
    ]);
    // Interleaved: every pipeline ran the same rounds, so their timings pair.
    assert!(ms.iter().all(|m| m.timings_ms.len() == ms[0].timings_ms.len()));
    for (i, m) in ms.iter().enumerate() {
        manifest::write(m, &dir.path().join(format!("{i}.json"))).unwrap();
    }
    let loaded = report::load(dir.path()).unwrap();
    assert_eq!(loaded.len(), 3);
    let md = report::render(&loaded, dir.path()).unwrap();
    assert!(md.contains("| layer_norm | cpu | 1 |"), "{md}");
    let o0 = ms[0].stats.median_ms / ms[1].stats.median_ms;
    assert!(md.contains(&format!("{o0:.2}x")), "the O0 / O2 ratio is in the table:\n{md}");
    // What fuse-layer-norm buys is the median of the paired per-round ratios.
    let ratios = paired_ratios(&ms[2].timings_ms, &ms[1].timings_ms).unwrap();
    let buys = median_ci95(&ratios).unwrap().0;
    assert!(md.contains(&format!("{buys:.2}x")), "the paired ratio {buys:.2}x is in the table:\n{md}");
    assert!(md.contains("No fusion pass made a workload measurably slower"), "{md}");

    // The same runs with the unfused pipeline's timings halved: the pass now costs time, and
    // the report says so by name.
    let mut faster_off = ms.clone();
    faster_off[2].timings_ms = ms[1].timings_ms.iter().map(|t| t * 0.5).collect();
    faster_off[2].stats = summarize(&faster_off[2].timings_ms);
    let md_slow = report::render(&faster_off, dir.path()).unwrap();
    assert!(md_slow.contains("measurably slower: fuse-layer-norm on layer_norm (cpu, 1 threads;"), "{md_slow}");
    let svg = std::fs::read_to_string(dir.path().join("speedup_layer_norm_cpu_1t.svg")).unwrap();
    assert!(svg.contains("<svg") && svg.contains("layer-norm"), "{svg}");
}

/// The manifests committed under bench/results still validate against the schema.
#[test]
fn committed_manifests_validate() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("results/manifests");
    let ms = report::load(&dir).expect("every committed manifest validates");
    assert!(ms.len() >= 80, "the committed ablation has {} manifests", ms.len());
}
