//! ResNet (basic and bottleneck layers) and ViT from Hugging Face configs against transformers
//! (`fixtures/vision/*`, made by `fixtures/vision/make_fixtures.py`: seeded random weights,
//! batch-norm statistics away from identity), as users run them:
//! `rustral-compile --model resnet|vit --config C --weights W --input pixel_values=x.npy
//! --save-outputs DIR`, on every target at -O0 and -O2. Tolerance: 1e-4 absolute plus 1e-4
//! relative to each value.

use common::cli::{cli, stdout};
use std::path::{Path, PathBuf};

mod common;

fn fixture(dir: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fixtures/vision").join(dir)
}

fn npy(path: &Path) -> (Vec<usize>, Vec<f64>) {
    let mut f = std::fs::File::open(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let header = rustral::npy::header(&mut f).unwrap();
    rustral::npy::values(f, &header, rustral::ir::DType::F32).unwrap()
}

fn check(model: &str, dir: &str) {
    let mut targets = vec!["cpu", "candle-cpu"];
    if common::wgsl_available() {
        targets.push("wgsl");
    }
    check_on(model, dir, &targets, None);
}

/// `check` on `targets`, the CPU target's GEMMs run by the CBLAS library `blas` when given
/// (`RUSTRAL_BLAS`).
fn check_on(model: &str, dir: &str, targets: &[&str], blas: Option<&str>) {
    let f = fixture(dir);
    for &target in targets {
        for level in ["-O0", "-O2"] {
            let out = tempfile::tempdir().unwrap();
            let mut cmd = cli();
            if let Some(lib) = blas {
                cmd.env("RUSTRAL_BLAS", lib);
            }
            let pixels = format!("pixel_values={}", f.join("pixel_values.npy").display());
            let config = f.join("config.json");
            let weights = f.join("model.safetensors");
            stdout(cmd.args(["--model", model, "--target", target, level, "-q", "--input", &pixels]).args([
                "--config".as_ref(),
                config.as_os_str(),
                "--weights".as_ref(),
                weights.as_os_str(),
                "--save-outputs".as_ref(),
                out.path().as_os_str(),
            ]));
            let mut worst = 0.0f64;
            for name in ["last_hidden_state", "pooler_output"] {
                let (shape, got) = npy(&out.path().join(format!("{name}.npy")));
                let (want_shape, want) = npy(&f.join(format!("{name}.npy")));
                assert_eq!(shape, want_shape, "{dir} {name} on {target} {level}");
                for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                    assert!(
                        (g - w).abs() <= 1e-4 * (1.0 + w.abs()),
                        "{dir} {name}[{i}] on {target} {level}: {g} vs transformers {w}"
                    );
                    worst = worst.max((g - w).abs());
                }
            }
            println!("{dir} on {target} {level} (BLAS {blas:?}): max abs error {worst:.1e}");
        }
    }
}

#[test]
fn resnet_basic_matches_transformers() {
    check("resnet", "resnet-basic");
}

/// Bottleneck layers, downsampling in the first stage and in the bottleneck's 1x1, and a
/// 40x36 image (the size comes from the input file).
#[test]
fn resnet_bottleneck_matches_transformers() {
    check("resnet", "resnet-bottleneck");
}

/// Convolutions (im2col GEMMs), ViT's projections and attention's products on a vendor BLAS
/// (OpenBLAS from PyPI in the tests: `RUSTRAL_TEST_BLAS`), against the same fixtures.
#[test]
fn resnet_and_vit_match_transformers_on_a_vendor_blas() {
    let Some(lib) = common::test_blas() else { return };
    check_on("resnet", "resnet-basic", &["cpu"], Some(&lib));
    check_on("vit", "vit", &["cpu"], Some(&lib));
}

#[test]
fn vit_matches_transformers() {
    check("vit", "vit");
}

/// One channel, no query/key/value biases, GELU tanh, eps 1e-6, a narrower pooler.
#[test]
fn vit_gray_matches_transformers() {
    check("vit", "vit-gray");
}

/// The same models through the library API on the WGSL target at O2, checked against
/// transformers; with `RUSTRAL_WEB_DUMP` set (scripts/test.sh) their program folders are left
/// for the JS runtime to run in Dawn and headless Chromium (scripts/web-check.sh), so the
/// convolution, pooling and patch kernels run in a browser too.
#[test]
fn wgsl_programs_match_transformers_and_go_to_the_browser() {
    use rustral::frontend::{ParamStore, ShapePolicy, TraceOptions, trace_named};
    use rustral::models::{RESNET_UNUSED_WEIGHTS, ResNet, ResNetConfig, Vit, VitConfig};
    use rustral::prelude::*;
    if !common::wgsl_available() {
        return;
    }
    for dir in ["resnet-basic", "vit"] {
        let f = fixture(dir);
        let (shape, pixels) = npy(&f.join("pixel_values.npy"));
        let policy = ShapePolicy::symbolic().pin("height", shape[2]).pin("width", shape[3]);
        let options = TraceOptions { shape: policy, ..TraceOptions::default() };
        let (traced, ignore) = if dir.starts_with("resnet") {
            let model = ResNet { config: ResNetConfig::from_file(&f.join("config.json")).unwrap() };
            let t = trace_named(options, |ctx| {
                let x = model.input(ctx)?;
                let (h, p) = model.forward(ctx, &x)?;
                Ok(vec![("last_hidden_state".into(), h), ("pooler_output".into(), p)])
            });
            (t.unwrap(), RESNET_UNUSED_WEIGHTS)
        } else {
            let model = Vit { config: VitConfig::from_file(&f.join("config.json")).unwrap() };
            let t = trace_named(options, |ctx| {
                let x = model.input(ctx)?;
                let (h, p) = model.forward(ctx, &x)?;
                Ok(vec![("last_hidden_state".into(), h), ("pooler_output".into(), p)])
            });
            (t.unwrap(), &[][..])
        };
        let store = ParamStore::load_safetensors(&f.join("model.safetensors"), &traced.params, ignore).unwrap();
        let options = CompileOptions::default();
        let mut s = Session::compile(&traced.graph, Target::Wgsl, &options).unwrap();
        s.bind(&store).unwrap();
        let feeds = vec![("pixel_values".to_string(), HostTensor::new(DType::F32, &shape, pixels).unwrap())];
        let refs: Vec<(&str, HostTensor)> = feeds.iter().map(|(n, v)| (n.as_str(), v.clone())).collect();
        let out = s.run(&refs).unwrap();
        let (_, want) = npy(&f.join("last_hidden_state.npy"));
        for (g, w) in out[0].1.to_vec().iter().zip(&want) {
            assert!((g - w).abs() <= 1e-4 * (1.0 + w.abs()), "{dir} on wgsl: {g} vs transformers {w}");
        }
        common::web_dump(&format!("{dir}-O2"), &s, &traced, &store, &options, &feeds);
    }
}
