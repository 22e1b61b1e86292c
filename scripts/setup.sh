#!/usr/bin/env bash
# Installs what amk needs to build and test on Debian/Ubuntu (run as root or with sudo).
# The CUDA toolkit (NVRTC + headers) is expected under /usr/local/cuda; amk builds without it
# (CPU backend only) when it is absent.
set -euo pipefail
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
pkgs=(cmake g++ ninja-build libcli11-dev nlohmann-json3-dev libspdlog-dev libfmt-dev doctest-dev
      python3 python3-numpy python3-jsonschema python3-dev pybind11-dev python3-pytest)
# CI's extra tools: clang 14 (the asan and fuzz presets), libFuzzer and clang-format
# (scripts/format.sh --check).
if [ "${AMK_SETUP_FUZZ:-0}" = "1" ]; then pkgs+=(clang-14 libfuzzer-14-dev libclang-rt-14-dev clang-format); fi
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
