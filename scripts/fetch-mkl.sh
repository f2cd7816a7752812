#!/usr/bin/env bash
# Fetches Intel MKL from PyPI (the `mkl` wheel, about 230 MB to download), unpacks the
# libraries its sequential `cblas_sgemm` needs into ~/.cache/rustral/mkl-VERSION (about
# 460 MB) and prints the path of libmkl_rt, for
#
#   RUSTRAL_BLAS="$(bash scripts/fetch-mkl.sh)" cargo run --release ...
#
# which makes the CPU target run its GEMMs on MKL (runtime/src/cpu/blas.rs). Does nothing when
# already unpacked. MKL is Intel's; on AMD cores it may not beat the default `gemm` crate.
set -euo pipefail
version="2026.2.1"
dir="${XDG_CACHE_HOME:-$HOME/.cache}/rustral/mkl-$version"
libs="libmkl_rt.so.3 libmkl_core.so.3 libmkl_sequential.so.3 libmkl_intel_lp64.so.3 libmkl_def.so.3
libmkl_mc3.so.3 libmkl_avx2.so.3 libmkl_avx512.so.3 libmkl_avx10.so.3"
if [ ! -e "$dir/libmkl_rt.so.3" ]; then
    echo "fetching mkl==$version from PyPI (about 230 MB) ..." >&2
    tmp="$(mktemp -d)"
    trap 'rm -rf "$tmp"' EXIT
    python3 -m pip download --quiet --no-deps --dest "$tmp" "mkl==$version" >&2
    mkdir -p "$dir.partial"
    for lib in $libs; do
        python3 -c "import sys, zipfile; z = zipfile.ZipFile(sys.argv[1]); open(sys.argv[3], 'wb').write(z.read(next(n for n in z.namelist() if n.endswith('/lib/' + sys.argv[2]))))" \
            "$tmp"/mkl-*.whl "$lib" "$dir.partial/$lib"
    done
    rm -rf "$dir" && mv "$dir.partial" "$dir"
fi
echo "$dir/libmkl_rt.so.3"
