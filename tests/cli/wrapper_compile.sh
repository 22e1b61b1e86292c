#!/usr/bin/env bash
# amk compile on a wrapper program (NVRTC, no GPU): foreign source needs --trust-source (exit 3,
# naming it), compiles for its target snapshot's arch only (exit 5), takes none of the VM's flags
# (exit 2); with trust it compiles into the cache (a hit the second time), -o writes the cubin and
# its record, and a syntax error is the nvrtc error with NVRTC's log (exit 6).
set -u
root="$(cd "$(dirname "$0")/../.." && pwd)"
amk="${AMK:?set AMK to the amk binary}"
py=/usr/bin/python3
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
. "$root/tests/cli/expect.sh"
sample="$root/tests/wrapper/sample/wrapper.json"
cache=(--cache-dir "$tmp/cache")

expect_py() {  # expect_py FILE EXPR DESCRIPTION: EXPR over the JSON `j` must be true
  if "$py" -c "import json,sys; j=json.load(open(sys.argv[1])); sys.exit(0 if ($2) else 1)" "$1"; then
    pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL $3"; head -5 "$1" | sed 's/^/    /'; fi
}

expect_rc 3 "compile without --trust-source" -- "$amk" compile "$sample" "${cache[@]}" -o "$tmp/k.cubin"
expect_grep "$tmp/err" "\[wrapper.untrusted\] at /wrapper/source_path: .*only with --trust-source" "the refusal names the flag"
[ ! -e "$tmp/k.cubin" ] && [ ! -e "$tmp/cache" ] && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL an untrusted compile wrote something"; }
expect_rc 5 "another arch than the snapshot's" -- "$amk" compile "$sample" --trust-source --arch sm_100a
expect_grep "$tmp/err" "\[device.target\] at --arch: wrapper 'sample_dataflow' was built for sm_90a" "the arch refusal names both"
for flag in "--vm block_threads=128" "--explain" "--ptx-out $tmp/k.ptx" "--source-out $tmp/k.cu"; do
  expect_rc 2 "compile $flag on a wrapper" -- "$amk" compile "$sample" --trust-source $flag
  expect_grep "$tmp/err" "\[usage.wrapper.compile\] at ${flag%% *}" "$flag is refused by name"
done

expect_rc 0 "compile --trust-source" -- "$amk" compile "$sample" --trust-source "${cache[@]}"
expect_grep "$tmp/out" "^compiled wrapper df_main for sm_90a: .* compiled in" "the first compile runs NVRTC"
expect_grep "$tmp/out" "Compiling entry function 'df_main' for 'sm_90a'" "ptxas's lines are shown"
expect_rc 0 "compile again with -o" -- "$amk" --json compile "$sample" --trust-source --arch sm_90a "${cache[@]}" -o "$tmp/k.cubin"
expect_py "$tmp/out" "j['kind'] == 'wrapper' and j['kernel'] == 'df_main' and j['cache_hit'] and '-DDF_TILE=64' in j['options'] and j['output_record'].endswith('k.cubin.json')" "the second compile is a cache hit that writes the record"
expect_py "$tmp/k.cubin.json" "j['kernel_name'] == 'df_main' and j['arch'] == 'sm_90a' and j['tma_count'] == 1 and 'sample_dataflow' in j['program_fingerprint']" "the cubin's record"
head -c 4 "$tmp/k.cubin" | grep -q "ELF" && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL -o wrote no cubin"; }

# A syntax error, and a source without the named kernel.
cp -r "$root/tests/wrapper/sample" "$tmp/bad"
printf '#include "amk_wrapper.h"\nextern "C" __global__ void df_main(AMK_WRAPPER_PARAMS) { flags[1] = 1 }\n' >"$tmp/bad/kernel.cu"
expect_rc 6 "a wrapper with a syntax error" -- "$amk" compile "$tmp/bad/wrapper.json" --trust-source "${cache[@]}"
expect_grep "$tmp/err" "\[nvrtc.compile\] at sm_90a: NVRTC .* failed to compile df_main for sm_90a" "the nvrtc error"
expect_grep "$tmp/err" "kernel.cu(2): error" "NVRTC's log is printed"
printf '#include "amk_wrapper.h"\nextern "C" __global__ void other(AMK_WRAPPER_PARAMS) { flags[1] = 1; }\n' >"$tmp/bad/kernel.cu"
expect_rc 3 "a source without the kernel" -- "$amk" compile "$tmp/bad/wrapper.json" --trust-source "${cache[@]}"
expect_grep "$tmp/err" "\[wrapper.kernel_missing\] at /wrapper/kernel_name: the compiled source has no kernel df_main" "the missing kernel is named"

echo "wrapper compile cli: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
