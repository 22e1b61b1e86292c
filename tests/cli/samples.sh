#!/usr/bin/env bash
# Every sample: validate, run on the CPU backend and compare with numpy (scripts/check_samples.py),
# and round-trip through the binary encoding (JSON -> .amkb -> JSON is the same canonical text,
# and the .amkb runs to byte-identical outputs).
set -u
root="$(cd "$(dirname "$0")/../.." && pwd)"
amk="${AMK:?set AMK to the amk binary}"
. "$root/tests/cli/numpy_python.sh"
py="$(numpy_python)"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp" "$root"/samples/.roundtrip_*' EXIT
pass=0
fail=0
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL $*"; }

for s in "$root"/samples/*.json; do
  n="$(basename "$s" .json)"
  "$amk" -q validate "$s" && ok || bad "$n: validate"
  # Round trip. Every copy is written next to the samples' data, so its data paths stay as they
  # are (convert rewrites them for another folder).
  rt="$root/samples/.roundtrip_$n"
  amkb="$rt.amkb"
  if "$amk" -q convert "$s" -o "$rt.canon.json" &&
     "$amk" -q convert "$s" -o "$amkb" &&
     "$amk" -q convert "$amkb" -o "$rt.back.json" &&
     cmp -s "$rt.canon.json" "$rt.back.json"; then ok; else bad "$n: JSON -> amkb -> JSON differs"; fi
  rm -f "$rt.canon.json" "$rt.back.json"
  if "$amk" -q run "$s" --backend cpu -o "$tmp/$n.json.out" &&
     "$amk" -q run "$amkb" --backend cpu -o "$tmp/$n.amkb.out"; then
    same=1
    for f in "$tmp/$n.json.out"/*.npy; do
      cmp -s "$f" "$tmp/$n.amkb.out/$(basename "$f")" || same=0
    done
    [ "$same" = 1 ] && ok || bad "$n: .amkb run differs from the JSON run"
  else
    bad "$n: run"
  fi
  rm -f "$amkb"
done

if [ -n "$py" ]; then
  if "$py" "$root/scripts/check_samples.py" --amk "$amk" --backend cpu; then ok; else bad "numpy reference check"; fi
else
  bad "numpy reference check: a python3 with numpy is required (scripts/setup.sh installs it)"
fi
# The tiny Llama decode step (amk gen llama) against an independent numpy forward pass.
if [ -n "$py" ]; then
  if "$py" "$root/scripts/check_llama.py" --amk "$amk" --backend cpu; then ok; else bad "llama tiny (default: fused layer) vs numpy"; fi
  if "$py" "$root/scripts/check_llama.py" --amk "$amk" --backend cpu --fused --context 17; then ok; else bad "llama tiny --fused vs numpy"; fi
  if "$py" "$root/scripts/check_llama.py" --amk "$amk" --backend cpu --unfused; then ok; else bad "llama tiny --unfused vs numpy"; fi
  if "$py" "$root/scripts/check_llama.py" --amk "$amk" --backend cpu --rope-ops; then ok; else bad "llama tiny --rope-ops vs numpy"; fi
  # One chunk of 40 positions a kv head (the default: five of 8): the combine over a single chunk.
  if "$py" "$root/scripts/check_llama.py" --amk "$amk" --backend cpu --context 40 --attn-chunks 1; then ok; else bad "llama tiny --attn-chunks 1 vs numpy"; fi
  # 40 chunks a kv head: the combine over more than one round of 32 (the GPU runs it in gpu_check).
  if "$py" "$root/scripts/check_llama.py" --amk "$amk" --backend cpu --context 320 --attn-chunks 40; then ok; else bad "llama tiny --attn-chunks 40 vs numpy"; fi
  if "$py" "$root/scripts/check_llama.py" --amk "$amk" --backend cpu --mlp-act bf16; then ok; else bad "llama tiny --mlp-act bf16 vs numpy"; fi
  # one attention_combine merging both kv heads (kv_heads 2; the 1B and 8B steps default to it)
  if "$py" "$root/scripts/check_llama.py" --amk "$amk" --backend cpu --combine-heads 2 --context 40; then ok; else bad "llama tiny --combine-heads 2 vs numpy"; fi
fi

# Every sample also validates against the published JSON Schema.
if [ -n "$py" ] && "$py" -c "import jsonschema" 2>/dev/null; then
  if "$py" - "$root/schemas/program.schema.json" "$root"/samples/*.json <<'PY'
import json, sys
import jsonschema
schema = json.load(open(sys.argv[1]))
validator = jsonschema.Draft202012Validator(schema)
bad = 0
for path in sys.argv[2:]:
    errors = list(validator.iter_errors(json.load(open(path))))
    for e in errors[:3]:
        print(f"{path}: {e.json_path}: {e.message}")
    bad += bool(errors)
sys.exit(1 if bad else 0)
PY
  then ok; else bad "samples against schemas/program.schema.json"; fi
fi
# The GPU tier's --check programs (gemv shapes, fusions, TMA, cluster) load, verify and run on
# the CPU backend too (the GPU run compares against exactly this).
for n in gemv_shapes gemv_fused gemv_waits attention_rope attention_tiled attention_tiled_wide tma_gemv cluster small_ops rope_kv; do
  "$amk" -q run "$root/tests/gpu/programs/$n.json" --backend cpu -o "$tmp/gpu_$n" && ok || bad "$n: cpu run"
done
# attention_rope at other block sizes (the GPU tier checks these too; here: they load and run).
for bt in 128 512; do
  sed "s/\"block\": 256/\"block\": $bt/" "$root/tests/gpu/programs/attention_rope.json" > "$tmp/attention_rope_$bt.json"
  grep -q "\"block\": $bt" "$tmp/attention_rope_$bt.json" && "$amk" -q run "$tmp/attention_rope_$bt.json" --backend cpu -o "$tmp/gpu_ar_$bt" && ok || bad "attention_rope at $bt threads: cpu run"
done
echo "samples: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
