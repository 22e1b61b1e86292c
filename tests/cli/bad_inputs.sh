#!/usr/bin/env bash
# Runs every program of the bad-input corpus (tests/bad/expected.tsv) through amk and checks the
# exit code, the stable error code and its location. A crash, a sanitizer report or any other
# exit code fails. Cases listed as generated/NAME are too large to commit: make_corpus.py writes
# them to a scratch folder first, never into the source tree.
set -u
here="$(cd "$(dirname "$0")/../bad" && pwd)"
amk="${AMK:?set AMK to the amk binary}"
py=""
for c in "${AMK_PYTHON:-}" /usr/bin/python3 python3; do
  if [ -n "$c" ] && command -v "$c" >/dev/null 2>&1; then py="$c"; break; fi
done
[ -n "$py" ] || { echo "bad inputs: no python3 to generate the large cases"; exit 1; }
gen="$(mktemp -d)"
trap 'rm -rf "$gen"' EXIT
"$py" -B "$here/make_corpus.py" --generated-into "$gen" || { echo "bad inputs: make_corpus.py --generated-into failed"; exit 1; }
pass=0
fail=0
while IFS=$'\t' read -r cmd file want_exit want_code want_where; do
  case "$cmd" in ''|'#'*) continue ;; esac
  case "$file" in
    generated/*) path="$gen/${file#generated/}" ;;
    *) path="$here/$file" ;;
  esac
  if [ "$cmd" = "run" ]; then
    out="$("$amk" run "$path" --backend cpu 2>&1 >/dev/null)"
  else
    out="$("$amk" "$cmd" "$path" 2>&1 >/dev/null)"
  fi
  rc=$?
  expect="[$want_code] at $want_where:"
  if [ "$rc" -eq "$want_exit" ] && [[ "$out" == *"$expect"* ]] && [[ "$out" != *"Sanitizer"* ]] && [[ "$out" != *"runtime error"* ]]; then
    pass=$((pass + 1))
  else
    fail=$((fail + 1))
    echo "FAIL $file: want exit $want_exit and '$expect'; got exit $rc:"
    printf '%s\n' "$out" | head -5 | sed 's/^/    /'
  fi
done < "$here/expected.tsv"
echo "bad inputs: $pass passed, $fail failed"
[ "$fail" -eq 0 ] && [ "$pass" -ge 40 ]
