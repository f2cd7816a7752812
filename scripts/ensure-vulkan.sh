#!/usr/bin/env bash
# Makes sure wgpu finds a Vulkan adapter for the WGSL target's tests: installs Mesa's software
# Vulkan driver (lavapipe) when no Vulkan ICD is present and apt-get can run (as root or with
# sudo), and prints a 0700 XDG_RUNTIME_DIR for Mesa (which warns without one). Never fails:
# without an adapter the tests themselves fail loudly, naming what to install.
set -uo pipefail
if ! ls /usr/share/vulkan/icd.d/*.json >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1; then
    sudo=""
    if [ "$(id -u)" != 0 ]; then
        if command -v sudo >/dev/null 2>&1; then sudo="sudo -n"; else sudo="unavailable"; fi
    fi
    if [ "$sudo" != unavailable ]; then
        echo "installing Mesa's software Vulkan driver (mesa-vulkan-drivers libvulkan1) ..." >&2
        { $sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq \
            mesa-vulkan-drivers libvulkan1; } >&2 || echo "could not install the Vulkan driver" >&2
    fi
fi
dir="${XDG_RUNTIME_DIR:-/tmp/rustral-xdg-$(id -u)}"
mkdir -p "$dir" && chmod 700 "$dir"
echo "$dir"
