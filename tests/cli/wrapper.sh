#!/usr/bin/env bash
# Wrapper programs on the command line (no GPU needed): validate, inspect and convert take them
# (convert losslessly, both ways), run / profile / inspect --attributes refuse untrusted source
# and the VM's options with located errors, and the sample matches schemas/wrapper.schema.json.
# (The launch itself: tests/gpu/wrappers.sh.)
set -u
root="$(cd "$(dirname "$0")/../.." && pwd)"
amk="${AMK:?set AMK to the amk binary}"
py=/usr/bin/python3
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
. "$root/tests/cli/expect.sh"
sample="$root/tests/wrapper/sample/wrapper.json"


expect_rc 0 "validate a wrapper" -- "$amk" validate "$sample"
expect_grep "$tmp/out" "^ok .*sample_dataflow (wrapper df_main, 2 queues, 4 instruction records" "validate's verdict"
expect_rc 0 "validate --json" -- "$amk" --json validate "$sample" "$root/samples/mlp_block.json"
[ "$(json_field "$tmp/out" "j['status'] + ' ' + j['programs'][0]['kind'] + ' ' + str(j['programs'][0]['instructions'])")" = "ok wrapper 4" ] && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL validate --json of a wrapper"; }

expect_rc 0 "inspect a wrapper" -- "$amk" inspect "$sample"
expect_grep "$tmp/out" "^kernel        df_main (kernel.cu" "inspect names the kernel"
expect_grep "$tmp/out" "grid 2 (one block per queue), block 128x1x1, cluster 2" "inspect shows the launch shape"
expect_grep "$tmp/out" "9  tensor_args  u8\[432\]" "inspect sizes the tensor_args amk writes"
expect_grep "$tmp/out" "14  w_map -> w" "inspect lists TMA specs after the 14 pointers"
expect_grep "$tmp/out" "target        sm_90a, 132 SMs" "inspect shows the target snapshot"
expect_rc 0 "inspect --json" -- "$amk" --json inspect "$sample"
[ "$(json_field "$tmp/out" "' '.join(str(x) for x in [j['kind'], len(j['package']['arrays']), j['package']['instruction_count'], len(j['tensor_args']), j['target']['fingerprint']])")" = "wrapper 14 4 3 target:sm_90a:132:232448:cluster" ] && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL inspect --json of a wrapper"; }
expect_rc 3 "inspect --attributes compiles only trusted source" -- "$amk" inspect "$sample" --attributes
expect_grep "$tmp/err" "\[wrapper.untrusted\] at /wrapper/source_path: .*--trust-source" "the refusal names the flag"
expect_rc 2 "inspect --attributes --vm is the VM's" -- "$amk" inspect "$sample" --attributes --vm gemv_ring_stages=2
expect_grep "$tmp/err" "\[usage.wrapper.attributes\] at --vm" "--vm's refusal is located"

# The launch: trusted source only (exit 3), one grid (--passes 1), no CPU reference (--check),
# no VM options, no bench; on a machine without a GPU, a device error (exit 5) after the checks.
for cmd in "run" "profile --events"; do
  expect_rc 3 "$cmd refuses untrusted source" -- "$amk" $cmd "$sample"
  expect_grep "$tmp/err" "\[wrapper.untrusted\] at /wrapper/source_path: the wrapper's kernel df_main" "$cmd's refusal names the kernel"
done
expect_rc 2 "run --check refuses a wrapper" -- "$amk" run "$sample" --trust-source --check
expect_grep "$tmp/err" "\[usage.run.check\] at --check" "--check's refusal is located"
expect_rc 2 "run --passes 2 refuses a wrapper" -- "$amk" run "$sample" --trust-source --passes 2
expect_grep "$tmp/err" "\[usage.run.passes\] at --passes" "--passes's refusal is located"
expect_rc 2 "run --vm refuses a wrapper" -- "$amk" run "$sample" --trust-source --vm gemv_ring_stages=2
expect_grep "$tmp/err" "\[usage.wrapper.vm\] at --vm" "--vm's refusal is located"
expect_rc 2 "profile --trace refuses a wrapper" -- "$amk" profile "$sample" --trust-source --trace "$tmp/t.json"
expect_grep "$tmp/err" "\[usage.wrapper.profile\]" "--trace's refusal is named"
expect_rc 3 "bench refuses a wrapper" -- "$amk" bench "$sample"
expect_grep "$tmp/err" "\[wrapper.unsupported\] at /format: a wrapper program" "bench's refusal is located"
if ! "$amk" --json devices | grep -q '"ordinal"'; then
  expect_rc 5 "run on a machine without a GPU" -- "$amk" run "$sample" --trust-source -o "$tmp/no_gpu"
  expect_grep "$tmp/err" "device" "the device error"
  [ ! -e "$tmp/no_gpu" ] && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL a refused run made its output folder"; }
fi
# convert: JSON -> .amkb -> JSON in the sample's folder (its source must stay inside), lossless.
cp -r "$root/tests/wrapper/sample" "$tmp/s"
expect_rc 0 "convert a wrapper to .amkb" -- "$amk" --json convert "$tmp/s/wrapper.json" -o "$tmp/s/w.amkb"
[ "$(json_field "$tmp/out" "j['kind'] + ' ' + j['encoding']")" = "wrapper amkb" ] && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL convert --json of a wrapper"; }
expect_rc 0 "convert the .amkb back" -- "$amk" convert "$tmp/s/w.amkb" -o "$tmp/s/back.json"
expect_rc 0 "convert the JSON to canonical JSON" -- "$amk" convert "$tmp/s/wrapper.json" -o "$tmp/s/canon.json"
cmp -s "$tmp/s/back.json" "$tmp/s/canon.json" && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL .amkb round trip differs from the canonical JSON"; }
expect_rc 0 "validate the .amkb" -- "$amk" validate "$tmp/s/w.amkb"
expect_grep "$tmp/out" "sample_dataflow (wrapper df_main, 2 queues, 4 instruction records" "validate reads the .amkb"
expect_rc 0 "convert into the parent folder rebases the source path" -- "$amk" convert "$tmp/s/w.amkb" -o "$tmp/up.amkb"
expect_rc 0 "the rebased .amkb validates" -- "$amk" validate "$tmp/up.amkb"
expect_rc 0 "and converts back" -- "$amk" convert "$tmp/up.amkb" -o "$tmp/up.json"
[ "$(json_field "$tmp/up.json" "j['wrapper']['source_path']")" = "s/kernel.cu" ] && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL the source path was not rebased"; }
mkdir -p "$tmp/s/sub"
expect_rc 2 "convert refuses a source outside the output's folder" -- "$amk" convert "$tmp/s/wrapper.json" -o "$tmp/s/sub/w.amkb"
expect_grep "$tmp/err" "\[usage.convert.path\] at /wrapper/source_path" "the refusal names the source path"
expect_rc 3 "run of a wrapper .amkb needs trusted source" -- "$amk" run "$tmp/s/w.amkb"
expect_grep "$tmp/err" "\[wrapper.untrusted\]" "run's refusal of a wrapper .amkb"
expect_rc 3 "bench refuses a wrapper .amkb" -- "$amk" bench "$tmp/s/w.amkb"
expect_grep "$tmp/err" "\[wrapper.unsupported\] at header byte 0" "bench's refusal of a wrapper .amkb is located"
expect_rc 3 "run --backend cpu refuses a wrapper" -- "$amk" run "$sample" --backend cpu
expect_grep "$tmp/err" "\[wrapper.backend.cpu\] at /format: the CPU backend does not run wrapper programs" "the CPU backend's refusal"

# The sample matches the JSON Schema (with python3-jsonschema and its referencing registry).
schema_py=""
for c in "${AMK_PYTHON:-}" /usr/bin/python3 python3; do
  if [ -n "$c" ] && "$c" -c "import jsonschema, referencing" 2>/dev/null; then schema_py="$c"; break; fi
done
if [ -n "$schema_py" ]; then
  "$schema_py" - "$root/schemas" "$sample" <<'PY' && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL the sample wrapper against wrapper.schema.json"; }
import json, sys, pathlib
import jsonschema
from referencing import Registry, Resource
d = pathlib.Path(sys.argv[1])
schemas = [json.load(open(d / n)) for n in ("wrapper.schema.json", "program.schema.json")]
registry = Registry().with_resources([(s["$id"], Resource.from_contents(s)) for s in schemas])
jsonschema.Draft202012Validator.check_schema(schemas[0])
jsonschema.Draft202012Validator(schemas[0], registry=registry).validate(json.load(open(sys.argv[2])))
PY
fi

echo "wrapper cli: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
