#!/usr/bin/env bash
# The device run: builds amk, runs the unit and gpu test tiers, every sample and test program on
# the GPU against the CPU backend (poisoned outputs, fresh seeds), the VM's tunable fields set
# the other way, the refusal / hang / fault programs, the decode steps against numpy and the CPU
# backend, and the benchmarks; prints a short table last and exits 1 if any row failed.
#   bash scripts/gpu_check.sh                 # everything (~10 minutes on the H200)
#   AMK_BENCH=0 bash scripts/gpu_check.sh     # the checks only
#   AMK_CHECKS=0 bash scripts/gpu_check.sh    # the benchmarks only
# AMK_DECODE=0 leaves out the decode steps (1B, 8B, PyTorch), AMK_TORCH=0 the PyTorch baseline,
# AMK_PROGRAMS=0 the samples, test programs and refusals, AMK_GENERATE=0 the generation rows,
# AMK_HF=0 the generation checks against transformers,
# AMK_CTEST=0 the ctest tiers (and builds amk alone),
# AMK_CHECK_SEED=N reruns the op-level checks on a given seed. Logs go to ./out/gpu_check; on the
# device machine ($OUT set) the logs stay in the scratch folder and $OUT gets summary.txt,
# results.json (the figures, scripts/perf_baseline.json's format) and logs.tar.gz.
set -uo pipefail
cd "$(dirname "$0")/.."
[ -d /opt/torch/.venv/bin ] && export PATH="/opt/torch/.venv/bin:$PATH"
py=python3
# NCCL (gpu.test_nccl, amk devices): the Python environment's nvidia-nccl wheel unless named.
if [ -z "${AMK_NCCL_LIBRARY:-}" ]; then
  lib=$($py -c "import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], 'lib', 'libnccl.so.2'))" 2>/dev/null)
  [ -n "$lib" ] && [ -e "$lib" ] && export AMK_NCCL_LIBRARY="$lib"
fi
amk=$PWD/build/default/amk
scratch="${AMK_SCRATCH:-${TMPDIR:-/tmp}/amk_gpu_check}"
mkdir -p "$scratch"
if [ -n "${OUT:-}" ]; then out="$scratch/logs"; rm -rf "$out"; else out=out/gpu_check; fi
mkdir -p "$out"
export AMK_CACHE_DIR="$scratch/cache"
rows=()
failed=0
figures="$out/figures.tsv"; : > "$figures"
pack() {
  [ -n "${OUT:-}" ] || return 0
  printf '%s\n' "${rows[@]}" > "$OUT/summary.txt"
  $py scripts/perf_compare.py scripts/perf_baseline.json --measured "$figures" \
    --device "$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)" \
    --commit "$(git rev-parse --short HEAD 2>/dev/null || echo unknown)" > "$OUT/results.json" 2>/dev/null || true
  tar -czf "$OUT/logs.tar.gz" -C "$out" . 2>/dev/null
}
trap pack EXIT
trap 'exit 143' TERM INT  # (a timed-out run still packs what it has)
t_start=$(date +%s)
sec() { pack; echo "== $1 [$(( $(date +%s) - t_start )) s]"; }
# A row whose value starts with FAIL or unavailable counts as a failure.
row() {
  rows+=("$(printf '%-52s %s' "$1" "$2")"); echo ">> $1: $2"
  case "$2" in FAIL*|unavailable*) failed=$((failed + 1)) ;; esac
}
verdict() { [ "$1" = 0 ] && echo pass || echo "FAIL (exit $1)"; }
check_seed="${AMK_CHECK_SEED:-$(( (RANDOM << 15) | RANDOM ))}"

sec "build"
# The Python module is built for the python that has torch (tests/python/test_gpu.py: gpu.python).
pyargs=()
if pb=$($py -m pybind11 --cmakedir 2>/dev/null); then
  pyargs=(-DPython3_EXECUTABLE="$(command -v $py)" -Dpybind11_DIR="$pb")
fi
cmake --preset default "${pyargs[@]}" >"$out/configure.log" 2>&1 || { tail -30 "$out/configure.log"; exit 1; }
targets=()
if [ "${AMK_CTEST:-1}" != 1 ]; then
  targets=(--target amk); grep -q "amk_python" build/default/build.ninja && targets+=(amk_python)
fi
cmake --build --preset default -j "$(nproc)" "${targets[@]}" >"$out/build.log" 2>&1 ||
  { grep -E "error|FAILED" "$out/build.log" | head -30; exit 1; }
$amk devices
row "check seed (--reseed of the op-level checks)" "$check_seed"
P=tests/gpu/programs

# checked NAME PROGRAM [amk run options]: one --check row (killed after 300 s: exit 124 or 137,
# so that one stuck launch costs its row, not the call).
checked() {
  local name="$1" prog="$2"; shift 2
  timeout -k 10 300 $amk run "$prog" --backend cuda --check --reseed "$check_seed" "$@" >"$out/run_$name.log" 2>&1
  local rc=$?; row "$name --check" "$(verdict $rc)"; [ $rc = 0 ] || tail -4 "$out/run_$name.log"
}

if [ "${AMK_CHECKS:-1}" = 1 ]; then
if [ "${AMK_CTEST:-1}" = 1 ]; then
sec "ctest (unit, gpu)"
ctest --test-dir build/default --output-on-failure -j 8 -L "^(unit|gpu)\$" >"$out/ctest.log" 2>&1
rc=$?; tail -5 "$out/ctest.log"; row "ctest (unit, gpu)" "$(verdict $rc)"
# A crash of the Python module's tests: their native stack, from a debugger where there is one.
if grep -Eq "python\.module .*(SEGFAULT|Child aborted|Exception)" "$out/ctest.log"; then
  dbg=$(command -v gdb || command -v cuda-gdb || ls /usr/local/cuda/bin/cuda-gdb 2>/dev/null | head -1)
  if [ -n "$dbg" ]; then
    AMK=$amk PYTHONPATH="$PWD/build/default/python" timeout -k 10 300 "$dbg" -q -batch -ex run \
      -ex "thread apply all bt 40" --args "$(command -v $py)" -X faulthandler -m pytest -x -q \
      -p no:cacheprovider tests/python/test_module.py >"$out/python_module_bt.log" 2>&1
    grep -m1 -A40 "received signal" "$out/python_module_bt.log"
  else
    echo "python.module crashed; no gdb or cuda-gdb for its native stack"
  fi
fi
fi

if [ "${AMK_PROGRAMS:-1}" = 1 ]; then
sec "samples and test programs on the GPU (--check against the CPU backend)"
programs="rope_kv tma_gemv cluster gemv_fused gemv_waits gemv_shapes attention_rope attention_tiled
          attention_tiled_wide small_ops attention_combine_staged attention_oproj attention_one_head"
# The VM's tunable fields set the other way from the chooser (amk compile --explain lists them):
# FIELDS|PROGRAMS, each --check'ed with --vm FIELDS.
tuned=(
  "attn_tile=small|attention_rope attention_tiled_wide"
  "attn_tile=wide|attention_tiled attention_one_head"
  "attn_pass=true|attention_tiled attention_oproj"
  "gemv_preload=2|gemv_waits gemv_fused gemv_shapes"
  "gemv_preload=0|gemv_waits tma_gemv"
  "smem_buffers=false|gemv_waits attention_rope small_ops"
  "smem_buffers=true|gemv_fused tma_gemv"
  "gemv_ring_stages=0|gemv_shapes attention_oproj attention_combine_staged"
  "gemv_ring_stages=3|gemv_shapes attention_oproj"
  "gemv_ring_stages=4,gemv_preload=4|gemv_shapes"
  "attn_split=true|attention_tiled attention_rope attention_combine_staged"
  "attn_split=false|attention_tiled_wide attention_one_head"
  "attn_row8=false|attention_one_head attention_oproj"
  "attn_row8=true|attention_tiled attention_rope"
  "attn_tile_dynamic=false|attention_oproj"
  "attn_split_heads=4|attention_oproj"
  "stage_decode_ins=false|attention_oproj attention_one_head attention_combine_staged"
  "next_ins_l1=false|gemv_waits attention_rope small_ops"
  "gemv_x_batch=true|gemv_waits attention_oproj"
  "gemv_x_batch=false|small_ops"
  "prefetch_ahead=0|gemv_fused tma_gemv"
)
# Compile every VM first, one NVRTC process a core (the runs below find them in the cache).
{ for f in samples/*.json; do echo "$f|"; done
  for f in $programs; do echo "$P/$f.json|"; done
  for e in "${tuned[@]}"; do for f in ${e#*|}; do echo "$P/$f.json|${e%%|*}"; done; done; } |
  xargs -P "$(nproc)" -I{} bash -c 'p="${1%%|*}" vm="${1#*|}"
    "$0" -q compile "$p" ${vm:+--vm "$vm"} >/dev/null 2>&1' "$amk" {}
for s in samples/*.json; do checked "sample $(basename "$s" .json)" "$s"; done
$py scripts/check_samples.py --amk "$amk" --backend cuda >"$out/numpy.log" 2>&1
rc=$?; row "samples vs numpy (cuda)" "$(verdict $rc)"
for f in $programs; do checked "$f" "$P/$f.json"; done
checked "attention_rope, 3 passes in a launch" "$P/attention_rope.json" --passes 3
for bt in 128 512; do  # the attention and combine paths at other register budgets
  sed "s/\"block\": 256/\"block\": $bt/" "$P/attention_rope.json" > "$out/attention_rope_$bt.json"
  checked "attention_rope at $bt threads" "$out/attention_rope_$bt.json"
done
for e in "${tuned[@]}"; do
  vm="${e%%|*}"
  for f in ${e#*|}; do checked "$f, --vm $vm," "$P/$f.json" --vm "$vm"; done
done

sec "refusals, hang, fault"
# expect NAME EXIT PATTERN -- command
expect() {
  local name="$1" want="$2" pat="$3"; shift 4
  "$@" >"$out/$name.log" 2>&1; local rc=$?
  if [ "$rc" = "$want" ] && grep -q -- "$pat" "$out/$name.log"; then row "$name" "pass (exit $rc)"; else
    row "$name" "FAIL (exit $rc, want $want and '$pat')"; head -5 "$out/$name.log"; fi
}
expect coresidency_refused 5 "device.coresidency" -- $amk run $P/too_wide.json --backend cuda
expect newer_arch_refused 5 "device.target" -- $amk run $P/future_arch.json --backend cuda
expect device_memory_refused 5 "device.memory. at /buffers: the program's buffers need 204800 MiB" -- $amk run $P/too_big_for_device.json --backend cuda
$amk -q compile --trust-custom-ops $P/hang.json >/dev/null 2>&1
expect hang_caught 8 "victim" -- $amk run $P/hang.json --backend cuda --trust-custom-ops -o "$out/hang_out"
[ -e "$out/hang_out/b.npy" ] && row "hang wrote no outputs" FAIL || row "hang wrote no outputs" pass
grep -q '"status": "timeout"' "$out/hang_out.failed-report.json" 2>/dev/null &&
  row "hang's report beside the folder" pass || row "hang's report beside the folder" FAIL
# Ctrl-C once the launch waits (amk -v names the phase): the abort flag stops it at once,
# run.interrupted (exit 8), well before its 60 s deadline.
$amk -v run $P/hang.json --backend cuda --trust-custom-ops --timeout 60000 -o "$out/int_out" \
  >"$out/interrupt.log" 2>&1 &
pid=$!; t0=$(date +%s)
for _ in $(seq 200); do grep -q "launch" "$out/interrupt.log" && break; sleep 0.1; done
sleep 1; kill -INT $pid; wait $pid; rc=$?; secs=$(( $(date +%s) - t0 ))
if [ $rc = 8 ] && grep -q "run.interrupted" "$out/interrupt.log"; then  # (the watchdog: run.timeout)
  row "Ctrl-C stops a waiting launch" "pass (exit 8, ${secs} s)"
else
  row "Ctrl-C stops a waiting launch" "FAIL (exit $rc, ${secs} s)"; tail -3 "$out/interrupt.log"
fi
$amk -q compile --trust-custom-ops $P/hang_gemv.json >/dev/null 2>&1
expect hang_gemv_preload_caught 8 "victim" -- $amk run $P/hang_gemv.json --backend cuda --trust-custom-ops -o "$out/hang_gemv_out"
[ -e "$out/hang_gemv_out/y.npy" ] && row "hang_gemv wrote no outputs" FAIL || row "hang_gemv wrote no outputs" pass
# The streaming pass left out of a VM whose chunks need it: they stop the launch (bad_operand).
expect pass_out_refused 7 "run.bad_operand" -- $amk run $P/attention_tiled.json --backend cuda --vm attn_tile=small,attn_pass=false
arms16=$(printf 'default;%.0s' $(seq 15))default
expect arms_memory_refused 5 "device.memory" -- $amk profile $P/big_buffers.json --events --tuning-arms "$arms16"
expect fault_reported 7 "launch.fault" -- $amk run $P/fault.json --backend cuda --trust-custom-ops -o "$out/fault_out"
expect after_fault_ok 0 "ok on cuda" -- $amk run samples/diamond.json --backend cuda --check --reseed "$check_seed"
fi  # AMK_PROGRAMS

if [ "${AMK_DECODE:-1}" = 1 ]; then
sec "decode steps: tiny vs numpy, 1B vs the CPU backend"
for lay in "" "--unfused" "--rope-ops" "--combine steps --context 40 --layers 3" \
           "--combine-heads 2 --context 40" "--mlp-act bf16" "--context 320 --attn-chunks 40"; do
  $py scripts/check_llama.py --amk $amk --backend cuda $lay >"$out/check_llama.log" 2>&1
  rc=$?; row "llama tiny ${lay:-default} vs numpy" "$(verdict $rc)"; [ $rc = 0 ] || tail -3 "$out/check_llama.log"
done
$py scripts/check_llama.py --amk $amk --backend cuda --vm gemv_ring_stages=0,attn_row8=false >"$out/check_llama.log" 2>&1
rc=$?; row "llama tiny, --vm gemv_ring_stages=0,attn_row8=false, vs numpy" "$(verdict $rc)"
d="$scratch/decode"; mkdir -p "$d"
$amk -q gen llama --preset llama-3.2-1b --context 1024 --write-weights "$d/llama1b.safetensors" -o "$d/llama1b.json"
checked "llama-3.2-1b ctx 1024" "$d/llama1b.json" -o "$d/out1b"
$amk -q gen llama --preset llama-3.2-1b --context 1024 --combine steps --weights "$d/llama1b.safetensors" -o "$d/llama1b_steps.json"
checked "llama-3.2-1b --combine steps" "$d/llama1b_steps.json"
fi

if [ "${AMK_GENERATE:-1}" = 1 ]; then
sec "generation in one launch: tiny vs numpy and the CPU backend, 1B and 8B vs transformers"
# (the last two: the kv-head layout with combine steps, and one query head a chunk over 300 rows)
long_prompt=$(awk 'BEGIN { for (i = 0; i < 300; i++) printf "%s%d", (i ? "," : ""), (i * 31 + 7) % 512 }')
for g in "--steps 16 --prompt 3,5,7,9" "--steps 6 --layers 3 --attn-chunks 2 --prompt 1,2,3,4,5,6,7,8,9,10,11,12" \
         "--steps 4 --attn-chunks 3 --combine steps --prompt 1,2,3,4,5,6,7,8,9,10,11" \
         "--steps 3 --attn-chunks 1 --combine oproj --prompt $long_prompt"; do
  $py scripts/check_llama.py --amk $amk --backend cuda --seed "$((check_seed % 1000))" $g >"$out/check_gen.log" 2>&1
  rc=$?; row "generation tiny ${g:0:60} vs numpy" "$(verdict $rc)"; [ $rc = 0 ] || tail -3 "$out/check_gen.log"
done
$amk -q gen llama --steps 24 --prompt 5,6,7,8 --all-logits -o "$out/gen_tiny.json"
checked "generation tiny 4 + 24" "$out/gen_tiny.json"
checked "stepped_decode (3 passes)" "$P/stepped_decode.json"
# An end-of-sequence id ends the launch on the device: the eos is the CPU run's seventh new id;
# the GPU's ids and passes must be the CPU's, and --check compares every output.
$amk -q gen llama --steps 24 --prompt 5,6,7,8 --all-logits -o "$out/gen_eos.json"
$amk --json generate "$out/gen_eos.json" --backend cpu > "$out/gen_eos_cpu_all.json" 2>&1
eos=$($py -c "import json,sys; print(json.load(open(sys.argv[1]))['ids'][6])" "$out/gen_eos_cpu_all.json")
for b in cpu cuda; do
  $amk --json generate "$out/gen_eos.json" --backend $b --eos "$eos" > "$out/gen_eos_$b.json" 2>&1
done
if $py - "$out/gen_eos_cpu.json" "$out/gen_eos_cuda.json" "$eos" <<'PY'; then
import json, sys
c, g = (json.load(open(f)) for f in sys.argv[1:3])
eos = int(sys.argv[3])
assert c["ids"] and c["ids"][-1] == eos and eos not in c["ids"][:-1], c["ids"]
assert c["steps"] < 27, c["steps"]
assert (g["ids"], g["steps"]) == (c["ids"], c["steps"]), (g["ids"], g["steps"], c["steps"])
PY
  row "generation tiny --eos ends the launch (cuda = cpu)" pass
else
  row "generation tiny --eos ends the launch (cuda = cpu)" FAIL
fi
$amk -q gen llama --steps 24 --prompt 5,6,7,8 --all-logits --eos "$eos" -o "$out/gen_eos_in.json"
$amk run "$out/gen_eos_in.json" --backend cuda --check -o "$out/gen_eos_run" >"$out/run_gen_eos.log" 2>&1
rc=$?; row "generation tiny 4 + 24 ending at its eos --check" "$(verdict $rc)"
[ $rc = 0 ] || tail -4 "$out/run_gen_eos.log"
# The 8B reference runs in float32 (float64 would need 64 GB beside amk's).
for m in llama-3.2-1b llama-3.1-8b; do
  for kv in f32 bf16; do
    [ "${AMK_HF:-1}" = 1 ] || continue
    [ "$m" = llama-3.1-8b ] && [ "${AMK_DECODE:-1}" != 1 ] && continue
    PYTHONUNBUFFERED=1 timeout 400 $py scripts/check_generate_hf.py --amk $amk --preset $m \
      --prompt-len 32 --steps 128 --seed "$check_seed" --work "$scratch/gen_$m" --kv-dtype $kv \
      $([ $m = llama-3.1-8b ] && echo --dtype float32) >"$out/gen_hf_$m.$kv.log" 2>&1
    rc=$?; row "generation $m 32 + 128, $kv KV, vs transformers" "$(verdict $rc)"
    tail -6 "$out/gen_hf_$m.$kv.log"
    rm -rf "$scratch/gen_$m"
  done
done
fi
fi  # AMK_CHECKS

if [ "${AMK_BENCH:-1}" = 1 ]; then
sec "benchmarks: dispatch, hop, GEMV"
$py scripts/bench_programs.py "$out/bench"
prof() { timeout -k 10 120 $amk --json profile "$1" --events --warmup 5 --iterations 30 "${@:3}" > "$2" 2>"$2.err" || echo '{}' > "$2"; }
for f in dispatch_1000 dispatch_3000 hop_500 hop_2500 gemv_0 gemv_8x4096x4096 gemv_1x4096x4096; do
  prof "$out/bench/$f.json" "$out/bench/$f.warm.json"
done
for f in gemv_0 gemv_8x4096x4096 gemv_1x4096x4096; do prof "$out/bench/$f.json" "$out/bench/$f.cold.json" --cold; done
$py - "$out/bench" "$figures" <<'PY' > "$out/bench_rows.txt"
import json, os, sys
d, figures = sys.argv[1], sys.argv[2]
def med(name, mode="warm"):
    try: return json.load(open(os.path.join(d, f"{name}.{mode}.json")))["median_ms"]
    except Exception: return None
fig = open(figures, "a")
d1, d3, h1, h2 = med("dispatch_1000"), med("dispatch_3000"), med("hop_500"), med("hop_2500")
if d1 and d3:
    ns = (d3 - d1) * 1e6 / 2000
    print(f"dispatch, independent instruction|{ns:.1f} ns"); fig.write(f"dispatch\t{ns:.1f}\tns\n")
if h1 and h2:
    ns = (h2 - h1) * 1e6 / 2000
    print(f"dependent hop between blocks|{ns:.1f} ns"); fig.write(f"dependent_hop\t{ns:.1f}\tns\n")
for name, mats in (("gemv_8x4096x4096", 8), ("gemv_1x4096x4096", 1)):
    gb = mats * 4096 * 4096 * 2 / 1e9
    for mode in ("warm", "cold"):
        ms, ms0 = med(name, mode), med("gemv_0", mode)
        if ms is None or ms0 is None: print(f"{name} {mode}|unavailable"); continue
        print(f"{name} {mode}|{ms * 1e3:.1f} us a launch, {(ms - ms0) * 1e3:.1f} us = "
              f"{gb / (ms - ms0):.2f} TB/s inside the program")
        if mats == 8 and mode == "warm":
            fig.write(f"gemv_bf16_8x4096sq_in_program\t{gb / (ms - ms0):.3f}\tTB/s\n")
        if mats == 1 and mode == "warm":
            fig.write(f"gemv_bf16_4096sq_per_launch\t{ms * 1e3:.2f}\tus\n")
PY
while IFS='|' read -r k v; do row "$k" "$v"; done < "$out/bench_rows.txt"

if [ "${AMK_DECODE:-1}" = 1 ]; then
sec "benchmarks: decode steps"
d="$scratch/decode"; mkdir -p "$d"
[ -e "$d/llama1b.json" ] || $amk -q gen llama --preset llama-3.2-1b --context 1024 --write-weights "$d/llama1b.safetensors" -o "$d/llama1b.json"
$amk -q gen llama --preset llama-3.1-8b --context 1024 -o "$d/llama8b.json"
for r in 1 2; do
  for f in llama1b llama8b; do
    $amk --json profile "$d/$f.json" --events --warmup 3 --iterations 20 > "$d/prof_$f.$r.json" 2>"$out/prof_$f.err"
  done
done
$amk --json bench "$d/llama1b.json" --cold > "$d/bench1b.json" 2>"$out/bench1b.err"
$amk profile "$d/llama1b.json" --trace "$d/trace1b.json" > "$out/trace1b.txt" 2>&1
$py scripts/trace_phases.py "$d/trace1b.json" --chain=q_proj,attn,o_proj,gate_up_proj,down_proj > "$out/phases1b.txt" 2>&1
$py - "$d" "$figures" <<'PY' > "$out/decode_rows.txt"
import json, os, sys
d, figures = sys.argv[1], sys.argv[2]
fig = open(figures, "a")
for f, label, fid in (("llama1b", "Llama-3.2-1B step ctx 1024", "llama1b_step_ctx1024"),
                      ("llama8b", "Llama-3.1-8B step ctx 1024", "llama8b_step_ctx1024")):
    try:
        ms = [json.load(open(os.path.join(d, f"prof_{f}.{r}.json")))["median_ms"] for r in (1, 2)]
        print(f"{label}, amk profile --events|medians " + " / ".join(f"{m:.4f}" for m in ms) + " ms")
        if fid == "llama8b_step_ctx1024": fig.write(f"{fid}\t{min(ms):.4f}\tms\n")
        else: open(os.path.join(d, "llama1b_ms"), "w").write(f"{min(ms):.4f}")
    except Exception as e:
        print(f"{label}|unavailable ({e})")
try:
    j = json.load(open(os.path.join(d, "bench1b.json")))
    for a in j["arms"]:
        print(f"1B amk bench --cold, {a['name']}|median {a['median_ms']:.4f} ms, spread {100 * a['rel_spread']:.1f}%")
    fig.write(f"llama1b_step_ctx1024_cold\t{j['arms'][0]['median_ms']:.4f}\tms\t{j['arms'][2]['median_ms']:.4f}\n")
except Exception as e:
    print(f"1B bench|unavailable ({e})")
PY
while IFS='|' read -r k v; do row "$k" "$v"; done < "$out/decode_rows.txt"
# amk run end to end, kernel cache warm and the weights in the page cache (after the runs above).
for r in 1 2 3; do
  $amk --json run "$d/llama1b.json" -o "$d/run1b" > "$d/run1b.$r.json" 2>>"$out/run1b.err"
done
$py - "$d" <<'PY' > "$out/run_rows.txt"
import json, os, statistics, sys
try:
    t = [json.load(open(os.path.join(sys.argv[1], f"run1b.{r}.json")))["timings_ms"] for r in (1, 2, 3)]
    tot = [x["total"] for x in t]
    mid = t[tot.index(statistics.median(tot))]
    phases = ", ".join(f"{k} {v:.0f}" for k, v in mid.items() if k != "total" and v >= 1)
    print("1B amk run, warm cache, end to end|total " + " / ".join(f"{v:.0f}" for v in tot) + f" ms ({phases})")
except Exception as e:
    print(f"1B amk run|unavailable ({e})")
PY
while IFS='|' read -r k v; do row "$k" "$v"; done < "$out/run_rows.txt"
tail -3 "$out/phases1b.txt"
if [ "${AMK_TORCH:-1}" = 1 ]; then
  tok=$($py -c "import numpy; print(int(numpy.load('$d/run1b/next_token.npy').ravel()[0]))" 2>/dev/null)
  PYTHONUNBUFFERED=1 timeout 300 $py scripts/torch_baseline.py --weights "$d/llama1b.safetensors" --samples 50 ${tok:+--amk-token $tok} >"$d/torch.json" 2>"$out/torch.err"
  rc=$?
  row "PyTorch baseline (same weights), next token = amk's" "$([ $rc = 0 ] && [ -n "$tok" ] && echo "pass (token $tok)" || echo "FAIL (exit $rc${tok:-, no token from amk})")"
  $py - "$d/torch.json" "$figures" <<'PY' > "$out/torch_rows.txt"
import json, os, sys
try:
    text = open(sys.argv[1]).read()
    j, _ = json.JSONDecoder().raw_decode(text[text.index("{"):])
    for k, v in j.items():
        if isinstance(v, dict) and "median_ms" in v:
            print(f"1B decode, PyTorch {k}|median {v['median_ms']:.4f} ms")
            if "graph" in k:  # the 1B step's baseline, same weights, same machine
                amk_ms = open(os.path.join(os.path.dirname(sys.argv[1]), "llama1b_ms")).read()
                open(sys.argv[2], "a").write(f"llama1b_step_ctx1024\t{amk_ms}\tms\t{v['median_ms']:.4f}\n")
except Exception as e:
    print(f"PyTorch rows|unavailable ({e})")
PY
  while IFS='|' read -r k v; do row "$k" "$v"; done < "$out/torch_rows.txt"
fi
# The Python module's launch beside the C++ API's, and a 4 KB input changed before each 1B step.
if [ -d build/default/python ]; then
  PYTHONPATH="$PWD/build/default/python" timeout -k 10 300 $py scripts/bench_python.py \
    --small samples/diamond.json --step "$d/llama1b.json" --input model.norm.weight \
    --figures "$out/python_figures.tsv" >"$out/bench_python.txt" 2>&1
  rc=$?
  while IFS= read -r line; do row "${line%%: *}" "${line#*: }"; done < <(grep ": " "$out/bench_python.txt")
  [ $rc = 0 ] || row "bench_python.py" "FAIL (exit $rc)"
fi
fi
if [ "${AMK_GENERATE:-1}" = 1 ]; then
sec "benchmarks: generation in one launch"
d="$scratch/decode"; mkdir -p "$d"
[ -e "$d/llama1b.safetensors" ] || $amk -q gen llama --preset llama-3.2-1b --context 1024 --write-weights "$d/llama1b.safetensors" -o "$d/llama1b.json"
gen_bench() {  # gen_bench NAME -- bench_generate.py arguments
  local name="$1"; shift 2
  $py scripts/bench_generate.py --amk $amk --out "$d/$name" "$@" >"$out/bench_$name.txt" 2>&1
  local rc=$?
  while IFS= read -r line; do row "${line%%: *}" "${line#*: }"; done < <(grep ": " "$out/bench_$name.txt")
  [ $rc = 0 ] || row "bench $name" "FAIL (exit $rc)"
}
gen_bench gen1b -- --preset llama-3.2-1b --weights "$d/llama1b.safetensors" --sweep
[ "${AMK_DECODE:-1}" = 1 ] && gen_bench gen8b -- --preset llama-3.1-8b
# The baselines on the same 1B weights: PyTorch + CUDA graph (one step a replay, the prompt fed
# token by token as amk does) and transformers generate() (batched prefill), new tokens/s.
if [ "${AMK_TORCH:-1}" = 1 ]; then
  for n in 32 960; do
    timeout 300 $py scripts/torch_generate.py --weights "$d/llama1b.safetensors" --prompt-len $n \
      --steps 128 --samples 3 --out "$out/torch_generate_1b_$n.json" >/dev/null 2>"$out/torch_generate_1b_$n.log"
    rc=$?
    if [ $rc = 0 ]; then
      row "1B $n + 128 baselines (new tokens/s)" "$(tail -1 "$out/torch_generate_1b_$n.log")"
    else
      row "1B $n + 128 baselines" "FAIL (exit $rc)"; tail -3 "$out/torch_generate_1b_$n.log"
    fi
  done
fi
fi
fi  # AMK_BENCH

echo; echo "================ summary ================"; printf '%s\n' "${rows[@]}"
[ "$failed" = 0 ] || { echo "gpu_check: $failed row(s) failed"; exit 1; }
