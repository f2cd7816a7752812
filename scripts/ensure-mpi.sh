#!/usr/bin/env bash
# Makes sure Open MPI is here for the data-parallel tests (feature `mpi`): installs Debian's
# openmpi-bin (mpirun), libopenmpi-dev (mpi.h, libmpi) and libclang-dev (rsmpi generates its
# bindings with bindgen) when mpirun or mpi.h is missing and apt-get can run (as root or with
# sudo). Exits non-zero when Open MPI is still missing, naming what to install.
set -uo pipefail
have() {
    command -v mpirun >/dev/null 2>&1 && command -v mpicc >/dev/null 2>&1 \
        && ls /usr/lib/llvm-*/lib/libclang*.so* /usr/lib/*/libclang*.so* >/dev/null 2>&1
}
if ! have && command -v apt-get >/dev/null 2>&1; then
    sudo=""
    if [ "$(id -u)" != 0 ]; then
        if command -v sudo >/dev/null 2>&1; then sudo="sudo -n"; else sudo="unavailable"; fi
    fi
    if [ "$sudo" != unavailable ]; then
        echo "installing Open MPI (openmpi-bin libopenmpi-dev libclang-dev) ..." >&2
        { $sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq \
            openmpi-bin libopenmpi-dev libclang-dev; } >&2 || echo "could not install Open MPI" >&2
    fi
fi
if ! have; then
    echo "Open MPI or libclang is missing: install openmpi-bin libopenmpi-dev libclang-dev (or build without --features mpi)" >&2
    exit 1
fi
