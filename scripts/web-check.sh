#!/usr/bin/env bash
# The JS runtime (web/) checked on two WebGPU hosts besides wgpu: node with Dawn and headless
# Chromium, both on SwiftShader where there is no GPU. DIR holds the program folders the Rust
# tests wrote with RUSTRAL_WEB_DUMP=DIR (scripts/test.sh sets it): each runs in both hosts
# against the CPU target's outputs, and the MiniLM demo page is driven in Chromium against
# sentence-transformers' numbers. Then the package's TypeScript types are compiled.
# With RUSTRAL_WGSL_DUMP set (as scripts/test.sh sets it) Chromium also compiles every shader
# the tests emitted. Usage: bash scripts/web-check.sh DIR   (RUSTRAL_WEB_SCREENSHOT=FILE saves the
# demo's picture)
set -euo pipefail
dump="$(cd "$1" && pwd)"
cd "$(dirname "$0")/.."
bash scripts/ensure-web.sh || { rc=$?; [ "$rc" = 3 ] && { echo "!!!!! SKIPPING the web runtime's checks !!!!!" >&2; exit 0; }; exit "$rc"; }
export RUSTRAL_WEB_DUMP="$dump"
export XDG_RUNTIME_DIR="${XDG_RUNTIME_DIR:-$(bash scripts/ensure-vulkan.sh)}"
(
    cd web
    VK_ICD_FILENAMES=/usr/lib/chromium/vk_swiftshader_icd.json LD_LIBRARY_PATH="/usr/lib/chromium${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
        node --test --test-reporter=spec test/wordpiece.test.mjs test/serve.test.mjs test/dawn.test.mjs
    node test/chromium.mjs
    npx --no-install tsc -p test/tsconfig.json
    echo "web-check: the web runtime passed in Dawn and Chromium, and its types compile"
)
