#!/usr/bin/env bash
# Builds the libFuzzer harnesses (preset fuzz: clang 14 + ASan + UBSan) and runs each for a
# bounded time. Seeds: the samples and the bad-input corpus, copied to a scratch folder.
#   bash scripts/fuzz.sh [SECONDS_PER_HARNESS]
set -euo pipefail
cd "$(dirname "$0")/.."
secs="${1:-60}"
cmake --preset fuzz >/dev/null
cmake --build --preset fuzz -j "$(nproc)" --target fuzz_json fuzz_amkb fuzz_wrapper
# Seeds in the binary encoding come from `amk convert` (any build of amk will do).
amk=build/default/amk
if [ ! -x "$amk" ]; then
  cmake --build --preset fuzz -j "$(nproc)" --target amk
  amk=build/fuzz/amk
fi
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/json" "$work/amkb" "$work/wrapper" "$work/artifacts"
cp samples/*.json tests/bad/json/*.json "$work/json/"
cp tests/bad/amkb/*.amkb "$work/amkb/" 2>/dev/null || true
cp tests/wrapper/sample/wrapper.json tests/bad/json/wrapper_*.json "$work/wrapper/"
cp tests/bad/amkb/wrapper_*.amkb "$work/wrapper/"
# (--allow-outside: a seed is parsed, never run, so its rewritten data paths may leave the folder.)
for s in samples/*.json; do
  "$amk" -q convert --allow-outside "$s" -o "$work/amkb/$(basename "$s" .json).amkb" || true
done
# The sample wrapper as .amkb, converted inside a copy of its folder (its source stays inside).
cp -r tests/wrapper/sample "$work/sample"
if "$amk" -q convert "$work/sample/wrapper.json" -o "$work/sample/wrapper.amkb"; then
  cp "$work/sample/wrapper.amkb" "$work/wrapper/sample_wrapper.amkb"
fi
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
for h in json amkb wrapper; do
  echo "fuzzing $h for ${secs}s"
  ./build/fuzz/tests/fuzz/fuzz_$h "$work/$h" -max_total_time="$secs" -max_len=65536 -timeout=10 \
    -rss_limit_mb=4096 -artifact_prefix="$work/artifacts/" -print_final_stats=1 2>&1 | tail -15
done
