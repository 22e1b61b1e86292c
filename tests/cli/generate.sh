#!/usr/bin/env bash
# Generation in one launch: `amk gen llama --steps N --prompt IDS` on the CPU backend equals
# scripts/check_llama.py's numpy greedy loop (every step's logits, the ids), also from a
# sharded Hugging Face folder; `amk generate` runs a program or writes one and prints the ids;
# an eos id ends the launch; the refusals with their codes and exit codes.
set -u
root="$(cd "$(dirname "$0")/../.." && pwd)"
amk="${AMK:?set AMK to the amk binary}"
. "$root/tests/cli/numpy_python.sh"
py="$(numpy_python)" || { echo "generate: no python3 with numpy (set AMK_PYTHON)"; exit 1; }
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
. "$root/tests/cli/expect.sh"

seed=$(( RANDOM % 1000 ))
check() {  # check DESCRIPTION -- check_llama.py arguments...
  local what="$1"
  shift 2
  expect_rc 0 "numpy greedy loop: $what (seed $seed)" -- "$py" "$root/scripts/check_llama.py" \
    --amk "$amk" --backend cpu --seed "$seed" "$@"
}
check "prompt 3 + 6 new" -- --steps 6 --prompt 3,5,7
check "one token + 4 new, 3 layers" -- --steps 4 --layers 3
check "prompt 9 + 2 new, attention in chunks of 8" -- --steps 2 --prompt 1,2,3,4,5,6,7,8,9 --attn-chunks 2
check "prompt 11 + 3 new, 3 chunks a kv head, combine steps" -- --steps 3 \
  --prompt 1,2,3,4,5,6,7,8,9,10,11 --attn-chunks 3 --combine steps
# 301 positions, one chunk a query head: past the large tile's 256 rows.
long_prompt=$(awk 'BEGIN { for (i = 0; i < 300; i++) printf "%s%d", (i ? "," : ""), (i * 31 + 7) % 512 }')
check "prompt 300 + 3 new, one chunk a query head past the tile's rows" -- --steps 3 \
  --prompt "$long_prompt" --attn-chunks 1 --combine oproj
check "sharded HF folder" -- --from --shards 2 --steps 3 --prompt 11,12
check "f32 KV caches" -- --steps 5 --prompt 2,4 --kv-dtype f32

# amk generate: writes and runs a program; the same ids from the program file.
expect_rc 0 "amk generate --steps" -- "$amk" --json generate --steps 5 --prompt 3,5,7 \
  --seed "$seed" --backend cpu
cp "$tmp/out" "$tmp/gen.json"
ids=$(json_field "$tmp/gen.json" "' '.join(map(str, j['ids']))")
expect_grep "$tmp/gen.json" '"new_tokens": 5' "amk generate: 5 new tokens"
expect_grep "$tmp/gen.json" '"steps": 7' "amk generate: 7 decode steps (prompt 3 + 5 - 1)"
"$amk" -q gen llama --steps 5 --prompt 3,5,7 --seed "$seed" -o "$tmp/p.json"
expect_rc 0 "amk generate PROGRAM" -- "$amk" generate "$tmp/p.json" --backend cpu -o "$tmp/o"
expect_grep "$tmp/out" "^$ids\$" "the program's ids are the written program's"
# --eos ends the launch one step after the first eos: the ids are those up to it, and the
# launch ran prompt 3 + that many - 1 steps, + 1 (the step every block needs to see the stop).
eos=$(echo "$ids" | cut -d' ' -f2)
first=$(echo "$ids" | tr ' ' '\n' | grep -n -x -m1 -- "$eos" | cut -d: -f1)
want_ids=$(echo "$ids" | cut -d' ' -f1-"$first")
want_steps=$(( first + 3 > 7 ? 7 : first + 3 ))
eos_run() {  # eos_run DESCRIPTION -- amk generate arguments
  local what="$1"; shift 2
  expect_rc 0 "$what" -- "$amk" --json generate "$@" --backend cpu -o "$tmp/eo"
  local got
  got=$(json_field "$tmp/out" "' '.join(map(str, j['ids'])), j['steps'], j['stopped_at_eos'], j['new_tokens']")
  if [ "$got" = "$want_ids $want_steps True $first" ]; then pass=$((pass + 1)); else
    fail=$((fail + 1)); echo "FAIL $what: $got, want $want_ids $want_steps True $first"; fi
  expect_grep "$tmp/eo/report.json" "\"passes_run\": $want_steps" "$what: report.json launch.passes_run"
}
eos_run "amk generate PROGRAM --eos" -- "$tmp/p.json" --eos "$eos"
eos_run "amk generate --eos (writes the program)" -- --steps 5 --prompt 3,5,7 --seed "$seed" --eos "$eos"
"$amk" -q gen llama --steps 5 --prompt 3,5,7 --seed "$seed" --eos "$eos" -o "$tmp/pe.json"
eos_run "amk gen llama --eos: the program's own eos" -- "$tmp/pe.json"
expect_rc 0 "--check of a launch that ends at eos" -- "$amk" run "$tmp/pe.json" --backend cpu --check \
  -o "$tmp/pe_out"
expect_grep "$tmp/out" "^passes: $want_steps of 7 ran (feed_token generated its eos id in pass $((want_steps - 1)))" \
  "amk run says where the launch ended"
# It ran exactly want_steps passes: its last logits are those of that many passes without eos.
expect_rc 0 "the same passes without eos" -- "$amk" run "$tmp/p.json" --backend cpu \
  --passes "$want_steps" -o "$tmp/p_cut"
expect_rc 0 "the last logits of both" -- cmp "$tmp/pe_out/act.logits.npy" "$tmp/p_cut/act.logits.npy"
# An eos that never comes: every step runs.
expect_rc 0 "amk generate --eos never generated" -- "$amk" --json generate "$tmp/p.json" \
  --backend cpu --eos 511
expect_grep "$tmp/out" '"steps": 7' "an eos never generated: 7 decode steps"
expect_rc 0 "amk run of a generation takes its passes" -- "$amk" --json run "$tmp/p.json" \
  --backend cpu -o "$tmp/r"
expect_grep "$tmp/r/report.json" '"passes": 7' "report.json launch.passes"

# Refusals, before anything runs.
expect_rc 2 "generate with a program and --steps" -- "$amk" generate "$tmp/p.json" --steps 3
expect_grep "$tmp/err" "\[usage.generate.program\] at --steps" "program and --steps"
expect_rc 2 "generate without a program or --steps" -- "$amk" generate --backend cpu
expect_grep "$tmp/err" "\[usage.generate.program\]" "nothing to generate"
"$amk" -q gen llama -o "$tmp/one.json"
expect_rc 3 "generate a program without ids" -- "$amk" generate "$tmp/one.json" --backend cpu
expect_grep "$tmp/err" "\[generate.program\] at /buffers" "a decode step is not a generation"
expect_rc 2 "prompt id outside the vocabulary" -- "$amk" gen llama --steps 2 --prompt 1,512 -o "$tmp/x.json"
expect_grep "$tmp/err" "\[usage.gen.prompt\] at --prompt: prompt element 1: id 512" "prompt id located"
printf '[1, 2,\n oops]' > "$tmp/prompt.txt"
expect_rc 2 "prompt file with a non-id" -- "$amk" gen llama --steps 2 --prompt "$tmp/prompt.txt" -o "$tmp/x.json"
expect_grep "$tmp/err" "\[usage.gen.prompt\] at $tmp/prompt.txt: prompt element 2 is 'oops'" "prompt file located"
expect_rc 2 "a prompt file that is not there" -- "$amk" gen llama --steps 2 --prompt "$tmp/nope.txt" -o "$tmp/x.json"
expect_grep "$tmp/err" "is '$tmp/nope.txt', not a token id .*; nor is it a file of ids" "a missing prompt file said so"
printf '4 5\n6' > "$tmp/prompt.txt"
expect_rc 0 "prompt file of ids" -- "$amk" --json gen llama --steps 2 --prompt "$tmp/prompt.txt" -o "$tmp/x.json"
expect_grep "$tmp/out" '"prompt_tokens": 3' "prompt file read"
expect_rc 2 "prompt + steps past --context" -- "$amk" gen llama --steps 10 --prompt 1,2 --context 8 -o "$tmp/x.json"
expect_grep "$tmp/err" "\[usage.gen.context\] at --context: a prompt of 2 and 10 steps need a cache of 11" "cache too short"
expect_rc 2 "generation of the unfused layer" -- "$amk" gen llama --steps 2 --unfused -o "$tmp/x.json"
expect_grep "$tmp/err" "\[usage.gen.layout\] at --steps" "unfused refused"
expect_rc 2 "--all-logits without --steps" -- "$amk" gen llama --all-logits -o "$tmp/x.json"
expect_grep "$tmp/err" "\[usage.gen.steps\] at --all-logits" "--all-logits alone"
expect_rc 2 "--eos outside the vocabulary" -- "$amk" gen llama --steps 2 --eos 512 -o "$tmp/x.json"
expect_grep "$tmp/err" "\[usage.gen.eos\] at --eos: eos id 512 is outside the vocabulary 0..511" "--eos range"
expect_rc 2 "generate PROGRAM --eos outside the vocabulary" -- "$amk" generate "$tmp/p.json" --eos 600 --backend cpu
expect_grep "$tmp/err" "\[usage.generate.eos\] at --eos: eos id 600 is outside the vocabulary 0..511" "generate --eos range"
"$py" -c "import json,sys; j=json.load(open(sys.argv[1])); j['buffers']=[b for b in j['buffers'] if b['name']!='eos']
[i['operands'].pop('eos', None) for i in j['instructions']]; json.dump(j,open(sys.argv[2],'w'))" \
  "$tmp/p.json" "$tmp/noeos.json"
expect_rc 3 "--eos for a program without an eos input" -- "$amk" generate "$tmp/noeos.json" --eos 3 --backend cpu
expect_grep "$tmp/err" "\[generate.eos\] at /buffers" "no eos input"
# A program whose positions pass its cache: launch.passes raised by hand.
"$py" -c "import json,sys; j=json.load(open(sys.argv[1])); j['launch']['passes']=8; json.dump(j,open(sys.argv[2],'w'))" \
  "$tmp/p.json" "$tmp/long.json"
expect_rc 3 "positions past max_len" -- "$amk" validate "$tmp/long.json"
expect_grep "$tmp/err" "verify.position.range" "positions past the cache refused"
expect_rc 3 "amk run --passes past max_len" -- "$amk" run "$tmp/p.json" --backend cpu --passes 8
expect_grep "$tmp/err" "verify.position.range" "--passes past the cache refused"

echo "generate: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
