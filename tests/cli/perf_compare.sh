#!/usr/bin/env bash
# scripts/perf_compare.py on scratch results files made from scripts/perf_baseline.json: the
# table, a tie, a regression (exit 1), an improvement, figures in one file only, the noise
# threshold, and malformed files (exit 2, one line naming the file, no traceback).
set -u
root="$(cd "$(dirname "$0")/../.." && pwd)"
base="$root/scripts/perf_baseline.json"
cmp_py="$root/scripts/perf_compare.py"
py=""
for c in "${AMK_PYTHON:-}" /usr/bin/python3 python3; do
  if [ -n "$c" ] && command -v "$c" >/dev/null 2>&1; then py="$c"; break; fi
done
[ -n "$py" ] || { echo "perf_compare: no python3"; exit 1; }
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
pass=0
fail=0
ok() { pass=$((pass + 1)); }
bad() {
  fail=$((fail + 1))
  echo "FAIL $1"
  if [ -n "${2:-}" ]; then printf '%s\n' "$2" | head -20 | sed 's/^/    /'; fi
}

# derive OUT EXPR: OUT is the baseline with the Python statement EXPR applied to `figs` (a dict
# of its figures by id) and `doc`.
derive() {
  "$py" - "$base" "$work/$1" "$2" <<'PY' || { echo "perf_compare: derive $1 failed"; exit 1; }
import json, sys
doc = json.load(open(sys.argv[1]))
figs = {f["id"]: f for f in doc["figures"]}
exec(sys.argv[3])
json.dump(doc, open(sys.argv[2], "w"), indent=1)
PY
}
# run NAME WANT_RC ARGS...: runs perf_compare, keeps its output in $out, checks the exit code.
run() {
  local name="$1" want="$2"
  shift 2
  out="$("$py" "$cmp_py" "$@" 2>&1)"
  rc=$?
  if [ "$rc" -eq "$want" ]; then ok; else bad "$name: want exit $want, got $rc" "$out"; fi
}
has() {  # has NAME TEXT: $out contains TEXT
  if [[ "$out" == *"$2"* ]]; then ok; else bad "$1: no '$2' in the output" "$out"; fi
}
row() {  # row NAME ID VERDICT: the comparison row of figure ID ends in VERDICT
  local line
  line="$(printf '%s\n' "$out" | grep "^| $2 (")"
  if [[ "$line" == *"| $3 |" || "$line" == *"| **$3** |" ]]; then
    ok
  else
    bad "$1: row $2 is not '$3'" "$line"
  fi
}

# 1. The table: one row per figure, the header, the values and the targets' status.
run table 0 "$base"
has table "| figure | value | baseline (same run) | target | command |"
n_fig="$("$py" -c 'import json,sys; print(len(json.load(open(sys.argv[1]))["figures"]))' "$base")"
n_rows="$(printf '%s\n' "$out" | grep -c '^| .* | \*\*')"
if [ "$n_rows" -eq "$n_fig" ] && [ "$n_fig" -ge 7 ]; then
  ok
else
  bad "table: $n_rows rows for $n_fig figures" "$out"
fi
has table "| **1.0589 ms** | PyTorch + CUDA graph, same weights: 2.7016 ms |"
has table ">= 4.1 TB/s (BENCH.md): **not met**"
has table "<= 40 ns (issue 4): **not met**"

# The README's table (--same-run): only the figures whose baseline ran in the same run.
run same_run 0 "$base" --same-run
n_same="$("$py" -c 'import json,sys; print(sum(1 for f in json.load(open(sys.argv[1]))["figures"]
                                             if f["baseline"] and f["baseline"]["same_run"]))' "$base")"
n_rows="$(printf '%s\n' "$out" | grep -c '^| .* | \*\*')"
if [ "$n_rows" -eq "$n_same" ] && [ "$n_same" -ge 1 ] && [ "$n_same" -lt "$n_fig" ]; then
  ok
else
  bad "same_run: $n_rows rows for $n_same same-run figures of $n_fig" "$out"
fi
if [[ "$out" == *"not measured in the same run"* ]]; then bad "same_run: a footnote" "$out"; else ok; fi

# 2. A tie: every figure 0.3% worse, inside the default 0.6%.
derive tie.json 'for f in doc["figures"]: f["value"] *= 1.003 if f["better"] == "lower" else 0.997'
run tie 0 "$base" "$work/tie.json"
row tie llama1b_step_ctx1024 tie
row tie gemv_bf16_8x4096sq_in_program tie
has tie "0 regression(s), 0 improvement(s), $n_fig tie(s)"

# 3. Regressions, one in each direction: a time up 5%, a bandwidth down 5%.
derive regress.json 'figs["llama1b_step_ctx1024"]["value"] *= 1.05
figs["gemv_bf16_8x4096sq_in_program"]["value"] *= 0.95'
run regression 1 "$base" "$work/regress.json"
row regression llama1b_step_ctx1024 regression
row regression gemv_bf16_8x4096sq_in_program regression
row regression dispatch tie
has regression "| +5.00% |"
has regression "2 regression(s)"
# the same under a 10% threshold: ties.
run noise_10pct 0 "$base" "$work/regress.json" --noise 0.1
row noise_10pct llama1b_step_ctx1024 tie
run noise_bad 2 "$base" "$work/regress.json" --noise -1
run noise_one_file 2 "$base" --noise 0.01

# 4. Improvements, one in each direction.
derive improve.json 'figs["dependent_hop"]["value"] = 400.0
figs["gemv_bf16_8x4096sq_in_program"]["value"] = 4.2'
run improvement 0 "$base" "$work/improve.json"
row improvement dependent_hop improvement
row improvement gemv_bf16_8x4096sq_in_program improvement
has improvement "0 regression(s), 2 improvement(s)"

# 5. Figures in one file only.
derive only.json 'doc["figures"] = [f for f in doc["figures"] if f["id"] != "dispatch"]
doc["figures"].append(dict(figs["dispatch"], id="new_figure"))'
run only_one_side 0 "$base" "$work/only.json"
has only_one_side "only in $base: dispatch"
has only_one_side "only in $work/only.json: new_figure"

# 6. Malformed files: exit 2, one line naming the file, no traceback.
malformed() {  # malformed NAME WANT_TEXT: $work/NAME must be refused as the new file and alone
  local name="$1" want="$2" which
  for which in new alone; do
    if [ "$which" = new ]; then
      run "malformed $name" 2 "$base" "$work/$name"
    else
      run "malformed $name alone" 2 "$work/$name"
    fi
    if [ "$(printf '%s\n' "$out" | wc -l)" -eq 1 ] && [[ "$out" == *"$work/$name: "*"$want"* ]] &&
       [[ "$out" != *Traceback* ]]; then
      ok
    else
      bad "malformed $name ($which): want one line naming the file and '$want'" "$out"
    fi
  done
}
printf '{"schema_version": 1, "figures": [' > "$work/truncated.json"
malformed truncated.json "not valid JSON"
derive string_value.json 'figs["dispatch"]["value"] = "76.0"'
malformed string_value.json "figures[6].value: expected a number > 0"
derive version_2.json 'doc["schema_version"] = 2'
malformed version_2.json "schema_version 2 is not supported"
derive no_better.json 'del figs["dependent_hop"]["better"]'
malformed no_better.json "figures[5]: missing key 'better'"
derive duplicate.json 'doc["figures"].append(figs["dispatch"])'
malformed duplicate.json "'dispatch' appears twice"
printf '[1, 2]' > "$work/list.json"
malformed list.json "expected a JSON object"
malformed missing.json "cannot read"
derive unit.json 'figs["dispatch"]["unit"] = "us"'
run unit_mismatch 2 "$base" "$work/unit.json"
has unit_mismatch "unit 'us' differs"

echo "perf_compare: $pass passed, $fail failed"
[ "$fail" -eq 0 ] && [ "$pass" -ge 40 ]
