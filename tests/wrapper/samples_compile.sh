#!/usr/bin/env bash
# Every sample wrapper (samples/wrappers/*/make.py) generates, validates, inspects and compiles
# for sm_90a with NVRTC (no GPU): the ptxas log must show its entry point and no spills.
# Running them is scripts/check_wrappers.py's job, on the GPU machine.
set -u
root="$(cd "$(dirname "$0")/../.." && pwd)"
amk="${AMK:?set AMK to the amk binary}"
py=/usr/bin/python3
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
pass=0
fail=0

step() {  # step DESCRIPTION -- command...: exit 0 expected; output kept in $tmp/out
  local what="$1"
  shift 2
  if "$@" >"$tmp/out" 2>&1; then pass=$((pass + 1)); else
    fail=$((fail + 1)); echo "FAIL $what: exit $?"; tail -5 "$tmp/out" | sed 's/^/    /'; fi
}
expect_grep() {  # expect_grep PATTERN DESCRIPTION: PATTERN in the last step's output
  if grep -q -- "$1" "$tmp/out"; then pass=$((pass + 1)); else
    fail=$((fail + 1)); echo "FAIL $2: '$1' not in output"; head -5 "$tmp/out" | sed 's/^/    /'; fi
}

samples=0
for make in "$root"/samples/wrappers/*/make.py; do
  name="$(basename "$(dirname "$make")")"
  dir="$tmp/$name"
  samples=$((samples + 1))
  step "$name: make.py" -- "$py" "$make" --out "$dir" --seed 1
  step "$name: validate" -- "$amk" validate "$dir/program.json"
  expect_grep "^ok .*: $name (wrapper " "$name validates as a wrapper"
  step "$name: inspect" -- "$amk" --json inspect "$dir/program.json"
  expect_grep '"kind": "wrapper"' "$name inspects as a wrapper"
  step "$name: compile" -- "$amk" compile "$dir/program.json" --trust-source --cache-dir "$tmp/cache"
  expect_grep "Compiling entry function '.*' for 'sm_90a'" "$name compiles for sm_90a"
  expect_grep " 0 bytes spill stores, 0 bytes spill loads" "$name has no spills"
done
# tma_cluster also as a cluster of 2 (make.py --cluster 2).
step "tma_cluster --cluster 2: make.py" -- "$py" "$root/samples/wrappers/tma_cluster/make.py" \
  --out "$tmp/tc2" --seed 2 --cluster 2 --clusters 24
step "tma_cluster --cluster 2: compile" -- "$amk" compile "$tmp/tc2/program.json" --trust-source \
  --cache-dir "$tmp/cache"
[ "$samples" -ge 2 ] && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL found $samples samples, want 2 or more"; }

echo "samples_compile: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
