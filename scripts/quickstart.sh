#!/usr/bin/env bash
# Builds amk and runs its main job on a sample: on the GPU when there is one (checked against the
# CPU reference), else on the CPU reference backend. Outputs land in out/mlp_block.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cmake --preset default >/dev/null
cmake --build --preset default -j "$(nproc)"
if ./build/default/amk devices >/dev/null 2>&1; then
  ./build/default/amk run samples/mlp_block.json --backend cuda --check -o out/mlp_block
else
  ./build/default/amk run samples/mlp_block.json -o out/mlp_block
fi
