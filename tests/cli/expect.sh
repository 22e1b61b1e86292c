# The shell tests' checks, sourced after `tmp` (a scratch folder) and `py` (a python3) are set.
# Each check counts into `pass` / `fail`; a script ends with `[ "$fail" -eq 0 ]`.
pass=0
fail=0
expect_rc() {  # expect_rc WANT DESCRIPTION -- command...
  local want="$1" what="$2"
  shift 3
  "$@" >"$tmp/out" 2>"$tmp/err"
  local rc=$?
  if [ "$rc" -eq "$want" ]; then pass=$((pass + 1)); else
    fail=$((fail + 1)); echo "FAIL $what: exit $rc, want $want"; head -3 "$tmp/err" | sed 's/^/    /'; fi
}
expect_grep() {  # expect_grep FILE PATTERN DESCRIPTION
  if grep -q -- "$2" "$1"; then pass=$((pass + 1)); else
    fail=$((fail + 1)); echo "FAIL $3: '$2' not in output"; head -5 "$1" | sed 's/^/    /'; fi
}
json_field() {  # json_field FILE EXPR -> prints python expression over `j`
  "$py" -c "import json,sys; j=json.load(open(sys.argv[1])); print($2)" "$1"
}
