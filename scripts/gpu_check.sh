#!/usr/bin/env bash
# The device run: builds amk, runs the unit and gpu test tiers (AMK_NVRTC_TIER=1: the nvrtc tier
# too), every sample on the GPU against the CPU backend and numpy, the tuned checks, the refusal /
# hang / fault programs, and the runtime benchmarks; prints a short table last. Logs go to
# ./out/gpu_check; on the device machine ($OUT set, of which at most 8 files come back) they are
# kept in the scratch folder and $OUT gets three files at the end: summary.txt (the table),
# phases1b.txt (the 1B step's phase table) and logs.tar.gz (every log and result file).
#   bash scripts/gpu_check.sh
# The whole run takes ~10 minutes on the H200, about the device tool's limit for one command, so
# it runs in three calls: AMK_DECODE=0 (build, test tiers, checks, benchmarks; 191 s in the
# eighteenth session), AMK_BASE=0 AMK_8B=0 AMK_LAYOUTS=0 (the tiny and 1B decode checks, the 1B
# timings and traces, PyTorch; ~240 s in the seventeenth) and AMK_BASE=0 AMK_1B=0 (the 1B step's
# other layouts against the CPU backend, then the 8B rows; 127 s in the seventeenth). The 1B
# checks' logs (run1b.log, run_llama1b_*.log: phase timings) come back in logs.tar.gz. A call the
# device stops still returns what was packed so far (each section packs on entry; TERM packs
# too). Each section's start prints the seconds elapsed. In the decode section, $AMK_ARMS_1B /
# $AMK_ARMS_8B replace the tuning arms timed beside the default, $AMK_ROUNDS_1B the 1B step's
# rounds (2), AMK_TORCH=0 leaves the PyTorch baseline out and AMK_DIAG=0 the diagnostics (the
# attention chunk programs, the traces with early marks, the gemv loop in SASS).
set -uo pipefail
cd "$(dirname "$0")/.."
[ -d /opt/torch/.venv/bin ] && export PATH="/opt/torch/.venv/bin:$PATH"
py=python3
amk=build/default/amk
# Kernel cache, generated programs, weights and traces: outside $OUT, which comes back from the
# device (only logs and small results belong there).
scratch="${AMK_SCRATCH:-${TMPDIR:-/tmp}/amk_gpu_check}"
mkdir -p "$scratch"
if [ -n "${OUT:-}" ]; then out="$scratch/logs"; rm -rf "$out"; else out=out/gpu_check; fi
mkdir -p "$out"
# What comes back from the device: three files, rewritten at every section and at the end.
pack() {
  [ -n "${OUT:-}" ] || return 0
  printf '%s\n' "${rows[@]}" > "$OUT/summary.txt"
  [ -e "$out/phases1b.txt" ] && cp "$out/phases1b.txt" "$OUT/"
  tar -czf "$OUT/logs.tar.gz" -C "$out" . 2>/dev/null
}
rows=()
trap pack EXIT
trap 'exit 143' TERM INT  # (so that a timed-out run still packs what it has)
export AMK_CACHE_DIR="$scratch/cache"
t_start=$(date +%s)
sec() { pack; echo "== $1 [$(( $(date +%s) - t_start )) s]"; }  # (packs what is done so far)
# A row whose value starts with FAIL or unavailable counts as a failure: the script then exits 1
# after the summary.
failed=0
row() {
  rows+=("$(printf '%-44s %s' "$1" "$2")"); echo ">> $1: $2"
  case "$2" in FAIL*|unavailable*) failed=$((failed + 1)) ;; esac
}
summary() {
  echo; echo "================ summary ================"; printf '%s\n' "${rows[@]}"
  [ "$failed" = 0 ] || { echo "gpu_check: $failed row(s) failed"; exit 1; }
  exit 0
}
# The seed every op-level `amk run --check` below draws its random inputs from (--reseed): fresh
# each call unless AMK_CHECK_SEED gives one (printed in the summary, to rerun a failure).
check_seed="${AMK_CHECK_SEED:-$(( (RANDOM << 15) | RANDOM ))}"
# precompile TUNING PROGRAM...: queue each program's VM under $AMK_VM_TUNING=TUNING ("" for the
# default); precompile_run compiles the queue into the kernel cache, one NVRTC process a core,
# so that the runs that follow (one after another) find their kernels there.
pc_jobs=()
precompile() { local tn="$1" f; shift; for f in "$@"; do pc_jobs+=("$tn|$f"); done; }
precompile_run() {
  local t0=$(date +%s)
  printf '%s\n' "${pc_jobs[@]}" | xargs -P "$(nproc)" -I{} bash -c \
    'AMK_VM_TUNING="${1%%|*}" "$0" -q compile --trust-custom-ops "${1#*|}" >/dev/null 2>&1' "$amk" {}
  echo "precompiled ${#pc_jobs[@]} kernels in $(( $(date +%s) - t0 )) s"
  pc_jobs=()
}
# arm_groups KIND PROGRAM SIZE ROUNDS ARM...: `amk profile --events --tuning-arms` of PROGRAM's
# default beside the arms, SIZE arms a process (amk takes at most 16 arms, and every arm holds
# its own copy of the program's buffers), and a row per arm (KIND 1b or 8b: the rows' wording).
# A failed group's row carries amk's own error. With no arms, the default is timed alone (twice).
arm_groups() {
  local kind="$1" prog="$2" size="$3" rounds="$4" g group; shift 4
  local others=(); for a in "$@"; do [ "$a" = default ] || others+=("$a"); done
  for ((g = 0; g == 0 || g < ${#others[@]}; g += size)); do
    group="default$([ ${#others[@]} = 0 ] && echo ';default' || printf ';%s' "${others[@]:g:size}")"
    $amk --json profile "$prog" --events --warmup 3 --iterations 20 --rounds "$rounds" --tuning-arms "$group" > "$scratch/arms_${kind}_$g.json" 2>"$out/arms_${kind}_$g.err"; tail -3 "$out/arms_${kind}_$g.err"
    $py - "$scratch/arms_${kind}_$g.json" "$g" "$kind" <<'PY' > "$scratch/arm_rows.txt"
import json, sys
path, group, kind = sys.argv[1], sys.argv[2], sys.argv[3]
def why():
    try:
        e = json.load(open(path))["error"]
        return f"{e.get('code')} at {e.get('where')}: {e.get('message')}"
    except Exception:
        return "no error report"
try:
    seen_default = False
    for a in json.load(open(path))["arms"]:
        default = a["name"] == "default"
        if default and (group != "0" or seen_default):
            continue  # (each group's own default: only its ratios below use it)
        seen_default = seen_default or default
        rounds = " / ".join(f"{m:.4f}" for m in a["round_medians_ms"])
        ratio = "" if default else f", {a['ratio_to_first']:.3f}x" + ("" if group == "0" else " its group's default")
        if kind == "1b":
            label = "fused layer (default)" if default else f"default, {a['name']}"
            print(f"1B decode ({label}), amk profile --events|median {rounds} ms{ratio}")
        else:
            label = "" if default else f", {a['name']}"
            print(f"8B decode ctx 1024, megakernel{label} (roofline 3.36 ms; target within 12%)|median "
                  f"{a['median_ms']:.3f} ms (rounds {rounds}), spread {100 * a['rel_spread']:.1f}%{ratio}")
except Exception as e:  # (amk's own error, when it gave one: which arm, and why)
    print(f"{kind.upper()} profile --tuning-arms group {group}|unavailable ({e}): {why()}")
PY
    while IFS='|' read -r k v; do row "$k" "$v"; done < "$scratch/arm_rows.txt"
  done
}

sec "build"
cmake --preset default >"$out/configure.log" 2>&1 || { tail -30 "$out/configure.log"; exit 1; }
targets=(); [ "${AMK_SWEEP_ONLY:-0}" = 1 ] || [ "${AMK_BASE:-1}" = 0 ] && targets=(--target amk)
cmake --build --preset default -j "$(nproc)" "${targets[@]}" >"$out/build.log" 2>&1 || { grep -E "error|FAILED" "$out/build.log" | head -30; exit 1; }
$amk devices
row "check seed (--reseed of the op-level checks)" "$check_seed"

# AMK_SWEEP="TUNING;TUNING;..." (each an $AMK_VM_TUNING value, "default" for none): the GEMV,
# dispatch, hop and Llama-1B benchmarks once per VM tuning, side by side; AMK_SWEEP_ONLY=1 stops
# after it.
if [ -n "${AMK_SWEEP:-}" ]; then
  sec "VM tuning sweep"
  sw="$scratch/sweep"; mkdir -p "$sw" "$out/sweep"
  $py scripts/bench_programs.py "$sw"
  t0=$(date +%s)
  $amk -q gen llama --preset llama-3.2-1b --context 1024 --write-weights "$sw/llama1b.safetensors" -o "$sw/llama1b.json" || row "gen 1B" FAIL
  [ -n "${AMK_SWEEP_GEN_ARGS:-}" ] && { $amk -q gen llama --preset llama-3.2-1b --context 1024 --weights "$sw/llama1b.safetensors" $AMK_SWEEP_GEN_ARGS -o "$sw/llama1b_alt.json" || row "gen 1B alt" FAIL; }
  echo "gen 1B: $(( $(date +%s) - t0 )) s"
  IFS=';' read -r -a tunings <<< "$AMK_SWEEP"
  for tn in "${tunings[@]}"; do
    tag=$(echo "$tn" | tr -c 'A-Za-z0-9\n' '_')
    [ "$tn" = default ] && tv="" || tv="$tn"
    progs="gemv_8x4096x4096 gemv_1x4096x4096 dispatch_1000 dispatch_3000 hop_500 hop_2500"
    for f in $progs; do
      AMK_VM_TUNING="$tv" $amk --json profile "$sw/$f.json" --events --warmup 5 --iterations 30 > "$sw/$f.$tag.json" 2>"$sw/$f.$tag.err" || { tail -2 "$sw/$f.$tag.err"; echo '{}' > "$sw/$f.$tag.json"; }
    done
    for f in llama1b llama1b_alt; do
      [ -e "$sw/$f.json" ] || continue
      AMK_VM_TUNING="$tv" $amk --json profile "$sw/$f.json" --events --warmup 3 --iterations 20 > "$sw/$f.$tag.json" 2>"$sw/$f.$tag.err" || { tail -2 "$sw/$f.$tag.err"; echo '{}' > "$sw/$f.$tag.json"; }
    done
    if [ "${AMK_SWEEP_TRACE:-0}" = 1 ]; then
      for f in llama1b llama1b_alt; do
        [ -e "$sw/$f.json" ] || continue
        echo "-- trace $f [$tag]"
        AMK_VM_TUNING="$tv" $amk profile "$sw/$f.json" --trace "$sw/trace.$f.$tag.json" > "$out/sweep/trace.$f.$tag.txt" 2>&1
        grep -E "^traced|blocks:" "$out/sweep/trace.$f.$tag.txt"
        $py scripts/trace_phases.py "$sw/trace.$f.$tag.json" > "$out/sweep/phases.$f.$tag.txt" 2>&1
        tail -1 "$out/sweep/phases.$f.$tag.txt"
      done
    fi
    $py - "$sw" "$tag" <<'PY' > "$sw/rows.$tag.txt"
import json, os, sys
d, tag = sys.argv[1], sys.argv[2]
def med(f):
    try: return json.load(open(os.path.join(d, f"{f}.{tag}.json")))["median_ms"]
    except Exception: return None
g8, g1 = med("gemv_8x4096x4096"), med("gemv_1x4096x4096")
d1, d3, h1, h2 = med("dispatch_1000"), med("dispatch_3000"), med("hop_500"), med("hop_2500")
b1, b2 = med("llama1b"), med("llama1b_alt")
parts = []
if g8: parts.append(f"gemv8 {8 * 4096 * 4096 * 2 / 1e9 / g8:.2f} TB/s")
if g1: parts.append(f"gemv1 {g1 * 1e3:.1f} us")
if d1 and d3: parts.append(f"dispatch {(d3 - d1) * 1e6 / 2000:.1f} ns")
if h1 and h2: parts.append(f"hop {(h2 - h1) * 1e6 / 2000:.0f} ns")
if b1: parts.append(f"1B {b1:.4f} ms")
if b2: parts.append(f"1B-alt {b2:.4f} ms")
print(f"sweep {tag}|" + ", ".join(parts))
PY
    cp "$sw/rows.$tag.txt" "$out/sweep/"
    while IFS='|' read -r k v; do row "$k" "$v"; done < "$sw/rows.$tag.txt"
  done
  if [ "${AMK_SWEEP_ONLY:-0}" = 1 ]; then
    summary
  fi
fi

if [ "${AMK_BASE:-1}" = 1 ]; then
# The unit and gpu tiers (the cli scripts are in the unit tier); the nvrtc tier needs no GPU and
# CI runs it with the same toolkit (~2 of this call's ~8.5 minutes): AMK_NVRTC_TIER=1 adds it.
tiers="unit|gpu"; [ "${AMK_NVRTC_TIER:-0}" = 1 ] && tiers="unit|gpu|nvrtc"
sec "ctest ($tiers)"
ctest --test-dir build/default --output-on-failure -j 8 -L "^($tiers)\$" >"$out/ctest.log" 2>&1
rc=$?; tail -15 "$out/ctest.log"; row "ctest ($tiers)" "$([ $rc = 0 ] && echo pass || echo FAIL)"

sec "samples on the GPU (--check against the CPU backend, then numpy)"
for s in samples/*.json; do
  $amk run "$s" --backend cuda --check --reseed "$check_seed" -o "$out/samples/$(basename "$s" .json)" >"$out/run_$(basename "$s" .json).log" 2>&1
  rc=$?; row "sample $(basename "$s" .json) --check" "$([ $rc = 0 ] && echo pass || echo "FAIL (exit $rc)")"
  [ $rc = 0 ] || tail -5 "$out/run_$(basename "$s" .json).log"
done
$py scripts/check_samples.py --amk $amk --backend cuda >"$out/numpy.log" 2>&1
rc=$?; tail -3 "$out/numpy.log"; row "samples vs numpy (cuda)" "$([ $rc = 0 ] && echo pass || echo FAIL)"

# The tuned checks below: TUNING|TAG|PROGRAMS (tests/gpu/programs) each --check'ed against the
# CPU backend, then the tiny step against numpy, with $AMK_VM_TUNING=TUNING (check_tuned).
tuned=(
  # attention_decode's streaming pass with the tiled path off (AMK_ATTN_TILED=0): the chunks the
  # tiled path takes by default, checked on the pass too.
  "AMK_ATTN_TILED=0|pass|attention_rope attention_tiled"
  # The wide tiled attention (K+V up to 32 KiB, group x head_dim up to 512: the 8B step's
  # chunks), which the generated source turns on when a chunk needs it (attention_tiled_wide,
  # attention_rope), turned off for those (their chunks then take the pass) and forced on for the
  # others.
  "AMK_ATTN_TILED_WIDE=0|narrow|attention_tiled_wide attention_rope"
  "AMK_ATTN_TILED_WIDE=1|wide|attention_tiled"
  # attention_combine's batch of chunks a lane loads at once (16 at 256 threads; 4 unrolls a
  # quarter of the code; the 40-chunk tiny step below covers its rounds).
  "AMK_COMBINE_BATCH=4|combine4|attention_rope"
  # The gemv preload (by default a gemv whose weights no instruction writes requests its first
  # weight batches, one through the ring and two in registers, then waits inside the op;
  # gemv_waits.json has every gemv form behind a wait): the default rows run it; here two
  # batches (AMK_GEMV_PRELOAD=2, the ring's default before the twenty-third session) and none (0).
  "AMK_GEMV_PRELOAD=2|preload2|gemv_waits gemv_fused gemv_stream"
  "AMK_GEMV_PRELOAD=0|preload0|gemv_waits tma_gemv gemv_splitk"
  # A program whose steps wait holds the buffer table in shared memory by default; programs with
  # waits with the global table (AMK_SMEM_BUFFERS=0), and ones without waits with the shared one.
  "AMK_SMEM_BUFFERS=0|globaltable|gemv_waits attention_rope small_ops"
  "AMK_SMEM_BUFFERS=1|smemtable|gemv_fused tma_gemv"
  # gemv's weights through the shared-memory ring (2 stages by default where a gemv preloads):
  # in registers instead, 3 stages, the ring forced onto programs without waits, and with 4
  # batches requested before the wait; attention's new-token reads as three round trips.
  "AMK_GEMV_SMEM_STAGES=0|ring0|gemv_waits gemv_fused gemv_t"
  "AMK_GEMV_SMEM_STAGES=3|ring3|gemv_waits gemv_fused gemv_stream gemv_splitk gemv_t small_ops"
  "AMK_GEMV_SMEM_STAGES=4,AMK_GEMV_PRELOAD=4|ring4|gemv_waits"
  "AMK_ATTN_ONE_TRIP=0|onetrip0|attention_rope attention_tiled attention_tiled_wide"
  # The tiled attention's split score and output stages (by default on with the wide tile only)
  # forced on for the narrow tile's programs and off for the wide one's; its K/V through
  # 16-byte cp.async copies instead of two bulk copies (AMK_ATTN_BULK=0).
  "AMK_ATTN_SPLIT=1|split|attention_tiled attention_rope attention_combine_staged attention_arrive"
  "AMK_ATTN_SPLIT=0|nosplit|attention_tiled_wide attention_rope"
  "AMK_ATTN_BULK=0|bulk0|attention_tiled attention_tiled_wide attention_rope"
  # A step's signals released by warp 0 (AMK_SIGNAL_WARP=0; warp 1 by default since the
  # twenty-fifth session): the programs whose steps wait and signal. A preloading gemv's waits
  # polled only after its first batches are issued (AMK_EARLY_POLL=0; an early first poll by
  # default since the twenty-fifth session): the programs whose gemvs wait.
  "AMK_SIGNAL_WARP=0|signal0|gemv_waits attention_rope attention_arrive attention_combine_staged small_ops"
  "AMK_EARLY_POLL=0|earlypoll0|gemv_waits gemv_fused gemv_t small_ops attention_rope"
  # The next step's instruction not prefetched into L1 after a wait (AMK_NEXT_INS_L1=0; on by
  # default since the twenty-sixth session where gemvs wait and preload): programs whose steps wait.
  "AMK_NEXT_INS_L1=0|nextins0|gemv_waits attention_rope attention_arrive attention_combine_staged small_ops"
  # The unfused gemv's x loads each before its own multiply-adds (AMK_GEMV_X_BATCH=0; a batch's
  # together by default since the twenty-seventh session where gemvs wait and preload); the
  # merging gemv's programs through registers and with the large tile static.
  "AMK_GEMV_X_BATCH=0|xbatch0|gemv_waits small_ops"
  # attention_oproj's gemvs (the 1B layout, where both are off since the thirty-first session)
  # with the early first poll and the batched x loads.
  "AMK_EARLY_POLL=1,AMK_GEMV_X_BATCH=1|oprojearly|attention_oproj"
  "AMK_GEMV_SMEM_STAGES=0|oprojring0|attention_oproj"
  "AMK_ATTN_TILE_DYNAMIC=0,AMK_ATTN_SPLIT_HEADS=4|oprojstatic|attention_oproj"
  # Its attention chunks copying K/V before their waits (the default from the twenty-eighth
  # session to the thirtieth; the row8off row below has it with the split stages) and the merge's
  # 4-byte loads (the default before the twenty-eighth).
  "AMK_ATTN_PRELOAD=1,AMK_GEMV_COMBINE_LD8=0|oprojold|attention_oproj"
  # Its attention ops' instruction read from global memory after the VM's wait (codegen stages
  # it where a waiting chunk's wait is the VM's: the default again since the thirty-first
  # session, with the stages of eight lanes a row).
  "AMK_STAGE_DECODE_INS=0|oprojunstaged|attention_oproj attention_one_head"
  # gemv's ring without its loop for rows of whole batches (AMK_GEMV_WHOLE=0; on where the ring
  # is in since the twenty-ninth session, with the wide attention tile too since the thirtieth).
  "AMK_GEMV_WHOLE=0|whole0|gemv_waits attention_oproj small_ops"
  # Through the ring (as the decode steps' gemvs), the norm-fused gemv's x and norm read a quad
  # a pass, the ring's rest after the staging (AMK_GEMV_STAGE_ONE_TRIP=0; one round trip by
  # default since the thirtieth session, where the ring is in; the ring3 row above has it on).
  "AMK_GEMV_SMEM_STAGES=2,AMK_GEMV_STAGE_ONE_TRIP=0|stagetrip0|gemv_waits gemv_fused gemv_stream"
  # The tiled attention's stages with eight lanes a row (AMK_ATTN_ROW8; set by the generated
  # source where every chunk has one query head since the thirty-first session) off for those
  # programs, and forced on for the mixed ones (their one-head chunks of head_dim 64 and 128 take
  # them on the small tile, with and without the instruction staged, ONE_TRIP off too).
  "AMK_ATTN_ROW8=0|row8off|attention_one_head attention_oproj"
  "AMK_ATTN_ROW8=1|row8|attention_tiled attention_rope attention_tiled_wide"
  "AMK_ATTN_ROW8=1,AMK_ATTN_ONE_TRIP=0|row8trip0|attention_tiled attention_rope attention_one_head"
  # The residual's L1 prefetch (off by default since the eighteenth session).
  "AMK_GEMV_RES_PREFETCH=1|resprefetch|gemv_waits gemv_fused gemv_stream"
)
base_programs="rope_kv tma_gemv cluster gemv_fused gemv_waits attention_rope attention_tiled attention_tiled_wide gemv_stream small_ops gemv_splitk gemv_t attention_combine_splitk attention_arrive attention_combine_staged attention_oproj attention_one_head"
gv=AMK_GEMV_PINGPONG=1,AMK_GEMV_CLAMPED_LOADS=0
for bt in 128 512; do
  sed "s/\"block\": 256/\"block\": $bt/" tests/gpu/programs/attention_rope.json > "$out/attention_rope_$bt.json"
  precompile "" "$out/attention_rope_$bt.json"
done
for f in $base_programs; do precompile "" tests/gpu/programs/$f.json; done
for e in "${tuned[@]}"; do
  IFS='|' read -r tn tag progs <<< "$e"
  for f in $progs; do precompile "$tn" tests/gpu/programs/$f.json; done
done
for tn in AMK_STREAM_SLOTS=8 AMK_STREAM_SLOTS=4,AMK_STREAM_WARPS=4; do precompile "$tn" tests/gpu/programs/gemv_stream.json; done
for f in gemv_fused gemv_stream tma_gemv; do precompile "$gv" tests/gpu/programs/$f.json; done
precompile_run

sec "TMA gemv, cluster launch, fused gemv, fused RoPE attention, small ops (--check against the CPU backend)"
for f in $base_programs; do
  $amk run tests/gpu/programs/$f.json --backend cuda --check --reseed "$check_seed" >"$out/run_$f.log" 2>&1
  rc=$?; row "$f --check" "$([ $rc = 0 ] && echo pass || echo "FAIL (exit $rc)")"
  [ $rc = 0 ] || tail -5 "$out/run_$f.log"
done
# The arrival groups over three passes in one launch (each pass one round of every counter).
$amk run tests/gpu/programs/attention_arrive.json --backend cuda --iterations 3 --check --reseed "$check_seed" >"$out/run_attention_arrive_3.log" 2>&1
rc=$?; row "attention_arrive --iterations 3 --check" "$([ $rc = 0 ] && echo pass || echo "FAIL (exit $rc)")"
[ $rc = 0 ] || tail -5 "$out/run_attention_arrive_3.log"
# attention_rope at 128 and 512 threads a block: the attention and combine paths compiled for
# other register budgets (the programs above all use 256).
for bt in 128 512; do
  $amk run "$out/attention_rope_$bt.json" --backend cuda --check --reseed "$check_seed" >"$out/run_attention_rope_$bt.log" 2>&1
  rc=$?; row "attention_rope at $bt threads --check" "$([ $rc = 0 ] && echo pass || echo "FAIL (exit $rc)")"
  [ $rc = 0 ] || tail -5 "$out/run_attention_rope_$bt.log"
done
# check_tuned TUNING TAG PROGRAM...: the programs (tests/gpu/programs) --check against the CPU
# backend, then the tiny step against numpy, with $AMK_VM_TUNING=TUNING.
check_tuned() {
  local tn="$1" tag="$2" f rc; shift 2
  for f in "$@"; do
    AMK_VM_TUNING=$tn $amk run tests/gpu/programs/$f.json --backend cuda --check --reseed "$check_seed" >"$out/run_${f}_$tag.log" 2>&1
    rc=$?; row "$f, $tn, --check" "$([ $rc = 0 ] && echo pass || echo "FAIL (exit $rc)")"
    [ $rc = 0 ] || tail -5 "$out/run_${f}_$tag.log"
  done
  AMK_VM_TUNING=$tn $py scripts/check_llama.py --amk $amk --backend cuda >"$out/check_llama_$tag.log" 2>&1
  rc=$?; row "llama tiny, $tn, vs numpy" "$([ $rc = 0 ] && echo pass || echo FAIL)"
  [ $rc = 0 ] || tail -3 "$out/check_llama_$tag.log"
}
for e in "${tuned[@]}"; do
  IFS='|' read -r tn tag progs <<< "$e"
  check_tuned "$tn" "$tag" $progs
done
# attention_combine's batch of chunks a lane loads at once (AMK_COMBINE_BATCH: 16 at 256 threads;
# 4 unrolls a quarter of the code): the tiny step with 40 chunks a kv head (a round of 32 and a
# partial one, partial batches) both ways, and attention_rope at 4.
for tn in "" AMK_COMBINE_BATCH=4; do
  AMK_VM_TUNING=$tn $py scripts/check_llama.py --amk $amk --backend cuda --context 320 --attn-chunks 40 >"$out/check_llama_chunks40.log" 2>&1
  rc=$?; row "llama tiny, 40 chunks a kv head, ${tn:-default}, vs numpy" "$([ $rc = 0 ] && echo pass || echo FAIL)"
  [ $rc = 0 ] || tail -3 "$out/check_llama_chunks40.log"
done
# The weight streams are off by default (measured slower on the Llama step); their path stays
# checked, with the ring on (8 slots fit beside gemv_stream's 64 KiB of x; a ring that does not fit
# is turned off with a warning, which fails the row) and with one slot per consumer warp.
for tn in AMK_STREAM_SLOTS=8 AMK_STREAM_SLOTS=4,AMK_STREAM_WARPS=4; do
  AMK_VM_TUNING=$tn $amk run tests/gpu/programs/gemv_stream.json --backend cuda --check --reseed "$check_seed" >"$out/run_gemv_stream_on.log" 2>&1
  rc=$?; grep -q "weight streams off" "$out/run_gemv_stream_on.log" && rc=off
  row "gemv_stream, $tn, --check" "$([ $rc = 0 ] && echo pass || echo "FAIL (exit $rc)")"
  [ $rc = 0 ] || tail -5 "$out/run_gemv_stream_on.log"
done
AMK_VM_TUNING=AMK_STREAM_SLOTS=8 $py scripts/check_llama.py --amk $amk --backend cuda >"$out/check_llama_streams.log" 2>&1
rc=$?; row "llama tiny, weight streams on, vs numpy" "$([ $rc = 0 ] && echo pass || echo FAIL)"
[ $rc = 0 ] || tail -3 "$out/check_llama_streams.log"
# The gemv batch-loop variants off by default (AMK_GEMV_PINGPONG=1, AMK_GEMV_CLAMPED_LOADS=0, $gv):
# checked like the default path, so a sweep times only correct code.
for f in gemv_fused gemv_stream tma_gemv; do
  AMK_VM_TUNING=$gv $amk run tests/gpu/programs/$f.json --backend cuda --check --reseed "$check_seed" >"$out/run_${f}_gv.log" 2>&1
  rc=$?; row "$f, $gv, --check" "$([ $rc = 0 ] && echo pass || echo "FAIL (exit $rc)")"
  [ $rc = 0 ] || tail -5 "$out/run_${f}_gv.log"
done
for lay in "" --unfused; do
  AMK_VM_TUNING=$gv $py scripts/check_llama.py --amk $amk --backend cuda $lay >"$out/check_llama_gv.log" 2>&1
  rc=$?; row "llama tiny ${lay:-default}, $gv, vs numpy" "$([ $rc = 0 ] && echo pass || echo FAIL)"
  [ $rc = 0 ] || tail -3 "$out/check_llama_gv.log"
done
$amk inspect --attributes samples/mlp_block.json 2>&1 | tail -4
$amk inspect --attributes tests/gpu/programs/cluster.json 2>&1 | tail -3

sec "refusals, hang, fault"
expect() {  # expect NAME EXIT PATTERN -- command
  local name="$1" want="$2" pat="$3"; shift 4
  local t0=$(date +%s%N)
  "$@" >"$out/$name.log" 2>&1; local rc=$?
  local ms=$(( ($(date +%s%N) - t0) / 1000000 ))
  if [ "$rc" = "$want" ] && grep -q -- "$pat" "$out/$name.log"; then row "$name" "pass (exit $rc, ${ms} ms)"; else
    row "$name" "FAIL (exit $rc, want $want and '$pat')"; head -5 "$out/$name.log"; fi
}
P=tests/gpu/programs
expect coresidency_refused 5 "device.coresidency" -- $amk run $P/too_wide.json --backend cuda
expect newer_arch_refused 5 "device.target" -- $amk run $P/future_arch.json --backend cuda
$amk -q compile --trust-custom-ops $P/hang.json --arch sm_90a >/dev/null 2>&1  # compile outside the timed run
expect hang_caught 8 "victim" -- $amk run $P/hang.json --backend cuda --trust-custom-ops -o "$out/hang_out" --report "$out/hang_report.json"
$py - "$out/hang_report.json" <<'PY' && row "hang: launch time vs 300 ms deadline" "$(cat "$out/hang_ms")"
import json, sys
r = json.load(open(sys.argv[1]))
t = r["timings_ms"].get("launch")
d = r.get("diagnostics") or {}
open(sys.argv[1].replace("hang_report.json", "hang_ms"), "w").write(
    f"{t} ms; block {d.get('block')} pos {d.get('queue_position')} {d.get('instruction_name')} have {d.get('have')} need {d.get('need')}")
PY
[ -e "$out/hang_out/b.npy" ] && row "hang wrote no outputs" FAIL || row "hang wrote no outputs" pass
# The same hang with weight copies in flight in the stopped block's ring (amk_stream_drain).
env AMK_VM_TUNING=AMK_STREAM_SLOTS=4 $amk -q compile --trust-custom-ops $P/hang_stream.json --arch sm_90a >/dev/null 2>&1
expect hang_with_streams_caught 8 "victim" -- env AMK_VM_TUNING=AMK_STREAM_SLOTS=4 $amk run $P/hang_stream.json --backend cuda --trust-custom-ops -o "$out/hang_stream_out"
grep -q "weight streams off" "$out/hang_with_streams_caught.log" && row "hang_with_streams: ring on" FAIL
[ -e "$out/hang_stream_out/y.npy" ] && row "hang_with_streams wrote no outputs" FAIL || row "hang_with_streams wrote no outputs" pass
# The same hang with a gemv as the victim that waits inside the op, its first weights in flight
# (the default gemv preload).
$amk -q compile --trust-custom-ops $P/hang_gemv.json --arch sm_90a >/dev/null 2>&1
expect hang_gemv_preload_caught 8 "victim" -- $amk run $P/hang_gemv.json --backend cuda --trust-custom-ops -o "$out/hang_gemv_out"
[ -e "$out/hang_gemv_out/y.npy" ] && row "hang_gemv wrote no outputs" FAIL || row "hang_gemv wrote no outputs" pass
# attention's streaming pass forced out (AMK_ATTN_PASS=0) of a VM whose chunks need it: the
# chunks that reach it stop the launch with bad_operand (exit 7) instead of computing nothing.
expect pass_out_refused 7 "run.bad_operand" -- env AMK_VM_TUNING=AMK_ATTN_PASS=0 $amk run $P/attention_tiled.json --backend cuda -o "$out/pass_out"
# 16 tuning arms of a program with 8 GiB of buffers (16 copies, 128 GiB): refused after the first
# arm (device.memory, exit 5), not an allocation failure halfway.
arms16=$(printf 'default;%.0s' $(seq 15))default
expect arms_memory_refused 5 "device.memory" -- $amk profile $P/big_buffers.json --events --tuning-arms "$arms16"
expect fault_reported 7 "launch.fault" -- $amk run $P/fault.json --backend cuda --trust-custom-ops -o "$out/fault_out"
expect after_fault_ok 0 "ok on cuda" -- $amk run samples/diamond.json --backend cuda --check --reseed "$check_seed"

sec "benchmarks"
$py scripts/bench_programs.py "$out/bench"
prof() { $amk --json profile "$1" --events --warmup 5 --iterations 30 > "$2" 2>"$2.err" || { cat "$2.err"; echo '{}' > "$2"; }; }
for f in dispatch_1000 dispatch_3000 hop_500 hop_2500; do prof "$out/bench/$f.json" "$out/bench/$f.out.json"; done
cold="$scratch/cache_cold"; rm -rf "$cold"
AMK_CACHE_DIR="$cold" $amk --json profile samples/mlp_block.json --events --iterations 10 > "$out/setup_cold.json" 2>/dev/null
AMK_CACHE_DIR="$cold" $amk --json profile samples/mlp_block.json --events --iterations 10 > "$out/setup_cached.json" 2>/dev/null
t0=$(date +%s%N); AMK_CACHE_DIR="$cold" $amk -q run samples/mlp_block.json --backend cuda; cli_ms=$(( ($(date +%s%N) - t0) / 1000000 ))
$py - "$out" "$cli_ms" <<'PY' > "$out/bench_rows.txt"
import json, sys, os
out, cli_ms = sys.argv[1], sys.argv[2]
def med(f):
    try: return json.load(open(os.path.join(out, "bench", f + ".out.json")))["median_ms"]
    except Exception: return None
d1, d3, h1, h2 = med("dispatch_1000"), med("dispatch_3000"), med("hop_500"), med("hop_2500")
if d1 and d3: print(f"dispatch, independent instruction (<= 40 ns)|{(d3 - d1) * 1e6 / 2000:.1f} ns  (medians {d1:.4f} / {d3:.4f} ms)")
if h1 and h2: print(f"dependent hop between blocks (<= 450 ns)|{(h2 - h1) * 1e6 / 2000:.1f} ns  (medians {h1:.4f} / {h2:.4f} ms)")
for name in ("cold", "cached"):
    try:
        j = json.load(open(os.path.join(out, f"setup_{name}.json")))
        s = j["setup_timings_ms"]
        print(f"setup {name} (cache_hit={j['cache_hit']})|" + ", ".join(f"{k} {v:.1f}" for k, v in s.items()) + " ms")
    except Exception as e:
        print(f"setup {name}|unavailable ({e})")
print(f"amk run mlp_block, cached kernel, wall|{cli_ms} ms")
PY
while IFS='|' read -r k v; do row "$k" "$v"; done < "$out/bench_rows.txt"

sec "GEMV bandwidth (weights past L2)"
# gemv_0: the same launch with a nop a block: t(gemv) - t(gemv_0) is the GEMVs' time inside the
# program, launch cost apart. --cold flushes L2 before each launch (a 256 MiB write, so the launch
# also starts with dirty lines to write back: a pessimistic cold).
for f in gemv_0 gemv_8x4096x4096 gemv_1x4096x4096; do
  prof "$out/bench/$f.json" "$out/bench/$f.out.json"
  $amk --json profile "$out/bench/$f.json" --events --cold --warmup 5 --iterations 30 > "$out/bench/$f.cold.json" 2>"$out/bench/$f.cold.err" || { cat "$out/bench/$f.cold.err"; echo '{}' > "$out/bench/$f.cold.json"; }
done
$py - "$out" <<'PY' > "$out/gemv_rows.txt"
import json, os, sys
out = sys.argv[1]
def med(name, mode):
    try: return json.load(open(os.path.join(out, "bench", name + (".out.json" if mode == "warm" else ".cold.json"))))["median_ms"]
    except Exception: return None
for name, mats in (("gemv_8x4096x4096", 8), ("gemv_1x4096x4096", 1)):
    gb = mats * 4096 * 4096 * 2 / 1e9
    parts = []
    for mode in ("warm", "cold"):
        ms, ms0 = med(name, mode), med("gemv_0", mode)
        if ms is None: parts.append(f"{mode} unavailable"); continue
        p = f"{mode} {ms * 1e3:.1f} us = {gb / ms:.2f} TB/s"
        if ms0: p += f" (in program, launch {ms0 * 1e3:.1f} us apart: {(ms - ms0) * 1e3:.1f} us = {gb / (ms - ms0):.2f} TB/s)"
        parts.append(p)
    print(f"{name}: weights {gb * 1e3:.0f} MB (target >= 3.9 TB/s; 1x: <= 9 us)|" + "; ".join(parts))
PY
while IFS='|' read -r k v; do row "$k" "$v"; done < "$out/gemv_rows.txt"
# The GEMV program has no waits: its VM leaves out the gemv preload and the shared buffer table
# (codegen), whose registers would cost it its second block an SM (128 -> 150 / 139 registers).
$amk --json profile "$out/bench/gemv_8x4096x4096.json" --events --warmup 5 --iterations 30 --rounds 2 --tuning-arms "default;AMK_GEMV_PRELOAD=2;AMK_SMEM_BUFFERS=1" > "$out/bench/gemv_arms.json" 2>"$out/bench/gemv_arms.err"; tail -2 "$out/bench/gemv_arms.err"
$py - "$out/bench/gemv_arms.json" <<'PY' > "$out/gemv_arm_rows.txt"
import json, sys
try:
    for a in json.load(open(sys.argv[1]))["arms"]:
        print(f"gemv_8x4096x4096, {a['name']}, amk profile --tuning-arms|median " +
              " / ".join(f"{m * 1e3:.1f}" for m in a["round_medians_ms"]) + f" us ({a['ratio_to_first']:.3f}x)")
except Exception as e:
    print(f"gemv_8x4096x4096 arms|unavailable ({e})")
PY
while IFS='|' read -r k v; do row "$k" "$v"; done < "$out/gemv_arm_rows.txt"

fi  # AMK_BASE

if [ "${AMK_DECODE:-1}" = 1 ]; then
  [ -e "$out/bench/attn_pairs.json" ] || $py scripts/bench_programs.py "$out/bench"
  sec "Llama decode step (tiny vs numpy, 1B vs CPU + bench + PyTorch)"
  d="$scratch/decode"; mkdir -p "$d"
  if [ "${AMK_1B:-1}" = 1 ]; then  # (AMK_1B=0: the 8B rows only)
  $py scripts/check_llama.py --amk $amk --backend cuda >"$out/check_llama.log" 2>&1
  rc=$?; tail -3 "$out/check_llama.log"; row "llama tiny on cuda vs numpy" "$([ $rc = 0 ] && echo pass || echo FAIL)"
  $amk -q gen llama --preset llama-3.2-1b --context 1024 --write-weights "$d/llama1b.safetensors" -o "$d/llama1b.json" || row "gen 1B" FAIL
  $amk run "$d/llama1b.json" --backend cuda --check -o "$d/out1b" >"$out/run1b.log" 2>&1
  rc=$?; tail -4 "$out/run1b.log"; row "llama-3.2-1b ctx 1024 --check vs CPU" "$([ $rc = 0 ] && echo pass || echo "FAIL (exit $rc)")"
  tok=$($py -c "import numpy; print(int(numpy.load('$d/out1b/next_token.npy').ravel()[0]))" 2>/dev/null)
  $py scripts/check_llama.py --amk $amk --backend cuda --unfused --context 17 >"$out/check_llama_unfused.log" 2>&1
  rc=$?; tail -2 "$out/check_llama_unfused.log"; row "llama tiny --unfused on cuda vs numpy" "$([ $rc = 0 ] && echo pass || echo FAIL)"
  $py scripts/check_llama.py --amk $amk --backend cuda --rope-ops >"$out/check_llama_ropeops.log" 2>&1
  rc=$?; tail -2 "$out/check_llama_ropeops.log"; row "llama tiny --rope-ops on cuda vs numpy" "$([ $rc = 0 ] && echo pass || echo FAIL)"
  $py scripts/check_llama.py --amk $amk --backend cuda --glu-gemv >"$out/check_llama_glu.log" 2>&1
  rc=$?; tail -2 "$out/check_llama_glu.log"; row "llama tiny --glu-gemv on cuda vs numpy" "$([ $rc = 0 ] && echo pass || echo FAIL)"
  $py scripts/check_llama.py --amk $amk --backend cuda --down split --context 17 >"$out/check_llama_split.log" 2>&1
  rc=$?; tail -2 "$out/check_llama_split.log"; row "llama tiny --down split on cuda vs numpy" "$([ $rc = 0 ] && echo pass || echo FAIL)"
  $py scripts/check_llama.py --amk $amk --backend cuda --o-proj split --context 17 >"$out/check_llama_splito.log" 2>&1
  rc=$?; tail -2 "$out/check_llama_splito.log"; row "llama tiny --o-proj split on cuda vs numpy" "$([ $rc = 0 ] && echo pass || echo FAIL)"
  $py scripts/check_llama.py --amk $amk --backend cuda --combine-heads 2 --context 40 >"$out/check_llama_combine2.log" 2>&1
  rc=$?; tail -2 "$out/check_llama_combine2.log"; row "llama tiny --combine-heads 2 on cuda vs numpy" "$([ $rc = 0 ] && echo pass || echo FAIL)"
  $py scripts/check_llama.py --amk $amk --backend cuda --down transposed --context 17 >"$out/check_llama_downt.log" 2>&1
  rc=$?; tail -2 "$out/check_llama_downt.log"; row "llama tiny --down transposed on cuda vs numpy" "$([ $rc = 0 ] && echo pass || echo FAIL)"
  $py scripts/check_llama.py --amk $amk --backend cuda --combine steps --context 40 --layers 3 >"$out/check_llama_steps.log" 2>&1
  rc=$?; tail -2 "$out/check_llama_steps.log"; row "llama tiny --combine steps on cuda vs numpy" "$([ $rc = 0 ] && echo pass || echo FAIL)"
  $py scripts/check_llama.py --amk $amk --backend cuda --combine arrive --context 40 --layers 3 >"$out/check_llama_arrive.log" 2>&1
  rc=$?; tail -2 "$out/check_llama_arrive.log"; row "llama tiny --combine arrive on cuda vs numpy" "$([ $rc = 0 ] && echo pass || echo FAIL)"
  $py scripts/check_llama.py --amk $amk --backend cuda --attn-sync layer >"$out/check_llama_layersync.log" 2>&1
  rc=$?; tail -2 "$out/check_llama_layersync.log"; row "llama tiny --attn-sync layer on cuda vs numpy" "$([ $rc = 0 ] && echo pass || echo FAIL)"
  $py scripts/check_llama.py --amk $amk --backend cuda --mlp-act bf16 >"$out/check_llama_mlpbf16.log" 2>&1
  rc=$?; tail -2 "$out/check_llama_mlpbf16.log"; row "llama tiny --mlp-act bf16 on cuda vs numpy" "$([ $rc = 0 ] && echo pass || echo FAIL)"
  # The tiny step against numpy and the 1B step against the CPU backend under tunings the
  # checks above do not cover: attention_decode copying its K/V before its waits
  # (AMK_ATTN_PRELOAD=1, built in the twenty-third session; measured no faster in the
  # twenty-fourth, so off, except for the 1B step's one-head chunks from the twenty-eighth to the
  # thirtieth; AMK_ATTN_ROW8=0 is the thirtieth session's VM, the preload with the split stages),
  # the merge's 4-byte loads, no early first poll of a preloading gemv (AMK_EARLY_POLL=0) and the
  # signals released by warp 0 (the defaults before the twenty-fifth session), and no L1
  # prefetch of the next step's instruction (AMK_NEXT_INS_L1=0, before the twenty-sixth).
  for tn in AMK_ATTN_PRELOAD=1 AMK_ATTN_ROW8=0 AMK_GEMV_COMBINE_LD8=0 AMK_EARLY_POLL=0 AMK_SIGNAL_WARP=0 AMK_NEXT_INS_L1=0; do
    AMK_VM_TUNING=$tn $py scripts/check_llama.py --amk $amk --backend cuda >"$out/check_llama_$tn.log" 2>&1
    rc=$?; tail -2 "$out/check_llama_$tn.log"; row "llama tiny $tn on cuda vs numpy" "$([ $rc = 0 ] && echo pass || echo FAIL)"
    AMK_VM_TUNING=$tn $amk run "$d/llama1b.json" --backend cuda --check --reseed "$check_seed" -o "$d/out1b_$tn" >"$out/run1b_$tn.log" 2>&1
    rc=$?; tail -2 "$out/run1b_$tn.log"; row "llama-3.2-1b $tn --check vs CPU" "$([ $rc = 0 ] && echo pass || echo "FAIL (exit $rc)")"
  done
  # The default step beside its tuning arms, in one process (`amk profile --tuning-arms`: one
  # executable per arm, two interleaved rounds): gemv's weights in registers (AMK_GEMV_SMEM_STAGES=0,
  # the default before the eighteenth session) or through 3 ring stages, the gemv preload at two
  # batches (AMK_GEMV_PRELOAD=2, the default before the twenty-third session),
  # the buffer table read from global memory (AMK_SMEM_BUFFERS=0), no L2 prefetch of a waiting
  # step's own weights (AMK_PREFETCH_OWN_BYTES=0), the 8B step's attention instruction read from
  # global memory after its wait (AMK_STAGE_DECODE_INS=0; on the 1B step it is listed below with
  # the preload), attention's new-token reads as three round trips
  # (AMK_ATTN_ONE_TRIP=0), the residual's L1 prefetch (AMK_GEMV_RES_PREFETCH=1, off since the
  # eighteenth session), the L2 prefetch of the next streaming step (AMK_PREFETCH_AHEAD=1, off in
  # the decode steps since the nineteenth), attention_combine's register path
  # (AMK_COMBINE_SMEM=0, the 8B step's arm: the 1B step has no combine steps since the
  # twenty-seventh session), the large attention tile static (AMK_ATTN_TILE_DYNAMIC=0), the
  # unfused gemv's x loads one vector at a time (AMK_GEMV_X_BATCH=0, the default before the
  # twenty-seventh; on the 1B step its arm is =1, the default from the twenty-seventh to the
  # thirtieth), the tiled attention's 16-byte K/V copies instead of two bulk copies (AMK_ATTN_BULK=0, the
  # default before the twenty-fourth), a step's signals released by warp 0 (AMK_SIGNAL_WARP=0, the
  # default before the twenty-fifth), a preloading gemv's first poll only after its first batches
  # (AMK_EARLY_POLL=0, likewise; on the 1B step, where it is off since the thirty-first, its arm
  # is =1), no prefetch of the next step's instruction into L1 after a
  # wait (AMK_NEXT_INS_L1=0, the default before the twenty-sixth), the one-head attention chunks'
  # K/V copied before their waits (AMK_ATTN_PRELOAD=1, the default from the twenty-eighth to
  # the thirtieth) and without the attention instruction's copy in shared memory
  # (AMK_STAGE_DECODE_INS=0, likewise), the o_proj merge's 4-byte loads
  # (AMK_GEMV_COMBINE_LD8=0, the default before the twenty-eighth), and the ring without its
  # loop for rows of whole batches (AMK_GEMV_WHOLE=0, the default before the twenty-ninth, and
  # the 8B step's before the thirtieth) and the norm staging's reads a quad a pass
  # (AMK_GEMV_STAGE_ONE_TRIP=0, before the thirtieth), and the one-head attention chunks'
  # split stages (AMK_ATTN_ROW8=0, before the thirty-first): each default's margin, measured again
  # ($AMK_ARMS_1B: other arms). The
  # other layouts (--unfused, --attn-sync layer, --down split, --o-proj split) are only checked
  # above: each measured slower than the default (the README's sessions have their figures).
  arms="${AMK_ARMS_1B:-default;AMK_GEMV_SMEM_STAGES=0;AMK_GEMV_SMEM_STAGES=3;AMK_GEMV_PRELOAD=2;AMK_SMEM_BUFFERS=0;AMK_PREFETCH_OWN_BYTES=0;AMK_STAGE_DECODE_INS=0;AMK_ATTN_ONE_TRIP=0;AMK_GEMV_RES_PREFETCH=1;AMK_PREFETCH_AHEAD=1;AMK_ATTN_TILE_DYNAMIC=0;AMK_GEMV_X_BATCH=1;AMK_ATTN_BULK=0;AMK_SIGNAL_WARP=0;AMK_EARLY_POLL=1;AMK_NEXT_INS_L1=0;AMK_ATTN_PRELOAD=1;AMK_GEMV_COMBINE_LD8=0;AMK_GEMV_WHOLE=0;AMK_GEMV_STAGE_ONE_TRIP=0;AMK_ATTN_ROW8=0}"
  IFS=';' read -r -a arm_list <<< "$arms"
  for a in "${arm_list[@]}"; do precompile "$([ "$a" = default ] || echo "$a")" "$d/llama1b.json"; done
  precompile_run
  # (amk profile compares at most 16 arms at once: groups of 15 beside the default.)
  arm_groups 1b "$d/llama1b.json" 15 "${AMK_ROUNDS_1B:-2}" "${arm_list[@]}"
  # The default layout (attention chunks of one query head merged by the o_proj gemvs, since the
  # twenty-seventh session) against combine steps (the default before) and the MLP activation in
  # bf16 (--mlp-act bf16, an option since the thirty-third), in alternating processes.
  $amk -q gen llama --preset llama-3.2-1b --context 1024 --combine steps -o "$d/llama1b_steps.json"
  $amk -q gen llama --preset llama-3.2-1b --context 1024 --mlp-act bf16 -o "$d/llama1b_mlpbf16.json"
  for r in 1 2; do
    for f in llama1b llama1b_steps llama1b_mlpbf16; do
      $amk --json profile "$d/$f.json" --events --warmup 3 --iterations 20 > "$d/prof_$f.$r.json" 2>/dev/null
    done
  done
  $py - "$d" <<'PY' > "$d/layout_rows.txt"
import json, os, sys
try:
    for f, label in (("llama1b", "default layout"), ("llama1b_steps", "--combine steps"),
                     ("llama1b_mlpbf16", "--mlp-act bf16")):
        ms = [json.load(open(os.path.join(sys.argv[1], f"prof_{f}.{r}.json")))["median_ms"] for r in (1, 2)]
        print(f"1B decode ({label}), alternating processes|median " + " / ".join(f"{m:.4f}" for m in ms) + " ms")
except Exception as e:
    print(f"1B layouts|unavailable ({e})")
PY
  while IFS='|' read -r k v; do row "$k" "$v"; done < "$d/layout_rows.txt"
  $amk --json bench "$d/llama1b.json" --cold > "$d/bench1b.json" 2>"$d/bench1b.err"; tail -3 "$d/bench1b.err"
  $py - "$d/bench1b.json" <<'PY' > "$d/bench_rows.txt"
import json, sys
try:
    j = json.load(open(sys.argv[1]))
    for a in j["arms"]:
        print(f"1B decode, {a['name']} (target <= 0.62 ms)|median {a['median_ms']:.4f} ms, min {a['min_ms']:.4f}, max {a['max_ms']:.4f}, spread {100 * a['rel_spread']:.1f}%")
except Exception as e:
    print(f"1B decode bench|unavailable ({e})")
PY
  while IFS='|' read -r k v; do row "$k" "$v"; done < "$d/bench_rows.txt"
  # attention_decode with its code cold (first of a pair on a block) and warm (second), with and
  # without the RoPE table to compute first (scripts/bench_programs.py: attn_pairs*).
  for f in $([ "${AMK_DIAG:-1}" = 1 ] && echo attn_pairs attn_pairs_plain); do  # (AMK_DIAG=0: none)
    $amk profile "$out/bench/$f.json" --trace "$d/trace_$f.json" > /dev/null 2>&1
    n=$($py scripts/trace_phases.py "$d/trace_$f.json" --warm | awk '$1 == "attn" && NF == 5 { print "cold " $3 " us, warm " $5 " us"; exit }')
    row "attention chunk (1B-shaped), $f" "${n:-unavailable}"
  done
  $amk profile "$d/llama1b.json" --trace "$d/trace1b.json" 2>&1 | tail -16
  $py scripts/trace_phases.py "$d/trace1b.json" --chain=q_proj,attn,o_proj,gate_up_proj,down_proj | tee "$out/phases1b.txt" | cut -c1-100
  # The same with attention's and the combine's marks at earlier points (AMK_TRACE_MARKS_EARLY=1:
  # op entered, q staging started / first (m, l); =2: operands decoded, K/V copies issued; =4:
  # a gemv's first weight batch landed, in place of its loads issued), at attention's later
  # points (=5: scores, softmax; =6: output partials, outputs written), attention run twice (=7:
  # the second run's start and end) and a gemv's second batch (=8: landed, reduced), in
  # logs.tar.gz (the marks keep their level-0 names in the tables).
  for lv in $([ "${AMK_DIAG:-1}" = 1 ] && echo 1 2 4 5 6 7 8); do
    AMK_VM_TUNING=AMK_TRACE_MARKS_EARLY=$lv $amk profile "$d/llama1b.json" --trace "$d/trace1b_early$lv.json" > "$out/trace1b_early$lv.txt" 2>&1
    $py scripts/trace_phases.py "$d/trace1b_early$lv.json" > "$out/phases1b_early$lv.txt" 2>&1
  done
  # The plain gemv's inner loop (bf16 weights, f32 x: 64 FFMA, 24 128-bit loads an iteration) in
  # SASS, in the VM of each layout: its length moves with what else the one kernel holds.
  if [ "${AMK_DIAG:-1}" = 1 ] && command -v nvdisasm >/dev/null; then
    [ -e "$d/llama1b_unfused.json" ] || $amk -q gen llama --preset llama-3.2-1b --context 1024 --unfused -o "$d/llama1b_unfused.json"
    for f in llama1b llama1b_unfused; do
      $amk -q compile "$d/$f.json" -o "$d/$f.cubin" >/dev/null 2>&1 && nvdisasm -c "$d/$f.cubin" > "$d/$f.sass" 2>/dev/null
      $py scripts/sass_loops.py "$d/$f.sass" --max-len 800 > "$d/$f.loops.txt" 2>&1
      n=$(awk '$3 == 64 && $4 == 24 { print $2 " instructions, IMAD " $8 ", MOV " $9; exit }' "$d/$f.loops.txt")
      row "gemv inner loop in SASS, $f" "${n:-not found (see $d/$f.loops.txt)}"
    done
  fi
  if [ "${AMK_TORCH:-1}" = 1 ]; then  # (AMK_TORCH=0: no PyTorch baseline)
  PYTHONUNBUFFERED=1 timeout 300 $py scripts/torch_baseline.py --weights "$d/llama1b.safetensors" --samples 50 ${tok:+--amk-token $tok} >"$d/torch.json" 2>"$d/torch.err"
  rc=$?; tail -5 "$d/torch.err"; tail -20 "$d/torch.json"
  row "PyTorch baseline (same weights), next token = amk's" "$([ $rc = 0 ] && [ -n "$tok" ] && echo "pass (token $tok)" || echo "FAIL (exit $rc${tok:-, no token from amk to compare})")"
  $py - "$d/torch.json" <<'PY' > "$d/torch_rows.txt"
import json, sys
try:
    text = open(sys.argv[1]).read()
    j, _ = json.JSONDecoder().raw_decode(text[text.index("{"):])
    for k, v in j.items():
        if isinstance(v, dict) and "median_ms" in v:
            print(f"1B decode, PyTorch {k}|median {v['median_ms']:.4f} ms")
except Exception as e:
    print(f"PyTorch rows|unavailable ({e})")
PY
  while IFS='|' read -r k v; do row "$k" "$v"; done < "$d/torch_rows.txt"
  fi  # AMK_TORCH
  fi  # AMK_1B
  if [ "${AMK_LAYOUTS:-1}" = 1 ]; then  # (AMK_LAYOUTS=0: not these six)
  # The 1B step in the other layouts against the CPU backend, on the default step's weights: one
  # op per HF step (--unfused), the down projection split along K (gemv_splitk), the output
  # projection cut by query heads, each piece merging its heads' chunks itself
  # (attention_combine_splitk, --o-proj split), the merges in the last chunk of each kv head
  # (arrival groups, --combine arrive), combine steps, the MLP activation in bf16 (--check at bf16's
  # tolerance for the logits, which follow its stores). ~45 s each.
  [ -e "$d/llama1b.safetensors" ] || $amk -q gen llama --preset llama-3.2-1b --context 1024 --write-weights "$d/llama1b.safetensors" -o "$d/llama1b.json"
  for lay in unfused "down split" "o-proj split" "combine arrive" "combine steps" "mlp-act bf16"; do
    f=llama1b_${lay// /_}
    $amk -q gen llama --preset llama-3.2-1b --context 1024 --$lay --weights "$d/llama1b.safetensors" -o "$d/$f.json" || row "gen 1B --$lay" FAIL
    precompile "" "$d/$f.json"
  done
  precompile_run
  for lay in unfused "down split" "o-proj split" "combine arrive" "combine steps" "mlp-act bf16"; do
    f=llama1b_${lay// /_}
    $amk run "$d/$f.json" --backend cuda --check --reseed "$check_seed" -o "$d/out_$f" >"$out/run_$f.log" 2>&1
    rc=$?; tail -2 "$out/run_$f.log"; row "llama-3.2-1b --$lay --check vs CPU" "$([ $rc = 0 ] && echo pass || echo "FAIL (exit $rc)")"
  done
  fi  # AMK_LAYOUTS
  if [ "${AMK_8B:-1}" = 1 ]; then
    $amk -q gen llama --preset llama-3.1-8b --context 1024 -o "$d/llama8b.json"
    arms8="${AMK_ARMS_8B:-default;AMK_GEMV_SMEM_STAGES=0;AMK_GEMV_PRELOAD=2;AMK_SMEM_BUFFERS=0;AMK_STAGE_DECODE_INS=0;AMK_ATTN_ONE_TRIP=0;AMK_GEMV_RES_PREFETCH=1;AMK_PREFETCH_AHEAD=1;AMK_COMBINE_SMEM=0;AMK_ATTN_SPLIT=0;AMK_ATTN_BULK=0;AMK_SIGNAL_WARP=0;AMK_EARLY_POLL=0;AMK_NEXT_INS_L1=0;AMK_GEMV_X_BATCH=1;AMK_GEMV_WHOLE=0;AMK_GEMV_STAGE_ONE_TRIP=0}"
    IFS=';' read -r -a arm_list <<< "$arms8"
    for a in "${arm_list[@]}"; do precompile "$([ "$a" = default ] || echo "$a")" "$d/llama8b.json"; done
    precompile_run
    # The default step beside its arms (the 1B step's, where they apply): gemv's weights in
    # registers, the gemv preload at two batches, the buffer table read from global memory,
    # attention's instruction read after its wait, attention's new-token reads as three round
    # trips, the residual's L1 prefetch, and so on. Every arm holds its own copy of the step's 16
    # GB of buffers and `amk profile` refuses more than 90% of the device's memory (exit 5,
    # device.memory): seven arms at most a process, so the arms go in groups of six beside the
    # default, each group its own process (and fill of the seeded weights, ~40 s of host time).
    arm_groups 8b "$d/llama8b.json" 6 2 "${arm_list[@]}"
  fi
fi

if [ "${AMK_NCU:-0}" = 1 ] && command -v ncu >/dev/null; then
  sec "ncu: where a dispatch step goes (dispatch_3000)"
  timeout 300 ncu --clock-control none --section WarpStateStats --section SchedulerStats \
    --section ComputeWorkloadAnalysis --section InstructionStats -k regex:amk_vm --launch-count 1 \
    $amk run "$out/bench/dispatch_3000.json" --backend cuda >"$out/ncu_dispatch.txt" 2>&1
  grep -E "Stall|Warp Cycles|Issued|Active Warps|Eligible|Duration|Elapsed Cycles|SM Frequency" \
    "$out/ncu_dispatch.txt" | head -40
fi

summary
