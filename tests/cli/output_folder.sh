#!/usr/bin/env bash
# The output folder changes as a whole (issue 41; schemas/outputs.md, "Replacing the folder").
# `amk run -o DIR` over an earlier run's folder is SIGKILLed at random moments: after each kill
# DIR holds exactly the old run's files or exactly the new run's (manifest, .npy files byte for
# byte against reference runs, and a report of the same run), and the next good run leaves
# nothing beside it. Also: a folder that is not amk's is refused, and on a full disk (a small
# tmpfs, where this may mount one) a failed run leaves the old folder as it was.
set -u
amk="${AMK:?set AMK to the amk binary}"
tmp="$(mktemp -d)"
mounted=""
trap '[ -n "$mounted" ] && umount "$mounted"; rm -rf "$tmp"' EXIT
pass=0
fail=0
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL $*"; }
trials="${AMK_KILL_TRIALS:-30}"

# x (random, 2 MiB of f32) and six outputs y_k = (k + 1) x: 12 MiB to write, about 40% of a run.
n=$((1 << 19))
{
  printf '{"format": "amk.program", "version": 1, "name": "kill", "launch": {"grid": 2, "block": 128},\n'
  printf ' "buffers": [{"name": "x", "dtype": "f32", "shape": [%d], "init": {"kind": "random", "seed": 1, "low": -1, "high": 1}}' "$n"
  for k in 0 1 2 3 4 5; do printf ',\n   {"name": "y%d", "dtype": "f32", "shape": [%d], "output": true}' "$k" "$n"; done
  printf '],\n "counters": [],\n "instructions": [\n'
  for k in 0 1 2 3 4 5; do
    [ "$k" -gt 0 ] && printf ',\n'
    printf '   {"name": "s%d", "op": "scale", "operands": {"x": "x", "y": "y%d"}, "params": {"alpha": %d}}' "$k" "$k" $((k + 1))
  done
  printf ']}\n'
} >"$tmp/kill.json"

now_ms() { echo $(($(date +%s%N) / 1000000)); }
# run SEED DIR: one run whose outputs depend on SEED (1: "old", 2: "new").
run() { "$amk" -q run "$tmp/kill.json" --backend cpu --reseed "$1" -o "$2" >/dev/null 2>"$tmp/err"; }

# Reference runs of either seed, and the old outputs in DIR; the slowest sets the kill times.
dur=0
timed() {
  local t0
  t0=$(now_ms)
  run "$@" || { bad "reference run $*"; cat "$tmp/err"; }
  t0=$(($(now_ms) - t0))
  [ "$t0" -gt "$dur" ] && dur=$t0
}
timed 1 "$tmp/ref1"
timed 2 "$tmp/ref2"
timed 1 "$tmp/k/out"
echo "output_folder: a run takes up to $dur ms; $trials kills between $((dur / 5)) and $((dur * 6 / 5)) ms"

# state DIR: which reference DIR matches exactly (1 or 2), or why neither does.
state() {
  local d="$1" s f
  for s in 1 2; do
    cmp -s "$d/manifest.json" "$tmp/ref$s/manifest.json" || continue
    # The same names (no .amk-tmp-*, nothing of the other run), the same bytes.
    [ "$(cd "$d" && ls -A | sort)" = "$(cd "$tmp/ref$s" && ls -A | sort)" ] || { echo "files differ from run $s's: $(cd "$d" && ls -A | tr '\n' ' ')"; return; }
    for f in "$tmp/ref$s"/*.npy; do
      cmp -s "$f" "$d/$(basename "$f")" || { echo "$(basename "$f") differs from run $s's"; return; }
    done
    # The report is that run's too.
    grep -q "\"reseed\": $s,\$" "$d/report.json" || { echo "report.json is not run $s's"; return; }
    echo "$s"
    return
  done
  echo "manifest.json matches neither run"
}

state_now=1
olds=0
news=0
lo=$((dur / 5))
span=$((dur + 1))
for i in $(seq "$trials"); do
  next=$((3 - state_now))
  delay=$((lo + (RANDOM * 32768 + RANDOM) % span))
  "$amk" -q run "$tmp/kill.json" --backend cpu --reseed "$next" -o "$tmp/k/out" >/dev/null 2>&1 &
  pid=$!
  sleep "$(printf '%d.%03d' $((delay / 1000)) $((delay % 1000)))"
  kill -KILL "$pid" 2>/dev/null
  wait "$pid" 2>/dev/null
  got="$(state "$tmp/k/out")"
  case "$got" in
    "$state_now") olds=$((olds + 1)); ok ;;
    "$next") news=$((news + 1)); ok ;;
    *) bad "trial $i (killed after $delay ms): $got"; break ;;
  esac
  state_now="$got"
  # Each run removes what the killed ones left: leftovers never pile up.
  left="$(cd "$tmp/k" && ls -A | grep -c '^\.out\.amk-')"
  [ "$left" -le 2 ] && ok || bad "trial $i: $left staging folders beside the output folder"
done
echo "output_folder: after $trials kills, $olds left the old outputs and $news the new ones"
[ "$olds" -gt 0 ] && [ "$news" -gt 0 ] && ok || bad "the kills never fell both before and after the swap"

# The next good run cleans up: nothing beside the folder, nothing stray in it.
run 2 "$tmp/k/out" && ok || bad "run after the kills"
[ "$(state "$tmp/k/out")" = 2 ] && ok || bad "after the kills: $(state "$tmp/k/out")"
[ "$(cd "$tmp/k" && ls -A)" = out ] && ok || bad "left beside the folder: $(cd "$tmp/k" && ls -A | tr '\n' ' ')"

# A folder that is not amk's is refused before the run (exit 2) and left alone.
mkdir -p "$tmp/mine" && echo "keep me" >"$tmp/mine/notes.txt"
"$amk" run "$tmp/kill.json" --backend cpu -o "$tmp/mine" >/dev/null 2>"$tmp/err"
rc=$?
[ "$rc" = 2 ] && grep -q "usage.out_dir" "$tmp/err" && ok || { bad "foreign folder: exit $rc"; cat "$tmp/err"; }
[ "$(ls -A "$tmp/mine")" = notes.txt ] && [ "$(cat "$tmp/mine/notes.txt")" = "keep me" ] && ok || bad "foreign folder changed"
[ "$(cd "$tmp" && ls -A | grep -c -e '^\.mine' -e '^mine\.')" = 0 ] && ok || bad "foreign folder: files beside it"

# A full disk: 18 MiB hold one run (12 MiB) but not a second beside it. The failed run leaves
# the old folder byte for byte, its report beside it, and no staging folder.
mkdir -p "$tmp/full"
if mount -t tmpfs -o size=18m amk-output-folder-test "$tmp/full" 2>/dev/null; then
  mounted="$tmp/full"
  run 1 "$tmp/full/out" && ok || bad "first run on the small disk"
  run 2 "$tmp/full/out"
  rc=$?
  [ "$rc" = 4 ] && grep -q "No space left on device" "$tmp/err" && ok || { bad "full disk: exit $rc"; cat "$tmp/err"; }
  [ "$(state "$tmp/full/out")" = 1 ] && ok || bad "full disk: $(state "$tmp/full/out")"
  grep -q '"status": "error"' "$tmp/full/out.failed-report.json" && ok || bad "full disk: no failed report beside the folder"
  [ "$(cd "$tmp/full" && ls -A | tr '\n' ' ')" = "out out.failed-report.json " ] && ok || bad "full disk: left $(cd "$tmp/full" && ls -A | tr '\n' ' ')"
  umount "$tmp/full" && mounted=""
else
  echo "output_folder: skip the full disk (cannot mount a tmpfs here)"
fi

echo "output_folder: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
