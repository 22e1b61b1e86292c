#!/usr/bin/env bash
# Focused device run for the VM loop: builds amk + the gpu runtime test, measures dispatch and
# dependent hop (BENCH.md), runs the gpu runtime test, every sample with --check, the hang
# program, and (when BASELINE_DIR holds the previous kernels/ and time is left) the same
# benchmarks on the baseline VM in the same run. Prints a short table last.
#   bash scripts/bench_vm.sh            (logs under $OUT, or ./out/bench_vm)
set -uo pipefail
cd "$(dirname "$0")/.."
t_begin=$(date +%s)
[ -d /opt/torch/.venv/bin ] && export PATH="/opt/torch/.venv/bin:$PATH"
out="${OUT:-out/bench_vm}"
mkdir -p "$out"
amk=build/default/amk
export AMK_CACHE_DIR="$out/cache"
rows=()
row() { rows+=("$(printf '%-46s %s' "$1" "$2")"); echo ">> $1: $2"; }
summary() { echo; echo "================ summary ================"; printf '%s\n' "${rows[@]}"; }
trap summary EXIT

echo "== build"
cmake --preset default >"$out/configure.log" 2>&1 || { tail -30 "$out/configure.log"; exit 1; }
cmake --build --preset default -j16 --target amk amk_gpu_test_gpu_runtime >"$out/build.log" 2>&1 ||
  { grep -E "error|FAILED" "$out/build.log" | head -30; exit 1; }
row "build" "$(( $(date +%s) - t_begin )) s"

python3 scripts/bench_programs.py "$out/bench"
# bench TAG: dispatch and hop with the amk binary as built now
bench() {
  local tag="$1"
  for f in dispatch_1000 dispatch_3000 hop_500 hop_2500; do
    $amk --json profile "$out/bench/$f.json" --events --warmup 5 --iterations 30 \
      >"$out/bench/$f.$tag.json" 2>"$out/bench/$f.$tag.err" || { tail -3 "$out/bench/$f.$tag.err"; echo '{}' >"$out/bench/$f.$tag.json"; }
  done
  grep -hE "registers|spill|stack" "$out/bench/"*."$tag".err 2>/dev/null | sort -u | head -3
  python3 - "$out/bench" "$tag" <<'PY'
import json, sys, os
d, tag = sys.argv[1], sys.argv[2]
def st(f):
    try:
        j = json.load(open(os.path.join(d, f"{f}.{tag}.json")))
        return j["median_ms"], j.get("min_ms"), j.get("max_ms")
    except Exception:
        return None, None, None
d1, d3, h1, h2 = (st(f) for f in ("dispatch_1000", "dispatch_3000", "hop_500", "hop_2500"))
if d1[0] and d3[0]:
    print(f"ROW dispatch [{tag}] (<= 40 ns)|{(d3[0] - d1[0]) * 1e6 / 2000:.1f} ns  (medians {d1[0]:.4f} / {d3[0]:.4f} ms; min {d1[1]} / {d3[1]})")
if h1[0] and h2[0]:
    print(f"ROW hop [{tag}] (<= 450 ns)|{(h2[0] - h1[0]) * 1e6 / 2000:.1f} ns  (medians {h1[0]:.4f} / {h2[0]:.4f} ms; min {h1[1]} / {h2[1]})")
PY
}
bench_rows() { while IFS='|' read -r k v; do row "${k#ROW }" "$v"; done < <(bench "$1" | tee /dev/stderr | grep '^ROW'); }

echo "== benchmarks (new VM)"
bench_rows new
$amk compile "$out/bench/hop_500.json" --arch sm_90a --no-cache 2>&1 | grep -iE "registers|spill|stack" | head -2
$amk compile samples/mlp_block.json --arch sm_90a --no-cache 2>&1 | grep -iE "registers|spill|stack" | head -2

echo "== gpu runtime test"
timeout 120 build/default/tests/amk_gpu_test_gpu_runtime >"$out/gpu_test.log" 2>&1
rc=$?; tail -4 "$out/gpu_test.log"; row "amk_gpu_test_gpu_runtime" "$([ $rc = 0 ] && echo pass || echo "FAIL (exit $rc)")"

echo "== samples --check"
for s in samples/*.json; do
  n=$(basename "$s" .json)
  timeout 60 $amk run "$s" --backend cuda --check -o "$out/samples/$n" >"$out/run_$n.log" 2>&1
  rc=$?; row "sample $n --check" "$([ $rc = 0 ] && echo pass || echo "FAIL (exit $rc)")"
  [ $rc = 0 ] || tail -5 "$out/run_$n.log"
done

echo "== hang"
P=tests/gpu/programs
$amk -q compile --trust-custom-ops $P/hang.json --arch sm_90a >/dev/null 2>&1
t0=$(date +%s%N)
timeout 30 $amk run $P/hang.json --backend cuda --trust-custom-ops -o "$out/hang_out" --report "$out/hang_report.json" >"$out/hang.log" 2>&1
rc=$?; ms=$(( ($(date +%s%N) - t0) / 1000000 ))
if [ $rc = 8 ] && grep -q victim "$out/hang.log"; then row hang "pass (exit 8, victim, ${ms} ms wall)"; else row hang "FAIL (exit $rc, ${ms} ms)"; head -5 "$out/hang.log"; fi
python3 - "$out/hang_report.json" <<'PY' || true
import json, sys
r = json.load(open(sys.argv[1])); d = r.get("diagnostics") or {}
print(f"ROW hang launch|{r['timings_ms'].get('launch')} ms; block {d.get('block')} pos {d.get('queue_position')} {d.get('instruction_name')} have {d.get('have')} need {d.get('need')}")
PY
[ -e "$out/hang_out/b.npy" ] && row "hang wrote no outputs" FAIL || row "hang wrote no outputs" pass

# The baseline VM, side by side, when its kernels are given and time is left.
if [ -n "${BASELINE_DIR:-}" ] && [ -d "$BASELINE_DIR" ] && [ $(( $(date +%s) - t_begin )) -lt "${BASELINE_BEFORE_S:-150}" ]; then
  echo "== baseline VM"
  mkdir -p "$out/kernels_new" && cp kernels/* "$out/kernels_new/"
  cp "$BASELINE_DIR"/* kernels/
  if cmake --build --preset default -j16 --target amk >"$out/build_base.log" 2>&1; then
    bench_rows base
  else row "baseline build" FAIL; fi
  cp "$out/kernels_new/"* kernels/
fi
# Variants of the VM: VARIANTS="name=FILE:sed-expression@@..." (FILE in kernels/) applied to kernels/amk_vm.cuh or
# kernels/amk_sync.cuh (file chosen by FILE:), rebuilt and benchmarked while time is left.
if [ -n "${VARIANTS:-}" ]; then
  mkdir -p "$out/kernels_keep" && cp kernels/* "$out/kernels_keep/"
  mapfile -t vs < <(printf %s "$VARIANTS" | sed "s/@@/\n/g")
  for v in "${vs[@]}"; do
    [ $(( $(date +%s) - t_begin )) -lt "${VARIANT_BEFORE_S:-170}" ] || break
    name="${v%%=*}"; rest="${v#*=}"; file="${rest%%:*}"; expr="${rest#*:}"
    echo "== variant $name ($file: $expr)"
    cp "$out/kernels_keep/"* kernels/
    sed -i "$expr" "kernels/$file"
    if cmake --build --preset default -j16 --target amk >"$out/build_$name.log" 2>&1; then bench_rows "$name"; else row "variant $name build" FAIL; fi
  done
  cp "$out/kernels_keep/"* kernels/
fi
if [ "${NCU:-0}" = 1 ] && command -v ncu >/dev/null && [ $(( $(date +%s) - t_begin )) -lt 190 ]; then
  cmake --build --preset default -j16 --target amk >/dev/null 2>&1
  timeout 40 ncu --clock-control none --section WarpStateStats --section SchedulerStats --section InstructionStats \
    -k regex:amk_vm --launch-count 1 $amk run "$out/bench/dispatch_3000.json" --backend cuda >"$out/ncu_dispatch.txt" 2>&1
  grep -E "Stall|Warp Cycles|Issued|Eligible|Executed Ipc|Duration" "$out/ncu_dispatch.txt" | head -24
fi
row "total wall" "$(( $(date +%s) - t_begin )) s"
