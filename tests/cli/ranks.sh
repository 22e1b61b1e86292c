#!/usr/bin/env bash
# Programs with ranks (launch.ranks) on the CPU backend: all_reduce sums every rank's view, send /
# recv copy between ranks, each rank's outputs as NAME.rankR, per-rank inits; against numpy on
# fresh seeds. The refusals: a deadlock across ranks, an unmatched send, mismatched extents, a comm
# op in a program of one rank, a fault on one rank (named), the GPU backend, .amkb.
set -u
root="$(cd "$(dirname "$0")/../.." && pwd)"
amk="${AMK:?set AMK to the amk binary}"
. "$root/tests/cli/numpy_python.sh"
py="$(numpy_python)" || { echo "ranks: no python3 with numpy (set AMK_PYTHON)"; exit 1; }
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
. "$root/tests/cli/expect.sh"

seed=$(( RANDOM % 1000 ))
# Three ranks: h = 2 x on each, all_reduce(h); rank 0 sends x to rank 2, rank 2 sends its h back
# to rank 1 after the reduce; queues of their own (as amk schedules) or none.
write_program() {  # write_program FILE QUEUES(0|1)
  "$py" - "$1" "$seed" "$2" <<'PY'
import json, sys
path, seed, queues = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1"
p = {"format": "amk.program", "version": 1, "name": "three_ranks",
     "launch": {"ranks": 3},
     "buffers": [
         {"name": "x", "dtype": "f32", "shape": [300],
          "init": [{"kind": "random", "seed": seed + r, "distribution": "normal", "mean": 0, "std": 1}
                   for r in range(3)]},
         {"name": "h", "dtype": "f32", "shape": [300], "output": True},
         {"name": "got", "dtype": "f32", "shape": [300], "output": True},
         {"name": "back", "dtype": "f32", "shape": [100], "output": True}],
     "counters": ["scaled", "reduced"],
     "instructions": [
         {"name": "double", "op": "scale", "operands": {"x": "x", "y": "h"}, "params": {"alpha": 2},
          "signals": [{"counter": "scaled"}]},
         {"name": "sum", "op": "all_reduce", "operands": {"x": "h"},
          "waits": [{"counter": "scaled", "value": 1}], "signals": [{"counter": "reduced"}]},
         {"name": "to2", "op": "send", "operands": {"x": "x"}, "params": {"peer": 2}, "ranks": [0]},
         {"name": "from0", "op": "recv", "operands": {"y": "got"}, "params": {"peer": 0}, "ranks": [2]},
         {"name": "h_to1", "op": "send", "operands": {"x": {"buffer": "h", "offset": 200, "extent": 100}},
          "params": {"peer": 1}, "ranks": [2], "waits": [{"counter": "reduced", "value": 1}]},
         {"name": "h_from2", "op": "recv", "operands": {"y": "back"}, "params": {"peer": 2}, "ranks": [1]}]}
if queues:
    p["queues"] = [["double", "sum", "to2", "from0"], ["h_to1", "h_from2"]]
json.dump(p, open(path, "w"), indent=1)
PY
}

check_outputs() {  # check_outputs DIR DESCRIPTION
  expect_rc 0 "$2: outputs against numpy" -- "$py" - "$1" <<'PY'
import numpy as np, sys
d = sys.argv[1]
x = [np.load(f"{d}/inputs/x.rank{r}.npy").astype(np.float64) for r in range(3)]
want = sum(2 * xr for xr in x)
for r in range(3):
    h = np.load(f"{d}/h.rank{r}.npy")
    assert np.abs(h - want).max() <= 1e-5 * np.abs(want).max(), f"h.rank{r}"
assert np.array_equal(np.load(f"{d}/got.rank2.npy"), x[0].astype(np.float32)), "got.rank2"
assert np.array_equal(np.load(f"{d}/back.rank1.npy"), np.load(f"{d}/h.rank2.npy")[200:]), "back.rank1"
assert not np.array_equal(x[0], x[1]), "per-rank inits differ"
PY
}

for q in 0 1; do
  write_program "$tmp/p$q.json" "$q"
  expect_rc 0 "three ranks (queues $q) run on the CPU" -- "$amk" run "$tmp/p$q.json" --backend cpu \
    --save-inputs -o "$tmp/out$q"
  expect_grep "$tmp/out" "h.rank2 f32\[300\]" "each rank's outputs named NAME.rankR"
  check_outputs "$tmp/out$q" "three ranks, queues $q (seed $seed)"
done
expect_rc 0 "auto backend takes the CPU for ranks" -- "$amk" run "$tmp/p0.json" -o "$tmp/auto"
expect_rc 0 "validate a program with ranks" -- "$amk" validate "$tmp/p1.json"
expect_rc 0 "inspect a program with ranks" -- "$amk" inspect "$tmp/p1.json"
expect_grep "$tmp/out" "^ranks  *3, run on the CPU backend as one program of 19 instructions" \
  "inspect says the ranks and plans the expansion"
expect_rc 0 "convert to JSON keeps the ranks" -- "$amk" convert "$tmp/p1.json" -o "$tmp/c.json"
expect_rc 0 "the converted program runs alike" -- "$amk" run "$tmp/c.json" --backend cpu -o "$tmp/outc"
expect_rc 0 "same outputs after the round trip" -- cmp "$tmp/out1/h.rank1.npy" "$tmp/outc/h.rank1.npy"

# edit FILE OUT PYTHON: a variant of the program (j: its JSON).
edit() {
  "$py" -c "import json,sys; j=json.load(open(sys.argv[1])); $3; json.dump(j,open(sys.argv[2],'w'))" "$1" "$2"
}
# Each rank receives before it sends, both sends waiting for their own rank's recv: a cycle.
edit "$tmp/p0.json" "$tmp/dead.json" "j['counters'] += ['r0', 'r2']
ins = {i['name']: i for i in j['instructions']}
ins['to2']['waits'] = [{'counter': 'r0', 'value': 1}]
ins['from0']['signals'] = [{'counter': 'r2'}]
ins['h_to1']['waits'] = [{'counter': 'r2', 'value': 1}]
ins['h_to1']['params']['peer'] = 0; ins['h_to1']['operands']['x'] = 'x'
ins['h_from2']['ranks'] = [0]; ins['h_from2']['operands']['y'] = 'got'
ins['h_from2']['signals'] = [{'counter': 'r0'}]"
expect_rc 3 "a deadlock across ranks" -- "$amk" validate "$tmp/dead.json"
expect_grep "$tmp/err" "verify.deadlock" "the cycle across ranks is a deadlock"
expect_grep "$tmp/err" "on rank" "the deadlock names the rank"
# refused NAME EDIT PATTERN WHAT: the program edited by EDIT fails validate (exit 3) with PATTERN.
refused() {
  edit "$tmp/p0.json" "$tmp/$1.json" "$2"
  expect_rc 3 "$4" -- "$amk" validate "$tmp/$1.json"
  expect_grep "$tmp/err" "$3" "$4: the error and its place"
}
refused unmatched "j['instructions'] = [i for i in j['instructions'] if i['name'] != 'from0']" \
  "\[verify.ranks\] at /instructions/2:.*no matching recv" "a send without its recv"
refused extent "j['instructions'][3]['operands']['y'] = {'buffer': 'got', 'offset': 0, 'extent': 10}" \
  "\[verify.ranks\] at /instructions/3" "a recv of another extent"
refused self "j['instructions'][2]['params']['peer'] = 0" \
  "\[verify.ranks\] at /instructions/2/params/peer" "a send to its own rank"
refused one "j['launch']['ranks'] = 1; j['buffers'][0]['init'] = j['buffers'][0]['init'][0]
j['instructions'] = j['instructions'][:2]" \
  "\[verify.ranks\] at /instructions/1/op" "all_reduce in a program of one rank"
refused inits "j['buffers'][0]['init'] = j['buffers'][0]['init'][:2]" \
  "\[buffer.init\] at /buffers/0/init" "two inits for three ranks"
refused rank9 "j['instructions'][2]['ranks'] = [9]" \
  "\[instruction.ranks\] at /instructions/2/ranks/0" "an instruction on a rank the program lacks"
# A fault on one rank names the instruction and the rank; nothing is written.
cat > "$tmp/emb.json" <<'EOF'
{"format": "amk.program", "version": 1, "name": "bad_id", "launch": {"ranks": 2},
 "buffers": [
  {"name": "table", "dtype": "f32", "shape": [4, 8], "init": {"kind": "random", "seed": 3}},
  {"name": "ids", "dtype": "i32", "shape": [1],
   "init": [{"kind": "values", "values": [1]}, {"kind": "values", "values": [9]}]},
  {"name": "y", "dtype": "f32", "shape": [8], "output": true}],
 "counters": [],
 "instructions": [{"name": "lookup", "op": "embedding", "operands": {"table": "table", "ids": "ids", "y": "y"}}]}
EOF
expect_rc 3 "an id out of range on rank 1" -- "$amk" run "$tmp/emb.json" --backend cpu -o "$tmp/emb"
expect_grep "$tmp/err" "\[run.embedding.id\] at /instructions/0: .*(on rank 1)" "the fault names its rank"
[ -e "$tmp/emb" ] && { fail=$((fail + 1)); echo "FAIL the failed run wrote outputs"; } || pass=$((pass + 1))
expect_rc 5 "the GPU backend" -- "$amk" run "$tmp/p0.json" --backend cuda -o "$tmp/gpu"
expect_grep "$tmp/err" "\[device.ranks\] at /launch/ranks" "GPU refusal names launch.ranks"
[ -e "$tmp/gpu" ] && { fail=$((fail + 1)); echo "FAIL the refused run wrote outputs"; } || pass=$((pass + 1))
expect_rc 3 ".amkb of a program with ranks" -- "$amk" convert "$tmp/p0.json" -o "$tmp/p.amkb"
expect_grep "$tmp/err" "/launch/ranks" ".amkb refusal names launch.ranks"


# amk gen llama --tp: the tiny model split over ranks equals the single-rank program on the same
# seeded weights (rank 0's logits, gathered from every rank's share, and its next token; each
# rank's own share), fused and unfused, the weights random or read as windows of a file;
# generation: rank 0's ids equal the single rank's, and amk generate stops both at the same eos.
same_logits() {  # same_logits ONE_DIR TP_DIR RANKS DESCRIPTION
  expect_rc 0 "$4" -- "$py" - "$1" "$2" "$3" <<'PY'
import numpy as np, sys
one, tp, ranks = sys.argv[1], sys.argv[2], int(sys.argv[3])
want = np.load(f"{one}/act.logits.npy").astype(np.float64)
share = len(want) // ranks
def error(got, ref): return np.abs(got - ref).max() / np.abs(want).max()
got = np.load(f"{tp}/act.logits.rank0.npy").astype(np.float64)
assert error(got, want) <= 1e-5, f"rank 0's logits: normalized error {error(got, want):.3g}"
assert np.array_equal(np.load(f"{tp}/next_token.rank0.npy"), np.load(f"{one}/next_token.npy"))
for r in range(1, ranks):
    got = np.load(f"{tp}/act.logits.rank{r}.npy").astype(np.float64)[r * share:(r + 1) * share]
    assert error(got, want[r * share:(r + 1) * share]) <= 1e-5, f"rank {r}'s share"
PY
}
for lay in "" "--unfused"; do
  gs=$(( seed + 1 ))
  "$amk" -q gen llama --preset tiny --seed $gs $lay -o "$tmp/llama1.json"
  "$amk" -q gen llama --preset tiny --seed $gs $lay --tp 2 -o "$tmp/llama2.json"
  expect_rc 0 "tiny --tp 2 ${lay:-fused} runs on the CPU" -- "$amk" run "$tmp/llama2.json" -o "$tmp/l2"
  expect_rc 0 "tiny ${lay:-fused} on one rank" -- "$amk" run "$tmp/llama1.json" --backend cpu -o "$tmp/l1"
  same_logits "$tmp/l1" "$tmp/l2" 2 "tiny --tp 2 ${lay:-fused} equals one rank (seed $gs)"
done
expect_grep "$tmp/llama2.json" '"all_reduce"' "the tensor-parallel program all-reduces"
expect_rc 0 "inspect a tensor-parallel program" -- "$amk" inspect "$tmp/llama2.json"
expect_grep "$tmp/out" "q_proj.weight  bf16\[64, 128\] .*init random, each rank's block of \[128, 128\]" \
  "inspect names each rank's block of the whole tensor"
"$amk" -q gen llama --preset tiny --layers 1 --tp 2 --write-weights "$tmp/w.safetensors" -o "$tmp/w2.json"
"$amk" -q gen llama --preset tiny --layers 1 --weights "$tmp/w.safetensors" -o "$tmp/w1.json"
"$amk" -q gen llama --preset tiny --layers 1 --tp 2 --weights "$tmp/w.safetensors" -o "$tmp/w2r.json"
expect_grep "$tmp/w2r.json" '"window"' "the ranks read windows of the file's tensors"
for f in w1 w2 w2r; do "$amk" -q run "$tmp/$f.json" --backend cpu -o "$tmp/o_$f"; done
same_logits "$tmp/o_w1" "$tmp/o_w2" 2 "--tp 2 --write-weights writes the whole tensors"
same_logits "$tmp/o_w1" "$tmp/o_w2r" 2 "--tp 2 --weights reads the ranks' blocks of them"
"$amk" -q gen llama --preset tiny --seed 3 --steps 6 --prompt 3,5,7 -o "$tmp/g1.json"
"$amk" -q gen llama --preset tiny --seed 3 --steps 6 --prompt 3,5,7 --tp 2 -o "$tmp/g2.json"
for f in g1 g2; do "$amk" --json generate "$tmp/$f.json" --backend cpu > "$tmp/$f.out"; done
ids=$(json_field "$tmp/g1.out" "j['ids']")
expect_rc 0 "generation --tp 2: rank 0's ids equal one rank's" -- \
  test "$(json_field "$tmp/g2.out" "j['ids']")" = "$ids"
eos=$(json_field "$tmp/g1.out" "j['ids'][2]")
for f in g1 g2; do "$amk" --json generate "$tmp/$f.json" --backend cpu --eos "$eos" > "$tmp/$f.eos"; done
expect_rc 0 "generation --tp 2 stops at the eos where one rank does" -- \
  test "$(json_field "$tmp/g2.eos" "j['ids'], j['steps']")" = "$(json_field "$tmp/g1.eos" "j['ids'], j['steps']")"
expect_rc 0 "... the ids end at its first eos" -- test "$(json_field "$tmp/g1.eos" "j['ids']")" = \
  "$("$py" -c "ids = $ids; print(ids[:ids.index($eos) + 1])")"
expect_rc 2 "--tp 3 over 4 heads" -- "$amk" gen llama --preset tiny --tp 3 -o "$tmp/t3.json"
expect_grep "$tmp/err" "\[usage.gen.tp\] at --tp: .*num_attention_heads (4)" "the refusal names the config key"
expect_rc 3 "--tp 2 into .amkb" -- "$amk" gen llama --preset tiny --tp 2 -o "$tmp/t2.amkb"
expect_grep "$tmp/err" "/launch/ranks" ".amkb refusal of --tp names launch.ranks"

echo "ranks: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
