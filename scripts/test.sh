#!/usr/bin/env bash
# Builds amk and runs its tests (unit, nvrtc when the CUDA toolkit is present, gpu when a GPU is
# present, CLI smoke, samples vs numpy, bad-input corpus). The README's test command.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cmake --preset default
cmake --build --preset default -j "$(nproc)"
ctest --preset default -j "$(nproc)"
