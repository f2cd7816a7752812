#!/usr/bin/env bash
# Compile every WGSL shader under the given folders with Tint (Dawn, the `webgpu` npm package,
# pinned in web/package-lock.json) as a second validator beside naga: naga and Tint disagree
# on what they accept (float literals beyond f32's range, uniformity before barriers), and a
# WGSL program must run on every WebGPU host. Dawn runs on SwiftShader from Debian's chromium
# package. scripts/ensure-web.sh installs what is missing; without it this fails in CI (CI
# set) and warns and skips elsewhere.
set -euo pipefail
dirs=()
for d in "$@"; do dirs+=("$(cd "$d" && pwd)"); done
cd "$(dirname "$0")/.."
bash scripts/ensure-web.sh || { rc=$?; [ "$rc" = 3 ] && { echo "!!!!! SKIPPING the Tint check !!!!!" >&2; exit 0; }; exit "$rc"; }
VK_ICD_FILENAMES=/usr/lib/chromium/vk_swiftshader_icd.json LD_LIBRARY_PATH="/usr/lib/chromium${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
    node web/tools/tint-check.mjs "${dirs[@]}"
