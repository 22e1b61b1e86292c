#!/usr/bin/env bash
# gpu tier: an ahead-of-time cubin end to end through the amk binary. amk compile -o writes the
# cubin and its record; run / profile / inspect --attributes --cubin load it without compiling
# (the run matches the CPU reference, nothing enters the kernel cache, the report's artifact
# fingerprint is the record's); a cubin built for another program, arch or NVRTC options is
# refused with artifact.mismatch (exit 5) naming each difference. Exits 77 (skipped) without a GPU.
set -u
root="$(cd "$(dirname "$0")/../.." && pwd)"
amk="${AMK:?set AMK to the amk binary}"
py=/usr/bin/python3
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
. "$root/tests/cli/expect.sh"
sample="$root/samples/mlp_block.json"
other="$root/samples/diamond.json"  # other ops: another VM source

check() {  # check DESCRIPTION -- test...
  local what="$1"
  shift 2
  if "$@"; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL $what"; fi
}

"$amk" --json devices >"$tmp/devices.json" 2>/dev/null
if [ "$(json_field "$tmp/devices.json" "len(j['devices'])" 2>/dev/null)" = "0" ] ||
   [ ! -s "$tmp/devices.json" ]; then
  echo "skipped: no GPU"
  exit 77
fi
arch="$(json_field "$tmp/devices.json" "j['devices'][0]['arch']")"
export AMK_CACHE_DIR="$tmp/cache"

# Built for this device's arch, then run from the file: no compile, so the cache stays empty.
expect_rc 0 "compile -o" -- "$amk" --json compile "$sample" --arch "$arch" -o "$tmp/vm.cubin"
rm -rf "$tmp/cache"
expect_rc 0 "run --cubin --check" -- "$amk" -v run "$sample" --backend cuda --cubin "$tmp/vm.cubin" --check -o "$tmp/run"
expect_grep "$tmp/err" "using the ahead-of-time cubin" "run --cubin says it loads the file"
check "the report's artifact fingerprint is the record's" -- \
  [ "$(json_field "$tmp/run/report.json" "j['artifact_fingerprint']")" = "$(json_field "$tmp/vm.cubin.json" "j['source_fingerprint']")" ]
check "run --cubin compiles nothing into the cache" -- \
  [ -z "$(find "$tmp/cache" -name '*.cubin' 2>/dev/null)" ]
expect_rc 0 "profile --events --cubin" -- "$amk" profile "$sample" --events --iterations 3 --cubin "$tmp/vm.cubin"
expect_rc 0 "inspect --attributes --cubin" -- "$amk" inspect "$sample" --attributes --cubin "$tmp/vm.cubin"
check "profile and inspect compile nothing into the cache" -- \
  [ -z "$(find "$tmp/cache" -name '*.cubin' 2>/dev/null)" ]

# Another program's cubin: its VM source differs.
expect_rc 0 "compile the other program" -- "$amk" compile "$other" --arch "$arch" -o "$tmp/other.cubin"
expect_rc 5 "run refuses another program's cubin" -- "$amk" run "$sample" --backend cuda --cubin "$tmp/other.cubin" -o "$tmp/run2"
expect_grep "$tmp/err" "device error \[artifact.mismatch\] at $tmp/other.cubin: the cubin was not built for this run" "the refusal names the file"
expect_grep "$tmp/err" "source_fingerprint: recorded $(json_field "$tmp/other.cubin.json" "j['source_fingerprint']"), expected $(json_field "$tmp/vm.cubin.json" "j['source_fingerprint']")" "the refusal lists the fingerprints"
check "a refused run writes no outputs" -- [ ! -e "$tmp/run2/manifest.json" ]
check "a refused run's report says why" -- \
  [ "$(json_field "$tmp/run2.failed-report.json" "j['error']['code']" 2>/dev/null)" = artifact.mismatch ]

# The same program with other NVRTC options (--lineinfo): the options' difference is listed.
expect_rc 5 "run --lineinfo refuses a cubin without line info" -- "$amk" run "$sample" --backend cuda --lineinfo --cubin "$tmp/vm.cubin"
expect_grep "$tmp/err" "options: recorded .*only expected \[-lineinfo\]" "the refusal lists the option"

# Another arch (a real one NVRTC knows, never this device's).
if [ "$arch" = sm_90a ]; then other_arch=sm_100a; else other_arch=sm_90a; fi
if "$amk" compile "$sample" --arch "$other_arch" -o "$tmp/arch.cubin" >/dev/null 2>&1; then
  expect_rc 5 "run refuses a cubin for $other_arch" -- "$amk" run "$sample" --backend cuda --cubin "$tmp/arch.cubin"
  expect_grep "$tmp/err" "arch: recorded $other_arch, expected $arch (the device's)" "the refusal names both archs"
else
  echo "note: NVRTC cannot compile for $other_arch; the arch refusal is not exercised"
fi

echo "aot_cubin: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
