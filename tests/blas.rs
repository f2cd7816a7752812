//! The CPU target with its GEMMs on a vendor BLAS (`RUSTRAL_BLAS`; OpenBLAS from PyPI in the
//! tests, `RUSTRAL_TEST_BLAS`): every test model against the reference interpreter at O0 and
//! O2 (tolerance 1e-4 absolute plus relative, as on the `gemm` crate), manifests naming the
//! library, and a library that cannot be used reported as an error by the CLI. Its own test
//! binary, because the library is chosen once per process.

use common::cli::{cli, user_error};

mod common;

#[test]
fn every_model_matches_the_reference_with_gemms_on_a_vendor_blas() {
    let Some(lib) = common::test_blas() else { return };
    // SAFETY: the only test in this binary, so no other thread reads the environment.
    unsafe { std::env::set_var("RUSTRAL_BLAS", &lib) };
    common::every_model_matches_the_reference(&rustral::prelude::Target::Cpu);
    let gemm = rustral::runtime::provenance::Machine::this().gemm;
    assert!(gemm.starts_with(&lib) && gemm.contains("cblas_sgemm"), "manifests record {gemm:?}");
}

#[test]
fn a_blas_that_cannot_be_used_is_an_error_naming_it() {
    let model = common::cli::root().join("examples/models/mlp.rs");
    user_error(
        cli().env("RUSTRAL_BLAS", "/nonexistent/libopenblas.so").args([
            model.to_str().unwrap(),
            "--target",
            "cpu",
            "--run",
        ]),
        &["RUSTRAL_BLAS=/nonexistent/libopenblas.so"],
    );
}
