#!/usr/bin/env bash
# Compares two amk trees on the GPU, interleaved in one call: this checkout ("new") and another
# source tree ("old", e.g. `git archive COMMIT | tar -x -C DIR`). Builds amk in both (the old one
# under its own build/default without tests; this one's configuration stays as gpu_check.sh
# makes it), writes the 1B and 8B weights once (both trees read the same file), then runs rounds
# in the order new old / old new / old new / new old of `amk --json profile --events` on the 1B
# and 8B steps (ctx 1024) and the micro-benchmarks (GEMV, hop, dispatch). Prints each figure's
# round medians for both trees and new/old, and ptxas's registers and spills of the 1B, 8B and
# GEMV VMs.
#   bash scripts/gate.sh OLD_DIR [ROUNDS]        # ROUNDS: 4 (default) or 2
# Logs and profiles go to $OUT (on the device machine) or ./out/gate.
set -uo pipefail
cd "$(dirname "$0")/.."
old="${1:?usage: scripts/gate.sh OLD_DIR [ROUNDS]}"
rounds="${2:-4}"
[ -d /opt/torch/.venv/bin ] && export PATH="/opt/torch/.venv/bin:$PATH"
res="${OUT:-out/gate}"; mkdir -p "$res"
d="${AMK_SCRATCH:-${TMPDIR:-/tmp}/amk_gate}"; mkdir -p "$d"
t0=$(date +%s); stamp() { echo "== $1 [$(( $(date +%s) - t0 )) s]"; }

stamp "build (both trees at once)"
jobs=$(( $(nproc) / 2 )); [ "$jobs" -ge 1 ] || jobs=1
( cmake --preset default >"$res/cfg_new.log" 2>&1 &&
  cmake --build --preset default -j "$jobs" --target amk >"$res/build_new.log" 2>&1 ) &
( cd "$old" && cmake --preset default -DAMK_TESTS=OFF >"$res/cfg_old.log" 2>&1 &&
  cmake --build --preset default -j "$jobs" --target amk >"$res/build_old.log" 2>&1 ) &
wait
A=$PWD/build/default/amk; B=$(cd "$old" && pwd)/build/default/amk
[ -x "$A" ] || { tail -20 "$res/build_new.log"; exit 1; }
[ -x "$B" ] || { tail -20 "$res/build_old.log"; exit 1; }

stamp "programs"
w1="$d/llama1b.safetensors"; w8="$d/llama8b.safetensors"
[ -e "$w1" ] || "$A" -q gen llama --preset llama-3.2-1b --context 1024 --write-weights "$w1" -o "$d/w1.json"
[ -e "$w8" ] || "$A" -q gen llama --preset llama-3.1-8b --context 1024 --write-weights "$w8" -o "$d/w8.json"
for tr in new old; do
  X=$A; [ $tr = old ] && X=$B
  "$X" -q gen llama --preset llama-3.2-1b --context 1024 --weights "$w1" -o "$d/${tr}_1b.json"
  "$X" -q gen llama --preset llama-3.1-8b --context 1024 --weights "$w8" -o "$d/${tr}_8b.json"
  python3 "$([ $tr = old ] && echo "$old" || echo .)/scripts/bench_programs.py" "$d/bench_$tr" >/dev/null
done
for tr in new old; do
  X=$A; [ $tr = old ] && X=$B
  for p in "$d/${tr}_1b.json" "$d/${tr}_8b.json" "$d/bench_$tr/gemv_8x4096x4096.json"; do
    echo "-- $tr $(basename "$p"): $("$X" compile "$p" 2>&1 | grep -E "registers|spill" | tr -s ' ' | tr '\n' ' ')"
  done
done | tee "$res/ptxas.txt"

# prof TREE NAME PROGRAM WARMUP ITERATIONS ROUND
prof() {
  local X=$A; [ "$1" = old ] && X=$B
  timeout -k 10 180 "$X" --json profile "$3" --events --warmup "$4" --iterations "$5" \
    >"$res/g_$1_$2_$6.json" 2>"$res/g_$1_$2_$6.err"
}
for r in $(seq 1 "$rounds"); do
  case $r in 1|4) order="new old" ;; *) order="old new" ;; esac
  for tr in $order; do
    prof $tr 1b "$d/${tr}_1b.json" 3 20 $r
    prof $tr 8b "$d/${tr}_8b.json" 3 20 $r
    for f in gemv_0 gemv_8x4096x4096 gemv_1x4096x4096 hop_500 hop_2500 dispatch_1000 dispatch_3000; do
      prof $tr $f "$d/bench_$tr/$f.json" 5 30 $r
    done
  done
  stamp "round $r"
done

python3 - "$res" "$rounds" <<'PY'
import json, statistics, sys
res, rounds = sys.argv[1], int(sys.argv[2])
def med(tr, f, r):
    try:
        return json.load(open(f"{res}/g_{tr}_{f}_{r}.json"))["median_ms"]
    except Exception:
        return None
def figures(tr):
    v = {}
    for r in range(1, rounds + 1):
        g = lambda f: med(tr, f, r)
        def put(k, x):
            v.setdefault(k, []).append(x)
        if g("1b"): put("Llama-3.2-1B step, ms", g("1b"))
        if g("8b"): put("Llama-3.1-8B step, ms", g("8b"))
        if g("gemv_8x4096x4096") and g("gemv_0"):
            put("GEMV 8x4096^2 in program, TB/s", 8 * 4096 * 4096 * 2 / 1e9 / (g("gemv_8x4096x4096") - g("gemv_0")))
        if g("gemv_1x4096x4096"): put("GEMV 4096^2 a launch, us", g("gemv_1x4096x4096") * 1e3)
        if g("hop_500") and g("hop_2500"): put("dependent hop, ns", (g("hop_2500") - g("hop_500")) * 1e6 / 2000)
        if g("dispatch_1000") and g("dispatch_3000"): put("dispatch, ns", (g("dispatch_3000") - g("dispatch_1000")) * 1e6 / 2000)
    return v
new, old = figures("new"), figures("old")
print(f"{'figure':34s} {'new (rounds)':32s} {'old (rounds)':32s} new/old")
for k in sorted(set(new) | set(old)):
    n, o = new.get(k, []), old.get(k, [])
    ratio = f"{statistics.median(n) / statistics.median(o):.4f}" if n and o else "-"
    print(f"{k:34s} {'/'.join(f'{x:.4g}' for x in n):32s} {'/'.join(f'{x:.4g}' for x in o):32s} {ratio}")
PY
stamp done
