#!/usr/bin/env bash
# The MiniLM browser demo in one command: fetch all-MiniLM-L6-v2 when missing, compile it to a
# WGSL program folder (target/web/minilm, with its vocab.txt), and serve web/ with it at
# http://localhost:${PORT:-8080}/demo/minilm/ (open it in a browser with WebGPU: Chrome or
# Edge 113+, Firefox 141+, Safari 26+). Needs cargo and node.
set -euo pipefail
cd "$(dirname "$0")/.."
dir="${RUSTRAL_MINILM_DIR:-$(bash scripts/fetch-minilm.sh)}"
out=target/web/minilm
# Compiling for wgsl opens a WebGPU adapter (Mesa's software Vulkan driver without a GPU).
export XDG_RUNTIME_DIR="${XDG_RUNTIME_DIR:-$(bash scripts/ensure-vulkan.sh)}"
if [ ! -f "$out/program.json" ] || [ "$out/program.json" -ot "$dir/model.safetensors" ]; then
    cargo run --release -q --bin rustral-compile -- --model minilm --config "$dir/config.json" \
        --weights "$dir/model.safetensors" --target wgsl --emit wgsl -o target/web/minilm-build
    rm -rf "$out" && mv target/web/minilm-build/wgsl "$out" && rm -rf target/web/minilm-build
    cp "$dir/vocab.txt" "$out/"
fi
exec node web/tools/serve.mjs --port "${PORT:-8080}" "/program/=$out"
