#!/usr/bin/env bash
# CLI smoke test: every subcommand's basic use, --json output, and the documented exit codes.
set -u
root="$(cd "$(dirname "$0")/../.." && pwd)"
amk="${AMK:?set AMK to the amk binary}"
py=/usr/bin/python3
# A python3 with numpy for the checks that read .npy files.
. "$root/tests/cli/numpy_python.sh"
np_py="$(numpy_python)" || { echo "smoke: no python3 with numpy (set AMK_PYTHON)"; exit 1; }
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
. "$root/tests/cli/expect.sh"
sample="$root/samples/mlp_block.json"

# GPUs this machine has (amk devices: zero, with a notice, without a driver or a device).
gpus="$("$amk" --json devices 2>/dev/null | "$py" -c "import json,sys; print(len(json.load(sys.stdin)['devices']))" 2>/dev/null)"
gpus="${gpus:-0}"

expect_rc 0 "help" -- "$amk" --help
expect_grep "$tmp/out" "Subcommands" "help lists subcommands"
expect_rc 0 "version" -- "$amk" --version
expect_rc 2 "no subcommand" -- "$amk"
expect_rc 2 "unknown flag" -- "$amk" run "$sample" --frobnicate
expect_rc 2 "bad backend value" -- "$amk" run "$sample" --backend tpu
# A bad command line is one amk usage error naming the subcommand (JSON with --json), exit 2.
expect_grep "$tmp/err" "^amk: usage error \[usage.command_line\] at amk run: --backend: tpu not in" "bad backend value is one located line"
[ "$(wc -l < "$tmp/err")" -eq 1 ] && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL bad backend value: not one line"; }
expect_rc 2 "option out of range" -- "$amk" gen llama --attn-chunks 0 -o "$tmp/g0.json"
expect_grep "$tmp/err" "usage.command_line\] at amk gen llama: --attn-chunks: Value 0 not in range" "range error names the subcommand"
expect_rc 2 "missing argument, --json" -- "$amk" --json run
[ "$(json_field "$tmp/out" "j['error']['code'] + ' ' + j['error']['where'] + ' ' + str(j['error']['exit_code'])")" = "usage.command_line amk run 2" ] && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL command-line error as JSON"; }
expect_rc 0 "subcommand help" -- "$amk" run --help
expect_grep "$tmp/out" "Usage:" "subcommand help prints usage"
expect_rc 4 "missing file" -- "$amk" validate "$tmp/nope.json"
expect_grep "$tmp/err" "io.missing" "missing file code"
# A folder where a program file belongs is an io error naming it; a program on a pipe is read
# once (the wrapper sniffing leaves pipes alone).
expect_rc 4 "a folder as the program" -- "$amk" run "$tmp" --backend cpu -o "$tmp/dir_out"
expect_grep "$tmp/err" "io.read\] at $tmp: is a directory" "the folder named"
expect_rc 2 "a folder as the report path" -- "$amk" run "$sample" --backend cpu --report "$tmp" -o "$tmp/rep_out"
expect_grep "$tmp/err" "usage.report\] at $tmp: the report path is a folder" "the report folder named"
[ ! -e "$tmp/rep_out" ] && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL a refused report path wrote outputs"; }
expect_rc 0 "a program on a pipe" -- bash -c "cat '$sample' | '$amk' -q run /dev/stdin --backend cpu -o '$tmp/pipe_out'"
[ -e "$tmp/pipe_out/out.npy" ] && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL a program on a pipe: no out.npy"; }

expect_rc 0 "validate" -- "$amk" validate "$sample"
expect_grep "$tmp/out" "^ok" "validate says ok"
expect_rc 0 "validate --json" -- "$amk" --json validate "$sample"
[ "$(json_field "$tmp/out" "j['status']")" = ok ] && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL validate --json status"; }

expect_rc 0 "inspect" -- "$amk" inspect "$sample"
expect_grep "$tmp/out" "critical path" "inspect shows the critical path"
expect_grep "$tmp/out" "gemv  6" "inspect counts instructions by op"
expect_rc 0 "inspect --json" -- "$amk" --json inspect "$sample"
[ "$(json_field "$tmp/out" "j['instructions']['by_op']['gemv']")" = 6 ] && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL inspect --json by_op"; }
[ "$(json_field "$tmp/out" "j['buffers']['bytes']")" = 3166208 ] && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL inspect --json bytes"; }
# --vm FIELD=VALUE: an unknown field, a field derived from the program or a value out of range is
# a usage error naming --vm (exit 2), before anything is loaded or compiled (also in a build
# without the CUDA toolkit: the config is part of the core library).
expect_rc 2 "--vm out of range refused" -- "$amk" compile "$sample" --arch sm_90a --vm gemv_preload=9
expect_grep "$tmp/err" "usage.vm\] at --vm: gemv_preload (.*) is an integer in 0..4, got '9'" "--vm out of range is located"
expect_rc 2 "--vm unknown field refused" -- "$amk" run "$sample" --backend cpu --vm AMK_GEMV_PRELOAD=1
expect_grep "$tmp/err" "no VM field 'AMK_GEMV_PRELOAD'" "--vm names the unknown field"
expect_rc 2 "--vm shape field refused" -- "$amk" compile "$sample" --vm block_threads=128
expect_grep "$tmp/err" "block_threads is derived from the program, not a tuning" "--vm refuses a shape field"
expect_rc 2 "--vm without a value refused" -- "$amk" compile "$sample" --vm attn_tile
expect_grep "$tmp/err" "expected FIELD=VALUE" "--vm names the form"
"$amk" compile "$sample" --arch sm_90a >"$tmp/out" 2>"$tmp/err"
if grep -q "built without the CUDA toolkit" "$tmp/err"; then
  echo "skip: compile's VM config report (amk built without CUDA)"
else
  # What the chooser decided for the VM: mlp_block's gemvs wait on weights nothing writes.
  expect_rc 0 "compile reports the VM's config" -- "$amk" compile "$sample" --arch sm_90a
  expect_grep "$tmp/out" "vm: smem_buffers=true gemv_ring_stages=2 gemv_preload=1 prefetch_ahead=0" "compile names the fields off their defaults"
  expect_rc 2 "compile --arch not an architecture refused" -- "$amk" compile "$sample" --arch banana
  expect_grep "$tmp/err" "usage.arch\] at --arch: expected a real architecture sm_NN\[a|f\] (e.g. sm_90a), got 'banana'" "--arch names the form"
  expect_rc 2 "compile --arch older than sm_80 refused" -- "$amk" compile "$sample" --arch sm_75
  expect_grep "$tmp/err" "usage.arch\] at --arch: the VM needs sm_80 or newer" "--arch names the oldest it takes"
  # The program's target against the arch, before NVRTC: min_arch sm_90 and TMA on sm_80.
  expect_rc 5 "compile --arch below target.min_arch refused" -- "$amk" compile "$root/tests/gpu/programs/tma_gemv.json" --arch sm_80
  expect_grep "$tmp/err" "device.target\] at --arch: program '.*' cannot be compiled for sm_80: the program needs sm_90 or newer" "the refusal names min_arch"
  expect_grep "$tmp/err" "TMA tensor maps" "the refusal names TMA"
  expect_rc 0 "compile --explain" -- "$amk" compile "$sample" --arch sm_90a --explain
  expect_grep "$tmp/out" "gemv_ring_stages  *2  *gemvs wait and preload" "--explain says why"
  expect_grep "$tmp/out" "block_threads  *256  *(program) the program's launch.block" "--explain marks the program's fields"
  expect_rc 0 "compile --json reports the VM's config" -- "$amk" --json compile "$sample" --arch sm_90a --vm smem_buffers=false,gemv_ring_stages=3
  [ "$(json_field "$tmp/out" "' '.join(str(j['vm'][f]['value']) for f in ('smem_buffers', 'gemv_preload', 'gemv_ring_stages', 'prefetch_ahead'))")" = "False 1 3 0" ] && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL compile --json vm"; }
  [ "$(json_field "$tmp/out" "j['vm']['gemv_ring_stages']['why'].startswith('--vm gemv_ring_stages')")" = True ] && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL compile --json vm: an override's why"; }
  # attention_rope's chunks need the wide tile (and one the streaming pass) and its combine waits:
  # the instruction is read from a copy in shared memory; with the small tile forced, the pass
  # takes the wide chunks too.
  expect_rc 0 "compile --json reports the attention config" -- "$amk" --json compile "$root/tests/gpu/programs/attention_rope.json" --arch sm_90a
  [ "$(json_field "$tmp/out" "' '.join(str(j['vm'][f]['value']) for f in ('stage_decode_ins', 'attn_tile', 'attn_pass'))")" = "True wide True" ] && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL compile --json attention config"; }
  expect_rc 0 "compile with a smaller tile" -- "$amk" --json compile "$root/tests/gpu/programs/attention_rope.json" --arch sm_90a --vm attn_tile=small
  [ "$(json_field "$tmp/out" "' '.join(str(j['vm'][f]['value']) for f in ('attn_tile', 'attn_pass'))")" = "small True" ] && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL --vm attn_tile=small takes the pass"; }
fi

expect_rc 0 "convert to amkb" -- "$amk" convert "$sample" -o "$tmp/mlp.amkb"
expect_rc 0 "validate amkb" -- "$amk" validate "$tmp/mlp.amkb"
expect_rc 2 "convert unknown extension" -- "$amk" convert "$sample" -o "$tmp/mlp.bin"
# convert into another folder: relative data paths are rewritten to name the same files, and a
# path that would leave the new folder is refused (or, with --allow-outside, written with "..").
mkdir -p "$tmp/cv/sub" && cp -r "$root/samples/gemv_chain.json" "$root/samples/data" "$tmp/cv/sub/"
expect_rc 0 "convert to a parent folder" -- "$amk" convert "$tmp/cv/sub/gemv_chain.json" -o "$tmp/cv/g.amkb"
expect_grep "$tmp/out" "1 data path(s) rewritten" "convert says it rewrote the data path"
expect_rc 0 "run the original" -- "$amk" run "$tmp/cv/sub/gemv_chain.json" --backend cpu -o "$tmp/cv/o1"
expect_rc 0 "run the converted copy" -- "$amk" run "$tmp/cv/g.amkb" --backend cpu -o "$tmp/cv/o2"
cmp -s "$tmp/cv/o1/y.npy" "$tmp/cv/o2/y.npy" && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL converted copy computes other outputs"; }
expect_rc 2 "convert into a folder without the data" -- "$amk" convert "$tmp/cv/sub/gemv_chain.json" -o "$tmp/cv/sub/deeper/g.json"
expect_grep "$tmp/err" "usage.convert.path\] at /buffers/0/init/path: .*would be \"../data/" "the refusal names the buffer and the path"
mkdir -p "$tmp/cv/sub/deeper"
expect_rc 0 "convert --allow-outside" -- "$amk" convert "$tmp/cv/sub/gemv_chain.json" -o "$tmp/cv/sub/deeper/g.json" --allow-outside
expect_rc 3 "the outside path needs --allow-outside to load" -- "$amk" validate "$tmp/cv/sub/deeper/g.json"
expect_rc 0 "and loads with it" -- "$amk" validate "$tmp/cv/sub/deeper/g.json" --allow-outside

expect_rc 0 "run cpu" -- "$amk" run "$sample" --backend cpu -o "$tmp/run1"
for f in out.npy manifest.json report.json; do
  [ -f "$tmp/run1/$f" ] && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL run wrote no $f"; }
done
[ "$(json_field "$tmp/run1/report.json" "j['status'] + ' ' + j['backend']")" = "ok cpu" ] && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL report status/backend"; }
expect_rc 0 "run --check on cpu" -- "$amk" --json run "$sample" --backend cpu --check
[ "$(json_field "$tmp/out" "j['check']['passed']")" = True ] && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL check passed"; }
# --check starts the outputs whose zeros nothing reads poisoned (on both backends), says which,
# and writes what a run without it writes.
[ "$(json_field "$tmp/out" "j['check']['poisoned'] + ' ' + str(j['check']['outputs'][0]['poisoned']) + ' ' + str(j['check']['outputs'][0]['unwritten'])")" = "out True 0" ] && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL check's poisoned outputs"; }
expect_rc 0 "run --check -o" -- "$amk" run "$sample" --backend cpu --check -o "$tmp/run_checked"
expect_grep "$tmp/out" "^check: poisoned before the run, every element the reference writes written: out$" "--check names the poisoned outputs"
cmp -s "$tmp/run1/out.npy" "$tmp/run_checked/out.npy" && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL --check changed the written outputs"; }
# --reseed: the random inits drawn from other seeds (another data fingerprint, other outputs).
expect_rc 0 "run --reseed --check" -- "$amk" run "$sample" --backend cpu --check --reseed 5 -o "$tmp/run_reseed"
expect_grep "$tmp/out" "^inputs: [0-9]* random init(s) reseeded from 5$" "--reseed says so"
[ "$(json_field "$tmp/run_reseed/report.json" "str(j['extra']['reseed']) + ' ' + str(j['program']['data_fingerprint'] != json.load(open('$tmp/run1/report.json'))['program']['data_fingerprint'])")" = "5 True" ] && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL --reseed's report"; }
! cmp -s "$tmp/run1/out.npy" "$tmp/run_reseed/out.npy" && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL --reseed left the outputs as they were"; }
expect_rc 2 "--reseed not a number" -- "$amk" run "$sample" --backend cpu --reseed five
# ... nor a negative, empty or out-of-range one (CLI11 alone took "-1" as 2^64 - 1 and "" as 0).
for bad_seed in -1 "" 18446744073709551616; do
  expect_rc 2 "--reseed '$bad_seed'" -- "$amk" run "$sample" --backend cpu --reseed "$bad_seed"
  expect_grep "$tmp/err" "at amk run: --reseed: expected a decimal integer" "--reseed '$bad_seed' is one located line"
done

# Passes in one launch multiply what the signals add to a counter (and each queue's steps), which
# the device counts in 32 bits: a program that fits one pass but not two is refused before it runs.
"$py" - "$tmp/half_counter.json" <<'PY'
import json, sys
half = 1 << 31
json.dump({"format": "amk.program", "version": 1, "name": "half", "launch": {"grid": 2, "block": 128},
           "buffers": [], "counters": ["c"],
           "instructions": [{"name": "a", "op": "nop", "signals": [{"counter": "c", "add": half}]},
                            {"name": "b", "op": "nop", "waits": [{"counter": "c", "value": half}]}],
           "queues": [["a"], ["b"]]}, open(sys.argv[1], "w"))
PY
expect_rc 0 "run --passes 1 with a counter at 2^31" -- "$amk" run "$tmp/half_counter.json" --backend cpu -o "$tmp/half1"
expect_rc 3 "run --passes 2 past 32-bit counters" -- "$amk" run "$tmp/half_counter.json" --backend cpu --passes 2 -o "$tmp/half2"
expect_grep "$tmp/err" "\[plan.counter.overflow\] at /counters/0: counter 'c' gains 2147483648 per pass x 2 passes" "--passes overflow names the counter and the figures"

# A failed run leaves the previous outputs untouched.
cp "$tmp/run1/out.npy" "$tmp/before.npy"
"$py" - "$sample" "$tmp/broken.json" <<'PY'
import json, sys
p = json.load(open(sys.argv[1]))
p["buffers"][0]["init"] = {"kind": "npy", "path": "missing.npy"}
json.dump(p, open(sys.argv[2], "w"))
PY
expect_rc 4 "run with a missing data file" -- "$amk" run "$tmp/broken.json" --backend cpu -o "$tmp/run1"
cmp -s "$tmp/run1/out.npy" "$tmp/before.npy" && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL outputs changed by a failed run"; }
# Its report goes beside the folder, which keeps the previous run's (schemas/outputs.md).
[ "$(json_field "$tmp/run1.failed-report.json" "j['status']")" = error ] && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL failed run's report status"; }
[ "$(json_field "$tmp/run1/report.json" "j['status']")" = ok ] && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL failed run replaced the folder's report"; }

# amk compile needs NVRTC but no GPU: a cubin for sm_90a (an ELF file), or exit 5 when this amk
# was built without the CUDA toolkit.
AMK_CACHE_DIR="$tmp/cache" "$amk" compile "$sample" --arch sm_90a -o "$tmp/vm.cubin" >"$tmp/out" 2>"$tmp/err"
rc=$?
compile_rc=$rc  # 0: this amk has NVRTC
if [ "$rc" -eq 0 ] && [ "$(head -c 4 "$tmp/vm.cubin" | od -An -c | tr -d ' ')" = '177ELF' ]; then
  pass=$((pass + 1))
elif [ "$rc" -eq 5 ] && grep -q "device.unsupported" "$tmp/err"; then
  pass=$((pass + 1))
else
  fail=$((fail + 1)); echo "FAIL compile: exit $rc"; head -3 "$tmp/err"
fi
# --lineinfo adds -lineinfo to the NVRTC options (and only then).
if [ "$rc" -eq 0 ]; then
  AMK_CACHE_DIR="$tmp/cache" "$amk" --json compile "$sample" --arch sm_90a --lineinfo >"$tmp/li.json" 2>/dev/null
  AMK_CACHE_DIR="$tmp/cache" "$amk" --json compile "$sample" --arch sm_90a >"$tmp/noli.json" 2>/dev/null
  if [ "$(json_field "$tmp/li.json" "'-lineinfo' in j['options']")" = True ] &&
     [ "$(json_field "$tmp/noli.json" "'-lineinfo' in j['options']")" = False ]; then
    pass=$((pass + 1))
  else
    fail=$((fail + 1)); echo "FAIL --lineinfo -> -lineinfo"
  fi
fi
# compile -o writes FILE.json beside the cubin: what it was built for (README "Ahead of time").
if [ "$rc" -eq 0 ]; then
  AMK_CACHE_DIR="$tmp/cache" "$amk" --json compile "$sample" --arch sm_90a -o "$tmp/vm.cubin" >"$tmp/c.json" 2>/dev/null
  rec="$tmp/vm.cubin.json"
  if [ -f "$rec" ] && [ "$(json_field "$rec" "j['format'], j['arch'], j['kernel_name']")" = "amk.cubin sm_90a amk_vm" ] &&
     [ "$(json_field "$rec" "j['source_fingerprint']")" = "$(json_field "$tmp/c.json" "j['fingerprint']")" ] &&
     [ "$(json_field "$rec" "j['cubin_sha256']")" = "$(sha256sum "$tmp/vm.cubin" | cut -d' ' -f1)" ] &&
     [ "$(json_field "$tmp/c.json" "j['output_record']")" = "$rec" ]; then
    pass=$((pass + 1))
  else
    fail=$((fail + 1)); echo "FAIL compile -o: the record beside the cubin"; cat "$rec" 2>&1 | head -5
  fi
  # run --cubin reads both files before anything runs: a missing or malformed one is an io error
  # (exit 4) with its place, on a machine with or without a GPU.
  expect_rc 4 "run --cubin missing" -- "$amk" run "$sample" --backend cuda --cubin "$tmp/none.cubin"
  expect_grep "$tmp/err" "io.missing\] at $tmp/none.cubin: no such cubin" "run --cubin missing names the file"
  cp "$tmp/vm.cubin" "$tmp/bare.cubin"
  expect_rc 4 "run --cubin without its record" -- "$amk" run "$sample" --backend cuda --cubin "$tmp/bare.cubin"
  expect_grep "$tmp/err" "io.missing\] at $tmp/bare.cubin.json: no artifact record" "run --cubin names the missing record"
  echo '{"format": "amk.cubin", "version": 1}' >"$tmp/bare.cubin.json"
  expect_rc 4 "run --cubin with a record lacking fields" -- "$amk" run "$sample" --backend cuda --cubin "$tmp/bare.cubin"
  expect_grep "$tmp/err" "io.artifact.field\] at $tmp/bare.cubin.json#/arch" "run --cubin names the missing field"
  # The CPU backend compiles nothing: --cubin is ignored there, with a warning.
  expect_rc 0 "run --backend cpu ignores --cubin" -- "$amk" run "$sample" --backend cpu --cubin "$tmp/none.cubin"
  expect_grep "$tmp/err" "\-\-cubin is ignored on the CPU backend" "run --backend cpu warns about --cubin"
  expect_rc 2 "profile --trace --cubin refused" -- "$amk" profile "$sample" --trace "$tmp/t.json" --cubin "$tmp/vm.cubin"
  expect_grep "$tmp/err" "usage.profile.cubin" "profile --trace --cubin names the rule"
  expect_rc 2 "inspect --cubin needs --attributes" -- "$amk" inspect "$sample" --cubin "$tmp/vm.cubin"
  if [ "$gpus" -eq 0 ]; then  # the files are fine; the device is what is missing
    expect_rc 5 "run --cubin without a GPU" -- "$amk" run "$sample" --backend cuda --cubin "$tmp/vm.cubin"
  fi
fi
expect_rc 3 "compile refuses custom ops without trust" -- "$amk" compile "$root/tests/gpu/programs/hang.json" --arch sm_90a
# The gemv that waits inside the op compiles with the gemv preload at one batch (hang_gemv.json's
# watchdog runs on the GPU in scripts/gpu_check.sh); needs NVRTC.
if [ "$compile_rc" -eq 0 ]; then
  expect_rc 0 "hang_gemv compiles with the gemv preload at one batch" -- env \
    AMK_CACHE_DIR="$tmp/cache" "$amk" compile --trust-custom-ops "$root/tests/gpu/programs/hang_gemv.json" --arch sm_90a --vm gemv_preload=1
fi

# amk gen llama: the fused layer by default (no rmsnorm or silu_mul instructions: both inside the
# gemvs), --unfused / --rope-ops the unfused one; --fused with --rope-ops: exit 2.
ops_of() {  # ops_of PROGRAM OP -> count
  "$py" -c "import json,sys; print(sum(i['op'] == sys.argv[2] for i in json.load(open(sys.argv[1]))['instructions']))" "$1" "$2"
}
expect_rc 0 "gen llama (default layer)" -- "$amk" -q gen llama -o "$tmp/gl.json"
[ "$(ops_of "$tmp/gl.json" rmsnorm)" = 0 ] && [ "$(ops_of "$tmp/gl.json" silu_mul)" = 0 ] && pass=$((pass + 1)) ||
  { fail=$((fail + 1)); echo "FAIL gen llama default is not the fused layer"; }
for flag in --unfused --rope-ops; do
  expect_rc 0 "gen llama $flag" -- "$amk" -q gen llama $flag -o "$tmp/gu.json"
  [ "$(ops_of "$tmp/gu.json" rmsnorm)" = 5 ] && pass=$((pass + 1)) ||
    { fail=$((fail + 1)); echo "FAIL gen llama $flag is not the unfused layer (rmsnorm per layer twice + final)"; }
done
expect_rc 2 "gen llama --fused --unfused" -- "$amk" gen llama --fused --unfused -o "$tmp/gx.json"
expect_grep "$tmp/err" "exclude each other" "--fused --unfused named"
expect_rc 2 "gen llama --fused --rope-ops" -- "$amk" gen llama --fused --rope-ops -o "$tmp/gx.json"
expect_grep "$tmp/err" "at --rope-ops" "--fused --rope-ops names the flag"
[ ! -e "$tmp/gx.json" ] && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL refused gen wrote a program"; }
# --mlp-act bf16: the GLU output stored in bf16; only in the fused layer (exit 2 naming
# --mlp-act, nothing written).
expect_rc 0 "gen llama --mlp-act bf16" -- "$amk" -q gen llama --mlp-act bf16 -o "$tmp/gm.json"
grep -q '"name": *"act.L0.mlp", *"dtype": *"bf16"' "$tmp/gm.json" &&
  ! grep -q '"name": *"act.L0.mlp", *"dtype": *"bf16"' "$tmp/gl.json" &&
  pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL --mlp-act bf16 / the default MLP activation"; }
# --check holds the logits, which follow the bf16 activation's stores, to bf16's tolerance and
# says so; the default step keeps f32's.
expect_rc 0 "run --mlp-act bf16 step --check" -- "$amk" run "$tmp/gm.json" --backend cpu --check
expect_grep "$tmp/out" "check: every output matches the CPU reference (act.logits at 0.01: following bf16/f16 stores" "--check names the coarser tolerance"
expect_rc 0 "run default step --check" -- "$amk" run "$tmp/gl.json" --backend cpu --check
grep -q "^check: every output matches the CPU reference$" "$tmp/out" &&
  pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL the default step's --check is not at its dtype's tolerance"; }
expect_rc 2 "gen llama --mlp-act bf16 --unfused" -- "$amk" gen llama --mlp-act bf16 --unfused -o "$tmp/gms.json"
expect_grep "$tmp/err" "at --mlp-act" "--mlp-act with --unfused names the flag"
[ ! -e "$tmp/gms.json" ] && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL refused gen wrote a program"; }
# --combine steps: attention_combine instructions (tiny: 2 layers x 2 kv heads) where the default
# (oproj on tiny) has none, the same next token on the CPU; --combine oproj is refused on the
# unfused layer (exit 2 naming --combine, nothing written), and any other value too.
expect_rc 0 "gen llama --combine steps" -- "$amk" -q gen llama --combine steps -o "$tmp/gcs.json"
[ "$(ops_of "$tmp/gcs.json" attention_combine)" = 4 ] && [ "$(ops_of "$tmp/gl.json" attention_combine)" = 0 ] &&
  pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL --combine steps / the default merge"; }
expect_rc 0 "run --combine steps on the CPU" -- "$amk" -q run "$tmp/gcs.json" --backend cpu -o "$tmp/gcs_out"
expect_rc 0 "run the default layout on the CPU" -- "$amk" -q run "$tmp/gl.json" --backend cpu -o "$tmp/gl_out"
cmp -s "$tmp/gcs_out/next_token.npy" "$tmp/gl_out/next_token.npy" &&
  pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL --combine steps: not the default layout's next token"; }
expect_rc 2 "gen llama --unfused --combine oproj" -- "$amk" gen llama --unfused --combine oproj -o "$tmp/gcu.json"
expect_grep "$tmp/err" "at --combine: --combine oproj applies to the fused layer" "--unfused --combine oproj names the flag"
[ ! -e "$tmp/gcu.json" ] && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL refused gen wrote a program"; }
expect_rc 2 "gen llama --combine bogus" -- "$amk" gen llama --combine bogus -o "$tmp/gcb.json"
expect_grep "$tmp/err" "combine" "--combine bogus names the option"
# --attn-chunks N: N attention_decode instructions per kv head (tiny: 16 positions, so the default
# is 2 chunks of 8 and 1 asks for one of 16); 0 is refused (exit 2).
expect_rc 0 "gen llama --attn-chunks 1" -- "$amk" -q gen llama --attn-chunks 1 -o "$tmp/ga.json"
[ "$(ops_of "$tmp/ga.json" attention_decode)" -gt 0 ] &&
  [ "$(( $(ops_of "$tmp/ga.json" attention_decode) * 2 ))" = "$(ops_of "$tmp/gl.json" attention_decode)" ] &&
  pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL --attn-chunks 1 does not halve the tiny step's attention instructions"; }
expect_rc 2 "gen llama --attn-chunks 0" -- "$amk" gen llama --attn-chunks 0 -o "$tmp/gz.json"
expect_grep "$tmp/err" "attn-chunks" "--attn-chunks 0 names the option"
# Attention waits per kv head: counters L0.q.head0 ..., no layer-wide L0.q.
grep -q '"L0.q.head0"' "$tmp/gl.json" && ! grep -q '"L0.q"' "$tmp/gl.json" &&
  pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL attention counters are not per kv head"; }
# --source-out / --ptx-out: the generated translation unit and the VM's PTX (virtual
# architecture); a missing folder for one of them writes none of the requested files (exit 4).
if [ "$compile_rc" -eq 0 ]; then
  expect_rc 0 "compile --source-out --ptx-out" -- env AMK_CACHE_DIR="$tmp/cache" "$amk" compile "$sample" \
    --arch sm_90a --source-out "$tmp/vm.cu" --ptx-out "$tmp/vm.ptx"
  expect_grep "$tmp/vm.cu" 'c.gemv_ring_stages = 2u;' "generated source spells the config out"
  expect_grep "$tmp/vm.cu" 'o.ops = 0x' "generated source lists the ops"
  expect_grep "$tmp/vm.cu" '#include "amk_vm.cuh"' "generated source includes the VM"
  expect_grep "$tmp/vm.ptx" '^.target sm_90a' "PTX for the target's virtual architecture"
  expect_grep "$tmp/vm.ptx" '.entry amk_vm' "PTX holds the VM entry"
  rm -f "$tmp/vm2.cubin"
  expect_rc 4 "compile --ptx-out into a missing folder" -- env AMK_CACHE_DIR="$tmp/cache" "$amk" compile \
    "$sample" --arch sm_90a -o "$tmp/vm2.cubin" --ptx-out "$tmp/missing/vm.ptx"
  expect_grep "$tmp/err" "nothing was written" "missing folder named, nothing written"
  [ ! -e "$tmp/vm2.cubin" ] && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL cubin written despite the failed --ptx-out"; }
fi

# Without a GPU (CI), asking for one is a device error; auto falls back to the CPU.
if [ "$gpus" -eq 0 ]; then
  expect_rc 5 "cuda backend without a GPU" -- "$amk" run "$sample" --backend cuda
  expect_rc 0 "auto backend without a GPU" -- "$amk" run "$sample"
  expect_grep "$tmp/err" "CPU reference backend" "auto backend notice"
  expect_rc 5 "profile without a GPU" -- "$amk" profile "$sample" --events
fi

# The command line a newcomer expects.
# One spelling of the output: every command that writes a file or folder takes -o,--output
# (run's old --out still works, hidden).
for c in run compile convert profile bench "gen llama"; do
  expect_rc 0 "$c --help" -- "$amk" $c --help
  expect_grep "$tmp/out" "-o,--output" "$c takes -o,--output"
done
expect_rc 0 "run --out (old spelling)" -- "$amk" run "$sample" --backend cpu --out "$tmp/run_out"
[ -f "$tmp/run_out/manifest.json" ] && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL run --out wrote no outputs"; }
expect_rc 0 "run --output" -- "$amk" run "$sample" --backend cpu --output "$tmp/run_output"
[ -f "$tmp/run_output/report.json" ] && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL run --output wrote no report"; }
# run --passes (passes in one launch); --iterations is its deprecated name there and warns;
# profile's --iterations (timed launches) stays.
expect_rc 0 "run --passes" -- "$amk" run "$sample" --backend cpu --passes 3 -o "$tmp/passes"
[ ! -s "$tmp/err" ] && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL run --passes warned"; cat "$tmp/err"; }
expect_rc 0 "run --iterations (deprecated)" -- "$amk" run "$sample" --backend cpu --iterations 3 -o "$tmp/iterations"
expect_grep "$tmp/err" "^amk: warning: amk run --iterations is deprecated: use --passes" "run --iterations warns, naming --passes"
[ "$(wc -l < "$tmp/err")" -eq 1 ] && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL run --iterations: not a one-line warning"; }
cmp -s "$tmp/passes/out.npy" "$tmp/iterations/out.npy" && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL run --iterations is not --passes"; }
expect_rc 2 "run --passes with --iterations" -- "$amk" run "$sample" --backend cpu --passes 2 --iterations 2
expect_rc 0 "run --help" -- "$amk" run --help
expect_grep "$tmp/out" "--passes" "run --help lists --passes"
if grep -q -- "^ *--iterations\|^ *--out " "$tmp/out"; then fail=$((fail + 1)); echo "FAIL run --help lists a hidden alias"; else pass=$((pass + 1)); fi
expect_rc 0 "profile --help" -- "$amk" profile --help
grep -A1 -- "^ *--iterations" "$tmp/out" | grep -q "timed launches" && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL profile keeps --iterations (timed launches)"; }
# --timeout 0 would turn the watchdog off: refused by every command that takes it (exit 2).
for c in run profile bench; do
  expect_rc 2 "$c --timeout 0" -- "$amk" $c "$sample" --timeout 0
  expect_grep "$tmp/err" "at amk $c: --timeout: 0 would turn the watchdog off; give a deadline in milliseconds, 1..86400000" "$c --timeout 0 says why"
  expect_rc 2 "$c --timeout past a day" -- "$amk" $c "$sample" --timeout 86400001
  expect_grep "$tmp/err" "--timeout: expected a deadline in milliseconds, 1..86400000, got '86400001'" "$c --timeout range"
done
expect_rc 0 "run --timeout at a day" -- "$amk" run "$sample" --backend cpu --timeout 86400000
# --device on the CPU backend is ignored, and says so (also where auto falls back to the CPU).
expect_rc 0 "run --backend cpu --device 1" -- "$amk" run "$sample" --backend cpu --device 1
expect_grep "$tmp/err" "warning: --device 1 is ignored on the CPU backend" "--device on the CPU backend warns"
if [ "$gpus" -eq 0 ]; then
  expect_rc 0 "run --device 1, auto falling back to the CPU" -- "$amk" run "$sample" --device 1
  expect_grep "$tmp/err" "warning: --device 1 is ignored on the CPU backend, which auto falls back to" "--device with auto on the CPU warns"
fi
# A negative ordinal is no device anywhere: a usage error (exit 2) for every command taking one.
for c in run profile bench "inspect --attributes"; do
  expect_rc 2 "$c --device -1" -- "$amk" $c "$sample" --device -1
  expect_grep "$tmp/err" "--device: expected a CUDA device ordinal, 0 or more" "$c --device -1 says why"
done
# inspect --attributes and profile take --device, --cache-dir and --no-cache; on inspect they
# need --attributes.
for f in "--device 0" "--no-cache" "--cache-dir $tmp/c"; do
  expect_rc 2 "inspect $f without --attributes" -- "$amk" inspect "$sample" $f
  expect_grep "$tmp/err" "requires --attributes" "inspect $f names --attributes"
done
if [ "$gpus" -eq 0 ]; then
  expect_rc 5 "inspect --attributes --device --no-cache --cache-dir (no GPU)" -- "$amk" inspect "$sample" --attributes --device 0 --no-cache --cache-dir "$tmp/c"
  expect_rc 5 "profile --device --no-cache --cache-dir (no GPU)" -- "$amk" profile "$sample" --events --device 0 --no-cache --cache-dir "$tmp/c"
  # An ordinal past the devices: without a driver the missing driver is what refuses (exit 5).
  expect_rc 5 "run --backend cuda --device 7 (no GPU)" -- "$amk" run "$sample" --backend cuda --device 7
else
  # An ordinal the driver does not report: device.ordinal (exit 5), not a driver error.
  expect_rc 5 "run --device past the devices" -- "$amk" run "$sample" --backend cuda --device "$gpus"
  expect_grep "$tmp/err" "device.ordinal\] at --device: CUDA device $gpus does not exist" "a bad ordinal is device.ordinal"
  expect_rc 5 "profile --device past the devices" -- "$amk" profile "$sample" --events --device "$gpus"
  expect_grep "$tmp/err" "device.ordinal" "profile's bad ordinal is device.ordinal"
  expect_rc 0 "inspect --attributes --device 0 --no-cache --cache-dir" -- "$amk" inspect "$sample" --attributes --device 0 --no-cache --cache-dir "$tmp/c"
  expect_grep "$tmp/out" "blocks/SM" "inspect --attributes with --device"
fi
# An unknown command is named, with the list (exit 2).
expect_rc 2 "unknown command" -- "$amk" frobnicate
expect_grep "$tmp/err" "^amk: usage error \[usage.command\] at amk: unknown command 'frobnicate'; the commands are .*run.*bench" "unknown command named, commands listed"
[ "$(wc -l < "$tmp/err")" -eq 1 ] && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL unknown command: not one line"; }
expect_rc 2 "unknown command, --json" -- "$amk" --json frobnicate x.json
[ "$(json_field "$tmp/out" "j['error']['code'] + ' ' + str(j['error']['exit_code'])")" = "usage.command 2" ] && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL unknown command as JSON"; }
expect_rc 2 "unknown gen command" -- "$amk" gen frobnicate
expect_grep "$tmp/err" "at amk gen: unknown command 'frobnicate'; the commands are llama" "unknown gen command names llama"
# amk devices: zero devices is an answer (exit 0) with a notice saying why, not an error.
expect_rc 0 "devices" -- "$amk" devices
expect_rc 0 "devices --json" -- "$amk" --json devices
# NCCL, loaded at run time: a library that is not there, or not NCCL, is a notice, not an error.
expect_rc 0 "devices with no NCCL" -- env AMK_NCCL_LIBRARY="$tmp/libnccl.so.2" "$amk" --json devices
[ "$(json_field "$tmp/out" "str(j['nccl']['available']) + ' ' + str('$tmp/libnccl.so.2' in j['nccl']['notice'])")" = "False True" ] && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL devices: NCCL absent"; cat "$tmp/out"; }
expect_rc 0 "devices with a library that is not NCCL" -- env AMK_NCCL_LIBRARY=libm.so.6 "$amk" devices
expect_grep "$tmp/out" "NCCL not available: libm.so.6 lacks ncclGetVersion" "a library that is not NCCL said so"
expect_rc 0 "devices --json" -- "$amk" --json devices
if [ "$gpus" -eq 0 ]; then
  [ "$(json_field "$tmp/out" "str(j['devices']) + ' ' + str(len(j['notice']) > 0)")" = "[] True" ] && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL devices --json without a GPU"; cat "$tmp/out"; }
  expect_rc 0 "devices (text) without a GPU" -- "$amk" devices
  expect_grep "$tmp/out" "^no CUDA devices: " "devices says why there are none"
fi
# --json, -v and -q are every command's: given after the command, and in its help.
expect_rc 0 "run ... --json" -- "$amk" run "$sample" --backend cpu --json
[ "$(json_field "$tmp/out" "j['status']")" = ok ] && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL run --json after the command"; }
expect_rc 0 "validate ... -q" -- "$amk" validate "$sample" -q
[ ! -s "$tmp/out" ] && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL validate -q printed"; }
for c in run profile bench devices "gen llama"; do
  expect_rc 0 "$c --help" -- "$amk" $c --help
  for f in "--json" "-v,--verbose" "-q,--quiet"; do expect_grep "$tmp/out" "$f" "$c --help lists $f"; done
done
# -v: each phase as it starts and ends with its time.
expect_rc 0 "validate -v" -- "$amk" validate "$sample" -v
expect_grep "$tmp/err" "^amk: info: load \.\.\.$" "-v logs a phase's start"
expect_grep "$tmp/err" "^amk: info: verify done in [0-9.]* ms$" "-v logs a phase's end and time"
expect_rc 0 "validate (no -v)" -- "$amk" validate "$sample"
[ ! -s "$tmp/err" ] && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL phases logged without -v"; }
# profile and bench write report.json (-o DIR or --report PATH), also when they fail.
if [ "$gpus" -eq 0 ]; then
  expect_rc 5 "profile -o without a GPU" -- "$amk" profile "$sample" --events -o "$tmp/prof"
  [ "$(json_field "$tmp/prof/report.json" "' '.join([j['command'], j['status'], j['backend'], j['program']['name'], j['error']['code'].split('.')[0]])")" = "profile rejected cuda mlp_block device" ] && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL profile's report without a GPU"; }
  expect_rc 5 "bench --report without a GPU" -- "$amk" bench "$sample" --report "$tmp/bench/r.json"
  [ "$(json_field "$tmp/bench/r.json" "j['command'] + ' ' + j['status']")" = "bench rejected" ] && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL bench's report without a GPU"; }
else
  expect_rc 0 "profile -o" -- "$amk" profile "$sample" --events --iterations 5 -o "$tmp/prof"
  [ "$(json_field "$tmp/prof/report.json" "' '.join([j['command'], j['status'], j['backend'], str(j['extra']['median_ms'] > 0), str(j['launch']['grid'] > 0)])")" = "profile ok cuda True True" ] && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL profile's report"; }
  expect_rc 0 "bench --report" -- "$amk" bench "$sample" --min-time 0 --time-limit 1 --report "$tmp/bench/r.json"
  [ "$(json_field "$tmp/bench/r.json" "j['command'] + ' ' + j['status'] + ' ' + str(len(j['extra']['arms']))")" = "bench ok 3" ] && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL bench's report"; }
fi
if "$py" -c "import jsonschema" 2>/dev/null; then
  "$py" - "$root/schemas" "$tmp/prof/report.json" "$tmp/bench/r.json" <<'PY' && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL profile/bench report.json against the schema"; }
import json, sys, pathlib
import jsonschema
d = pathlib.Path(sys.argv[1])
schema = json.load(open(d / "report.schema.json"))
manifest = json.load(open(d / "manifest.schema.json"))
store = {schema["$id"]: schema, manifest.get("$id", "manifest.schema.json"): manifest}
resolver = jsonschema.RefResolver(base_uri=schema["$id"], referrer=schema, store=store)
for path in sys.argv[2:]:
    jsonschema.Draft202012Validator(schema, resolver=resolver).validate(json.load(open(path)))
PY
fi

# profile --cold flushes L2 before each timed launch: it needs --events (checked before any GPU).
expect_rc 2 "profile --cold without --events" -- "$amk" profile "$sample" --trace "$tmp/t.json" --cold
expect_grep "$tmp/err" "cold applies to --events" "profile --cold names what it needs"

# profile --tuning-arms: VM configurations compared in one process; its arms are parsed before
# anything is built or any GPU is asked for (usage errors, exit 2, naming the arm).
expect_rc 2 "profile --tuning-arms with --trace" -- "$amk" profile "$sample" --events --trace "$tmp/t.json" --tuning-arms "default;gemv_preload=1"
expect_grep "$tmp/err" "tuning-arms applies to --events alone" "--tuning-arms names what it needs"
expect_rc 2 "profile --rounds without --tuning-arms" -- "$amk" profile "$sample" --events --rounds 3
expect_grep "$tmp/err" "at --rounds: --rounds applies to --tuning-arms" "--rounds names what it needs"
# (The arms are parsed before any GPU is asked for, in every build.)
expect_rc 2 "profile --tuning-arms with a bad arm" -- "$amk" profile "$sample" --events --tuning-arms "default;gemv_preload=9"
expect_grep "$tmp/err" "at --tuning-arms arm 2: gemv_preload" "the bad arm is named by its number"
expect_rc 2 "profile --tuning-arms with one arm" -- "$amk" profile "$sample" --events --tuning-arms "default"
expect_grep "$tmp/err" "expected 2..16 arms" "one arm is refused"
expect_rc 2 "profile --tuning-arms empty" -- "$amk" profile "$sample" --events --tuning-arms ""
expect_grep "$tmp/err" "at --tuning-arms arm 1: an arm is empty" "an empty --tuning-arms is refused, not ignored"
if [ "$gpus" -eq 0 ]; then
  expect_rc 5 "profile --tuning-arms without a GPU" -- "$amk" profile "$sample" --events --tuning-arms "default;gemv_preload=1"
  # Without a GPU the GPU commands refuse before making any host data (a decode step's weights
  # take minutes): broken.json's missing data file is never reached (exit 5, not 4).
  expect_rc 5 "profile refuses before the data" -- "$amk" profile "$tmp/broken.json" --events
  expect_grep "$tmp/err" "\[device\." "profile's refusal is a device error"
  expect_rc 5 "bench refuses before the data" -- "$amk" bench "$tmp/broken.json"
  expect_rc 5 "run --backend cuda refuses before the data" -- "$amk" run "$tmp/broken.json" --backend cuda -o "$tmp/run_nodev"
  [ "$(json_field "$tmp/run_nodev.failed-report.json" "j['status'] + ' ' + j['backend'] + ' ' + str(j['program']['data_fingerprint'])")" = "rejected cuda None" ] && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL run --backend cuda refusal's report"; }
  expect_rc 5 "inspect --attributes refuses before the data" -- "$amk" inspect --attributes "$tmp/broken.json"
else
  # On a GPU: two arms, three rounds; each arm reports its rounds, the first arm is the unit.
  expect_rc 0 "profile --tuning-arms on the GPU" -- "$amk" --json profile "$sample" --events --iterations 5 --rounds 3 --tuning-arms "default;gemv_preload=0"
  cp "$tmp/out" "$tmp/arms.json"
  [ "$(json_field "$tmp/arms.json" "[len(j['arms']), j['arms'][0]['ratio_to_first'], len(j['arms'][1]['round_medians_ms']), len(j['arms'][1]['samples_ms']), j['arms'][1]['vm']]")" = "[2, 1.0, 3, 15, 'gemv_preload=0']" ] \
    && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL profile --tuning-arms JSON"; head -c 600 "$tmp/arms.json"; }
  [ "$(json_field "$tmp/arms.json" "j['arms'][0]['artifact_fingerprint'] != j['arms'][1]['artifact_fingerprint'] and all(a['median_ms'] > 0 for a in j['arms'])")" = True ] \
    && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL profile --tuning-arms: arms share a kernel or time nothing"; }
fi

# scripts/trace_phases.py: an unknown option is refused (exit 2), named.
expect_rc 2 "trace_phases.py --wram refused" -- "$py" "$root/scripts/trace_phases.py" t.json --wram
expect_grep "$tmp/err" "unknown option --wram" "trace_phases names the option"
# --chain=a,b on a hand-made trace of three layers: a ends 3 us after the previous layer's b
# (instructions ending at +1 and +3), b 5 us after a (+4, +5), c (off the chain) much later.
"$py" - "$tmp/chain.json" <<'PY'
import json, sys
ev, t = [], 0.0
for n in range(3):
    for name, ends in (("a", (1.0, 3.0)), ("b", (4.0, 5.0))):
        for i, d in enumerate(ends):
            ev.append({"name": f"gemv #{len(ev)} L{n}.{name}.{i}", "ph": "X", "tid": i, "ts": t, "dur": d, "args": {}})
        t += ends[-1]
    ev.append({"name": f"copy #{len(ev)} L{n}.c.0", "ph": "X", "tid": 5, "ts": t + 100.0, "dur": 1.0, "args": {}})
json.dump({"traceEvents": ev}, open(sys.argv[1], "w"))
PY
expect_rc 0 "trace_phases.py --chain" -- "$py" "$root/scripts/trace_phases.py" "$tmp/chain.json" --chain=a,b
expect_grep "$tmp/out" "^a  *2  *3.00  *1.00  *2.00$" "trace_phases --chain: a's step, first and median end"
expect_grep "$tmp/out" "^b  *2  *5.00  *4.00  *4.50$" "trace_phases --chain: b's step, first and median end"
expect_grep "$tmp/out" "^a layer  *2  *8.00$" "trace_phases --chain: a layer"
# The same with op marks: a's instructions' first marks 0.5 and 2.0 us after their starts (from
# the previous b's end: first 0.5, median 1.25; busy 0.5 and 1.0, mean 0.75); b unmarked.
"$py" - "$tmp/chain.json" "$tmp/chain_marks.json" <<'PY'
import json, sys
t = json.load(open(sys.argv[1]))
for e in t["traceEvents"]:
    if ".a." in e["name"]:
        mark = 0.5 if e["dur"] == 1.0 else 2.0
        e["args"] = {"loads_issued_us": mark, "first_batch_us": mark + 0.25}
json.dump(t, open(sys.argv[2], "w"))
PY
expect_rc 0 "trace_phases.py --chain with marks" -- "$py" "$root/scripts/trace_phases.py" "$tmp/chain_marks.json" --chain=a,b
expect_grep "$tmp/out" "^a  *2  *3.00  *1.00  *2.00  *0.50  *1.25  *0.75$" "trace_phases --chain: a's first and median mark, busy"
expect_grep "$tmp/out" "^b  *2  *5.00  *4.00  *4.50  *-  *-  *-$" "trace_phases --chain: b without marks"
expect_rc 2 "trace_phases.py --chain= refused" -- "$py" "$root/scripts/trace_phases.py" "$tmp/chain.json" --chain=
# A missing or malformed trace: one line naming the file, exit 1 (no traceback).
expect_rc 1 "trace_phases.py on a missing file" -- "$py" "$root/scripts/trace_phases.py" "$tmp/no_such_trace.json"
expect_grep "$tmp/err" "no_such_trace.json: not a readable" "trace_phases names the missing file"
echo '{"traceEvents": 3}' > "$tmp/bad_trace.json"
expect_rc 1 "trace_phases.py on a malformed trace" -- "$py" "$root/scripts/trace_phases.py" "$tmp/bad_trace.json"
# scripts/sass_loops.py on a hand-written `nvdisasm -c` excerpt: one inner loop of 2 FFMA, 1
# 128-bit load, 1 IMAD (3 instructions + the branch back), inside an outer loop; an empty listing
# and an unknown option are refused.
cat > "$tmp/k.sass" <<'SASS'
        /*0000*/                   MOV R1, c[0x0][0x28] ;
.L_x_1:
        /*0010*/                   IMAD.MOV.U32 R2, RZ, RZ, R3 ;
.L_x_2:
        /*0020*/                   LDG.E.128.CONSTANT R4, desc[UR4][R2.64] ;
        /*0030*/                   FFMA R8, R4, R5, R8 ;
        /*0040*/                   FFMA R9, R6, R7, R9 ;
        /*0050*/               @P0 BRA `(.L_x_2) ;
        /*0060*/                   IMAD R3, R3, 0x2, RZ ;
        /*0070*/               @P1 BRA `(.L_x_1) ;
        /*0080*/                   EXIT ;
SASS
expect_rc 0 "sass_loops.py lists the loops" -- "$py" "$root/scripts/sass_loops.py" "$tmp/k.sass" --min-ffma 2
expect_grep "$tmp/out" "9 instructions, LDL 0, STL 0" "sass_loops counts the listing"
expect_grep "$tmp/out" "^          2-5     4     2       1    0    0    0     0    0     0    0" "sass_loops: the inner loop's mix"
expect_grep "$tmp/out" "^          1-7     7     2       1    0    0    0     2    0     0    0" "sass_loops: the outer loop's mix"
expect_rc 0 "sass_loops.py --max-len" -- "$py" "$root/scripts/sass_loops.py" "$tmp/k.sass" --min-ffma 2 --max-len 4
if grep -q " 1-7 " "$tmp/out"; then fail=$((fail + 1)); echo "FAIL sass_loops --max-len kept the outer loop"; else pass=$((pass + 1)); fi
# ... and on PTX (`amk compile --ptx-out`): one loop of 2 fma, 1 16-byte global load, 1 mov.u32.
cat > "$tmp/k.ptx" <<'PTX'
.version 9.0
.target sm_90a
.visible .entry amk_vm(
	.param .align 16 .b8 amk_vm_param_0[160]
)
{
	.reg .b32 	%r<9>;
	mov.u32 	%r1, 0;
$L__BB0_1:
	ld.global.v4.u32 	{%r2, %r3, %r4, %r5}, [%rd1];
	fma.rn.f32 	%f1, %f2, %f3, %f1;
	fma.rn.f32 	%f4, %f5, %f6, %f4;
	mov.u32 	%r6, %r2;
	@%p1 bra 	$L__BB0_1;
	ret;
}
PTX
expect_rc 0 "sass_loops.py reads PTX" -- "$py" "$root/scripts/sass_loops.py" "$tmp/k.ptx" --min-ffma 2
expect_grep "$tmp/out" "7 instructions, LDL 0, STL 0" "sass_loops counts PTX instructions, not directives"
expect_grep "$tmp/out" "^          1-5     5     2       1    0    0    0     0    1     0    0" "sass_loops: the PTX loop's mix"
: > "$tmp/empty.sass"
expect_rc 3 "sass_loops.py refuses a listing without SASS" -- "$py" "$root/scripts/sass_loops.py" "$tmp/empty.sass"
expect_rc 2 "sass_loops.py --min-fma refused" -- "$py" "$root/scripts/sass_loops.py" "$tmp/k.sass" --min-fma 2
expect_grep "$tmp/err" "unknown option --min-fma" "sass_loops names the option"

# --save-inputs writes the initial contents, with and without --check, although the CPU backend
# runs in place (on a copy only when the initial data is still needed): mlp_block's h is written
# by the run and starts as zeros, and the run's outputs match across the two.
for flags in "" "--check"; do
  expect_rc 0 "run --save-inputs $flags" -- "$amk" run "$sample" --backend cpu --save-inputs $flags -o "$tmp/si${flags:+_check}"
done
"$np_py" - "$tmp/si" "$tmp/si_check" <<'PY' && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL --save-inputs: inputs are not the initial contents"; }
import sys, numpy as np
for d in sys.argv[1:]:
    h = np.load(f"{d}/inputs/h.npy")
    assert h.size > 0 and not h.any(), f"{d}: inputs/h.npy holds the run's values"
    assert np.load(f"{d}/inputs/x.npy").any(), f"{d}: inputs/x.npy is empty"
a, b = sys.argv[1:]
assert np.array_equal(np.load(f"{a}/out.npy"), np.load(f"{b}/out.npy"))
PY

echo "smoke: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
