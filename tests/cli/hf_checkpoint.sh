#!/usr/bin/env bash
# amk gen llama --from DIR: small Hugging Face checkpoint folders (one file, shards, tied
# embeddings) written by scripts/check_llama.py, whose decode step on the CPU backend matches
# its numpy forward pass; then the command line's refusals with their codes and exit codes.
set -u
root="$(cd "$(dirname "$0")/../.." && pwd)"
amk="${AMK:?set AMK to the amk binary}"
. "$root/tests/cli/numpy_python.sh"
py="$(numpy_python)" || { echo "hf_checkpoint: no python3 with numpy (set AMK_PYTHON)"; exit 1; }
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
. "$root/tests/cli/expect.sh"


# The decode step against numpy: one file, three shards, tied + sharded, the unfused layer.
check() {  # check DESCRIPTION -- check_llama.py arguments...
  local what="$1"
  shift 2
  expect_rc 0 "numpy check: $what" -- "$py" "$root/scripts/check_llama.py" --amk "$amk" \
    --backend cpu --from "$@"
}
check "model.safetensors" --
check "3 shards" -- --shards 3 --keep "$tmp/w"
check "tied, 2 shards" -- --tied --shards 2 --context 40 --token 5
check "unfused layer" -- --unfused --context 17

# Refusals, on the folder check_llama.py kept (hf/: config.json and three shards).
ck="$tmp/w/hf"
expect_rc 2 "--from with --preset" -- "$amk" gen llama --from "$ck" --preset tiny -o "$tmp/p.json"
expect_grep "$tmp/err" "\[usage.gen.from\] at --preset" "--from with --preset names both"
expect_rc 2 "--from with --weights" -- "$amk" gen llama --from "$ck" --weights x.safetensors -o "$tmp/p.json"
expect_grep "$tmp/err" "\[usage.gen.from\] at --weights" "--from with --weights names both"
expect_rc 2 "context past max_position_embeddings" -- "$amk" gen llama --from "$ck" --context 257 -o "$tmp/p.json"
expect_grep "$tmp/err" "\[usage.gen.context\] at --context: .*max_position_embeddings" "context bound named"
expect_rc 2 "shards outside the program's folder" -- "$amk" gen llama --from "$ck" -o "$tmp/sub/p.json"
expect_grep "$tmp/err" "\[usage.gen.path\]" "outside needs --allow-outside"
mkdir -p "$tmp/sub"
expect_rc 0 "--allow-outside" -- "$amk" -q gen llama --from "$ck" --allow-outside -o "$tmp/sub/p.json"
expect_rc 0 "run with --allow-outside" -- "$amk" -q run "$tmp/sub/p.json" --allow-outside --backend cpu -o "$tmp/sub/out"

sed 's/"mlp_bias": false/"mlp_bias": true/' "$ck/config.json" > "$tmp/c" && cp "$tmp/c" "$ck/config.json"
expect_rc 3 "mlp_bias true" -- "$amk" gen llama --from "$ck" -o "$tmp/p.json"
expect_grep "$tmp/err" "\[gen.config.unsupported\] at $ck/config.json:/mlp_bias" "mlp_bias refused at its key"
sed 's/"mlp_bias": true/"mlp_bias": false/; s/"hidden_size": 64/"hidden_size": "64"/' "$ck/config.json" > "$tmp/c" && cp "$tmp/c" "$ck/config.json"
expect_rc 3 "hidden_size a string" -- "$amk" --json gen llama --from "$ck" -o "$tmp/p.json"
expect_grep "$tmp/out" "\"code\": \"gen.config.type\"" "--json: the type error's code"
expect_grep "$tmp/out" "\"where\": \"$ck/config.json:/hidden_size\"" "--json: the type error's key"
sed 's/"hidden_size": "64"/"hidden_size": 64/' "$ck/config.json" > "$tmp/c" && cp "$tmp/c" "$ck/config.json"
rm "$ck/model-00002-of-00003.safetensors"
expect_rc 4 "a shard missing" -- "$amk" gen llama --from "$ck" -o "$ck/p.json"
expect_grep "$tmp/err" "\[io.missing\] at $ck/model-00002-of-00003.safetensors" "the missing shard named"
[ ! -e "$ck/p.json" ] && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL a refused --from wrote a program"; }

echo "hf_checkpoint: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
