#!/usr/bin/env python3
"""Times generation in one launch (`amk gen llama --steps N --prompt IDS`) on the GPU.

    python3 scripts/bench_generate.py --amk build/default/amk --preset llama-3.2-1b \
        [--weights W.safetensors] [--sweep | --sweep-only] --out DIR

For each case (prompt 32 + 128 new, prompt 960 + 128 new):
- the N-token launch (`amk profile --events`: each timed launch runs every pass), its time a
  decode step (launch / passes) and new tokens per second;
- the same program as a single step (launch.passes 1) with its position at the generation's
  mean position: the step the N-token launch must match (within 2%);
- the single step of `amk gen llama --context C` (the position baked into the params) at the
  same mean context, for reference.
With --sweep, one program with a cache of 4096 positions runs a single step at positions 0 to
4095 (runtime position, one compiled VM), beside the baked step at the same contexts: no context
may be slower than a longer one beyond the run-to-run spread.

Prints a JSON object (also DIR/bench_generate.json) and one row a figure.
"""
import argparse
import json
import os
import subprocess
import sys


def sh(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {r.returncode}: {r.stderr.strip()[-1500:]}")
    return r.stdout


def profile(amk, prog, iterations):
    j = json.loads(sh([amk, "--json", "profile", prog, "--events", "--warmup", "2",
                       "--iterations", str(iterations), "--allow-outside"]))
    return j["median_ms"], j["rel_spread"], j.get("passes", 1)


def with_position(src, dst, position, passes=1):
    """A copy of program src running `passes` passes from `position`."""
    j = json.load(open(src))
    j["launch"]["passes"] = passes
    for b in j["buffers"]:
        if b["name"] == "position":
            b["init"] = {"kind": "values", "values": [position]}
    json.dump(j, open(dst, "w"))


def gen(amk, args, out, extra):
    cmd = [amk, "-q", "gen", "llama", "--preset", args.preset, "-o", out] + extra
    if args.weights:
        cmd += ["--weights", args.weights, "--allow-outside"]
    sh(cmd)


def single_steps(amk, args, src, position, tag):
    """One pass of program src at `position` (runtime) and the baked step of `amk gen llama
    --context position+1`: (runtime ms, its spread, baked ms, its spread)."""
    one = os.path.join(args.out, f"one_{tag}.json")
    with_position(src, one, position)
    ms, spread, _ = profile(amk, one, 20)
    baked = os.path.join(args.out, f"baked_{tag}.json")
    gen(amk, args, baked, ["--context", str(position + 1)])
    bms, bspread, _ = profile(amk, baked, 20)
    os.remove(one)
    os.remove(baked)
    return ms, spread, bms, bspread


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--amk", required=True)
    ap.add_argument("--preset", default="llama-3.2-1b")
    ap.add_argument("--weights", help="safetensors with the model's weights (amk gen --write-weights)")
    ap.add_argument("--sweep", action="store_true")
    ap.add_argument("--sweep-only", action="store_true", help="the sweep without the two cases")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    amk = args.amk
    os.makedirs(args.out, exist_ok=True)
    res = {"preset": args.preset, "cases": [], "sweep": []}
    for n_prompt, steps in () if args.sweep_only else ((32, 128), (960, 128)):
        prompt = ",".join(str((i * 7919 + 13) % 128000) for i in range(n_prompt))
        g = os.path.join(args.out, f"gen_{n_prompt}.json")
        gen(amk, args, g, ["--steps", str(steps), "--prompt", prompt])
        launch_ms, spread, passes = profile(amk, g, 5)
        mean_pos = (passes - 1) // 2
        one_ms, one_spread, baked_ms, baked_spread = single_steps(amk, args, g, mean_pos,
                                                                  str(n_prompt))
        case = {"prompt": n_prompt, "new": steps, "passes": passes, "launch_ms": launch_ms,
                "launch_spread": spread, "step_ms": launch_ms / passes,
                "new_tokens_per_s": steps * 1000.0 / launch_ms,
                "single_step_runtime_ms": one_ms, "single_step_runtime_spread": one_spread,
                "single_step_baked_ms": baked_ms, "single_step_baked_spread": baked_spread,
                "mean_position": mean_pos}
        case["step_vs_single"] = case["step_ms"] / one_ms - 1
        res["cases"].append(case)
        print(f"{args.preset} {n_prompt} + {steps}: launch {launch_ms:.3f} ms ({passes} steps, "
              f"spread {100 * spread:.1f}%) = {case['step_ms']:.4f} ms a step, "
              f"{case['new_tokens_per_s']:.0f} new tokens/s; single step at position {mean_pos}: "
              f"runtime {one_ms:.4f} ms, baked {baked_ms:.4f} ms; N-token step vs single "
              f"{100 * case['step_vs_single']:+.2f}%", flush=True)
    if args.sweep or args.sweep_only:
        s = os.path.join(args.out, "sweep.json")
        gen(amk, args, s, ["--steps", "1", "--prompt", "1", "--context", "4096"])
        for p in (0, 15, 31, 63, 127, 255, 511, 1023, 2047, 4095):
            ms, spread, bms, bspread = single_steps(amk, args, s, p, f"sweep_{p}")
            res["sweep"].append({"position": p, "runtime_ms": ms, "runtime_spread": spread,
                                 "baked_ms": bms, "baked_spread": bspread})
            print(f"{args.preset} single step at position {p}: runtime {ms:.4f} ms "
                  f"(spread {100 * spread:.1f}%), baked {bms:.4f} ms", flush=True)
        worst = 0.0
        for a, b in zip(res["sweep"], res["sweep"][1:]):
            worst = max(worst, a["runtime_ms"] / b["runtime_ms"] - 1)
        res["sweep_worst_inversion"] = worst
        print(f"{args.preset} sweep: largest excess of a context over a longer one "
              f"{100 * worst:+.2f}%")
    json.dump(res, open(os.path.join(args.out, "bench_generate.json"), "w"), indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
