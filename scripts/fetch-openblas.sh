#!/usr/bin/env bash
# Installs OpenBLAS from the PyPI package scipy-openblas32 (an LP64 CBLAS, symbols prefixed
# `scipy_`) and prints the path of its shared library: the tests run the CPU target's vendor
# BLAS path (RUSTRAL_BLAS, runtime/src/cpu/blas.rs) against it. Does nothing when present.
set -euo pipefail
exec bash "$(dirname "$0")/pip-file.sh" "scipy-openblas32==0.3.34.481.3" scipy_openblas32 lib/libscipy_openblas.so "about 8 MB"
