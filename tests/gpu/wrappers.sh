#!/usr/bin/env bash
# Wrapper programs on the GPU: a good launch (outputs against the saved inputs), a fault that
# leaves the previous outputs intact (exit 7), a spin that ends on the abort word (exit 8), one
# that ignores it (exit 8, launch.hang), each device refusal with its numbers (exit 5), the
# untrusted source (exit 3), profile --events and inspect --attributes; then the samples under
# samples/wrappers against numpy (scripts/check_wrappers.py). Exits 77 (skipped) without a GPU.
set -u
root="$(cd "$(dirname "$0")/../.." && pwd)"
amk="${AMK:?set AMK to the amk binary}"
py="${AMK_PYTHON:-python3}"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
pass=0
fail=0

expect() {  # expect NAME EXIT PATTERN -- command...
  local name="$1" want="$2" pat="$3"
  shift 4
  "$@" >"$tmp/$name.log" 2>&1
  local rc=$?
  if [ "$rc" -eq "$want" ] && grep -q -- "$pat" "$tmp/$name.log"; then pass=$((pass + 1)); else
    fail=$((fail + 1)); echo "FAIL $name: exit $rc (want $want and '$pat')"; head -5 "$tmp/$name.log" | sed 's/^/    /'; fi
}
check() {  # check DESCRIPTION -- command...
  local what="$1"
  shift 2
  if "$@" >"$tmp/check.log" 2>&1; then pass=$((pass + 1)); else
    fail=$((fail + 1)); echo "FAIL $what"; head -5 "$tmp/check.log" | sed 's/^/    /'; fi
}

"$amk" --json devices >"$tmp/devices.json" 2>/dev/null
if ! "$py" -c "import json,sys; sys.exit(0 if json.load(open(sys.argv[1]))['devices'] else 1)" \
  "$tmp/devices.json" 2>/dev/null; then
  echo "skipped: no GPU"
  exit 77
fi
"$py" "$root/tests/gpu/wrappers/make_probe.py" "$tmp/p" "$tmp/devices.json"
P="$tmp/p"

expect untrusted 3 "wrapper.untrusted" -- "$amk" run "$P/ok.json" -o "$tmp/out"
expect ok 0 "ok on cuda" -- "$amk" run "$P/ok.json" --trust-source --save-inputs -o "$tmp/out"
check "y = 2 x and the staging index, every element written" -- "$py" - "$tmp/out" <<'PY'
import json, sys
import numpy as np
d = sys.argv[1]
x, y, s = (np.load(f"{d}/{n}.npy") for n in ("inputs/x", "y", "global_staging"))
assert np.array_equal(y, 2 * x), "y != 2 x"
assert np.array_equal(s, np.arange(s.size, dtype=np.float32)), "staging != index"
r = json.load(open(f"{d}/report.json"))
w = r["extra"]["wrapper"]
assert r["status"] == "ok" and w["launch"] == "cooperative" and w["grid"] == 4, r
assert r["target_fingerprint"].startswith("probe:") and w["device_fingerprint"], r
PY
cp "$tmp/out/y.npy" "$tmp/y_before.npy"
expect fault 7 "launch.fault" -- "$amk" run "$P/fault.json" --trust-source -o "$tmp/out"
check "a fault leaves the previous outputs" -- cmp "$tmp/out/y.npy" "$tmp/y_before.npy"
check "the fault's report beside the folder" -- grep -q '"status": "error"' "$tmp/out.failed-report.json"
expect spin_aborted 8 "abort word" -- "$amk" run "$P/spin.json" --trust-source -o "$tmp/spin_out"
check "the spin wrote no outputs" -- test ! -e "$tmp/spin_out/y.npy"
expect spin_deaf_hang 8 "launch.hang" -- "$amk" run "$P/spin_deaf.json" --trust-source
expect cluster_limit 5 "device.cluster.*cuOccupancyMaxPotentialClusterSize" -- \
  "$amk" run "$P/cluster_limit.json" --trust-source
expect smem_limit 5 "device.smem.*static" -- "$amk" run "$P/smem_limit.json" --trust-source
expect too_wide 5 "device.coresidency" -- "$amk" run "$P/too_wide.json" --trust-source
expect wrong_target 5 "device.target.*sm_count: snapshot" -- \
  "$amk" run "$P/wrong_target.json" --trust-source
expect aot_compile 0 "compiled wrapper probe" -- "$amk" compile "$P/ok.json" --trust-source -o "$tmp/ok.cubin"
expect aot_run 0 "ok on cuda" -- "$amk" run "$P/ok.json" --trust-source --cubin "$tmp/ok.cubin"
expect aot_mismatch 5 "artifact.mismatch" -- "$amk" run "$P/spin.json" --trust-source --cubin "$tmp/ok.cubin"
expect phase_log 0 "staging_download" -- "$amk" -v run "$P/ok.json" --trust-source
check "-v logs every phase" -- grep -q "tma_encode" "$tmp/phase_log.log"
expect profile 0 "median" -- "$amk" profile --events "$P/ok.json" --trust-source --iterations 5
expect attributes 0 "registers/thread" -- "$amk" inspect --attributes "$P/ok.json" --trust-source

check "the samples against numpy" -- "$py" "$root/scripts/check_wrappers.py" --amk "$amk"
cat "$tmp/check.log"

echo "gpu wrappers: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
