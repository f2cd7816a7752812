#!/usr/bin/env bash
# Run every fuzz target for SECONDS each (default 60): the file readers (fuzz/: safetensors,
# npy, config, gguf) and the IR's parser and decoder (ir/fuzz/: parse_text, decode_binary),
# each from its committed seeds (fuzz/seeds/, ir/fuzz/seeds/) in a fresh corpus folder.
# Built without a sanitizer (`-s none`), so stable Rust builds them; libFuzzer stops at a
# panic, an abort, a run over 10 s or more than 2 GiB of memory, and this script fails then.
# Installs cargo-fuzz when it is missing.
#   bash scripts/fuzz.sh 600        # the 10-minute runs
#   bash scripts/fuzz.sh 20 npy     # one target
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-60}"
only="${2:-}"
if ! cargo fuzz --version >/dev/null 2>&1; then
    cargo install cargo-fuzz --version 0.13.2 --locked
fi
corpus="$(mktemp -d)"
trap 'rm -rf "$corpus"' EXIT
run() {
    local dir="$1" target="$2"
    [ -n "$only" ] && [ "$only" != "$target" ] && return 0
    mkdir -p "$corpus/$target"
    echo "== fuzz $target for ${seconds}s"
    local log="$corpus/$target.log" status=0
    (cd "$dir" && cargo fuzz run -s none "$target" "$corpus/$target" "seeds/$target" -- \
        -max_total_time="$seconds" -rss_limit_mb=2048 -timeout=10 -print_final_stats=1) >"$log" 2>&1 || status=$?
    grep -E "^(stat::number_of_executed_units|stat::peak_rss_mb|==[0-9]+== ERROR|SUMMARY|Done)|panicked" "$log" || true
    if [ "$status" -ne 0 ]; then
        grep -E -A3 "panicked|ERROR|Failing input" "$log" | grep -v "^\s*\[" | head -20
        echo "fuzz $target failed (exit $status); the input is in $dir/artifacts/$target/" >&2
        failed=1
    fi
}
failed=0
for t in safetensors npy config gguf; do run fuzz "$t"; done
for t in parse_text decode_binary; do run ir/fuzz "$t"; done
exit "$failed"
