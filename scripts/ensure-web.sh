#!/usr/bin/env bash
# Set up what the WebGPU hosts beside wgpu need (scripts/tint-check.sh, scripts/web-check.sh):
# Debian's chromium (headless Chromium, and its SwiftShader, the Vulkan driver Dawn accepts
# where there is no GPU: Debian 12's own lavapipe is too old for it), node and npm, and the
# web package's pinned dev dependencies (web/package-lock.json: Dawn as the `webgpu` package,
# puppeteer-core, typescript). Installs what is missing (apt-get as root or with sudo; npm
# from its registry). Exit status 0 when ready; when something cannot be installed, 1 in CI
# (CI set) and 3 elsewhere (the caller warns and skips).
set -euo pipefail
cd "$(dirname "$0")/.."
missing() {
    if [ -n "${CI:-}" ]; then
        echo "ensure-web: $1" >&2
        exit 1
    fi
    echo "!!!!! $1 !!!!!" >&2
    exit 3
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
if [ ! -f /usr/lib/chromium/vk_swiftshader_icd.json ] || ! command -v chromium >/dev/null 2>&1; then
    apt_install chromium || missing "chromium (and its SwiftShader) is not installed"
fi
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
    apt_install nodejs npm || missing "node and npm are not installed"
fi
if ! (cd web && npm ls --depth=0 >/dev/null 2>&1); then
    (cd web && npm ci --no-audit --no-fund --loglevel=error >&2) || missing "npm could not install web/'s dev dependencies"
fi
