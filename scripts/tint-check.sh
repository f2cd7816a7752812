#!/usr/bin/env bash
# Compile every WGSL shader under the given folders with Tint (Dawn, the `webgpu` npm package,
# pinned in scripts/tint/package-lock.json) as a second validator beside naga: naga and Tint
# disagree on what they accept (float literals beyond f32's range, uniformity before
# barriers), and a WGSL program must run on every WebGPU host. Dawn rejects Debian 12's own
# lavapipe, so it runs on SwiftShader from Debian's chromium package. Installs chromium, node
# and the npm package when missing (apt-get as root or with sudo; npm from its registry).
# Without them it fails in CI (CI set) and warns and skips elsewhere.
set -euo pipefail
dirs=()
for d in "$@"; do dirs+=("$(cd "$d" && pwd)"); done
cd "$(dirname "$0")/.."
icd=/usr/lib/chromium/vk_swiftshader_icd.json
missing() {
    if [ -n "${CI:-}" ]; then
        echo "tint-check: $1" >&2
        exit 1
    fi
    echo "!!!!! SKIPPING the Tint check: $1 !!!!!" >&2
    exit 0
}
apt_install() {
    local sudo=""
    if [ "$(id -u)" != 0 ]; then
        if command -v sudo >/dev/null 2>&1; then sudo="sudo -n"; else return 1; fi
    fi
    command -v apt-get >/dev/null 2>&1 || return 1
    echo "installing $* ..." >&2
    { $sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "$@"; } >&2
}
if [ ! -f "$icd" ]; then
    apt_install chromium || missing "SwiftShader ($icd, Debian's chromium package) is not installed"
fi
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
    apt_install nodejs npm || missing "node and npm are not installed"
fi
if [ ! -f scripts/tint/node_modules/webgpu/package.json ]; then
    (cd scripts/tint && npm ci --no-audit --no-fund --loglevel=error >&2) || missing "npm could not install webgpu"
fi
VK_ICD_FILENAMES="$icd" LD_LIBRARY_PATH="/usr/lib/chromium${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
    node scripts/tint/check.mjs "${dirs[@]}"
