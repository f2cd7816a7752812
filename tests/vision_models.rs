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
    let f = fixture(dir);
    let mut targets = vec!["cpu", "candle-cpu"];
    if common::wgsl_available() {
        targets.push("wgsl");
    }
    for target in targets {
        for level in ["-O0", "-O2"] {
            let out = tempfile::tempdir().unwrap();
            let pixels = format!("pixel_values={}", f.join("pixel_values.npy").display());
            let config = f.join("config.json");
            let weights = f.join("model.safetensors");
            stdout(cli().args(["--model", model, "--target", target, level, "-q", "--input", &pixels]).args([
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
            println!("{dir} on {target} {level}: max abs error {worst:.1e}");
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

#[test]
fn vit_matches_transformers() {
    check("vit", "vit");
}

/// One channel, no query/key/value biases, GELU tanh, eps 1e-6, a narrower pooler.
#[test]
fn vit_gray_matches_transformers() {
    check("vit", "vit-gray");
}
