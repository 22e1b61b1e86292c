#!/usr/bin/env bash
# Builds amk and runs its main job on a sample: on the GPU when there is one (checked against the
# CPU reference), else on the CPU reference backend. Outputs land in out/mlp_block.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cmake --preset default >/dev/null
cmake --build --preset default -j "$(nproc)"
# (amk devices lists none, exit 0, without a driver or a device)
if ./build/default/amk devices 2>/dev/null | grep -q '^[0-9][0-9]*: '; then
  ./build/default/amk run samples/mlp_block.json --backend cuda --check -o out/mlp_block
else
  ./build/default/amk run samples/mlp_block.json -o out/mlp_block
fi
