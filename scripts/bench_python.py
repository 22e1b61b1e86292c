#!/usr/bin/env python3
"""Times the Python module's launch against the C++ API's, on the GPU (needs the module on
PYTHONPATH, built for this python).

    python3 scripts/bench_python.py --small samples/diamond.json --step llama1b.json \
        [--rounds 7] [--iterations 200] [--figures FIGURES.tsv]

- Small program: `exe.launch()` timed in a Python loop (perf_counter around each call) beside
  `exe.profile(events=False)`, which times the same launch() in a C++ loop; the difference of the
  medians is what Python adds to a launch.
- Decode step: `exe.set(name, a)` of one 4 KB input (a different array each time, so that every
  set uploads) then `exe.launch()`, beside `exe.launch()` alone, both from Python; the relative
  difference is what changing an input costs a step.
Rounds alternate the arms in one process; each round's value is a median over --iterations
launches, and the figure is the median of the rounds with their range. Prints one row a figure
("label: value") and, with --figures, appends `id value unit baseline` lines
(scripts/perf_compare.py --measured).
"""
import argparse
import statistics
import sys
import time

import numpy as np

import amk


def median_launch_us(exe, n, before=None):
    """Median host time of n launches from Python, us; before(k), when given, runs first and is
    timed with the launch."""
    t = []
    for k in range(n):
        t0 = time.perf_counter_ns()
        if before is not None:
            before(k)
        exe.launch()
        t.append(time.perf_counter_ns() - t0)
    return statistics.median(t) / 1e3


def spread(values):
    m = statistics.median(values)
    return f"{min(values):.2f}..{max(values):.2f}", (max(values) - min(values)) / m if m else 0.0


def four_kb_input(exe, name=None):
    """Buffer `name` (default: the step's first non-output buffer of 4 KB), its name and a bank
    of different arrays for it."""
    for b in exe.buffers:
        if b["output"] or (name is not None and b["name"] != name):
            continue
        n = int(np.prod(b["shape"]))
        dtype = {"bf16": np.uint16, "f16": np.float16, "f32": np.float32, "u32": np.uint32}.get(b["dtype"])
        if dtype is None or n * np.dtype(dtype).itemsize != 4096:
            continue
        rng = np.random.default_rng(7)
        if b["dtype"] == "bf16":  # values in [0.5, 1.5) as bf16 bits
            bank = [(rng.uniform(0.5, 1.5, b["shape"]).astype(np.float32).view(np.uint32) >> 16)
                    .astype(np.uint16) for _ in range(8)]
        elif b["dtype"] == "u32":
            bank = [rng.integers(0, 4, b["shape"]).astype(np.uint32) for _ in range(8)]
        else:
            bank = [rng.uniform(0.5, 1.5, b["shape"]).astype(dtype) for _ in range(8)]
        return b["name"], bank
    raise SystemExit(f"bench_python: the step program has no 4 KB input buffer {name or ''}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--small", required=True, help="a small program (the launch overhead)")
    ap.add_argument("--step", required=True, help="a decode-step program (the 4 KB input)")
    ap.add_argument("--input", help="the step's 4 KB buffer to change (default: the first one)")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--iterations", type=int, default=200)
    ap.add_argument("--figures", help="append the figures to this tab-separated file")
    a = ap.parse_args()

    py, cpp = [], []
    with amk.open(a.small, backend="cuda") as exe:
        for _ in range(20):
            exe.launch()
        for r in range(a.rounds):
            arms = [("py", lambda: py.append(median_launch_us(exe, a.iterations))),
                    ("cpp", lambda: cpp.append(
                        exe.profile(events=False, warmup=2, iterations=a.iterations)["median_ms"] * 1e3))]
            for _, arm in (arms if r % 2 == 0 else arms[::-1]):
                arm()
    over = [p - c for p, c in zip(py, cpp)]
    print(f"small launch from Python: {statistics.median(py):.2f} us (rounds {spread(py)[0]})")
    print(f"small launch from the C++ API: {statistics.median(cpp):.2f} us (rounds {spread(cpp)[0]})")
    print(f"Python's cost a launch: {statistics.median(over):+.2f} us (rounds {spread(over)[0]})")

    plain, changed = [], []
    with amk.open(a.step, backend="cuda") as exe:
        name, bank = four_kb_input(exe, a.input)
        n = max(20, a.iterations // 10)
        for _ in range(5):
            exe.launch()
        before = exe.stats()
        for r in range(a.rounds):
            arms = [lambda: plain.append(median_launch_us(exe, n)),
                    lambda: changed.append(median_launch_us(exe, n, lambda k: exe.set(name, bank[k % 8])))]
            for arm in (arms if r % 2 == 0 else arms[::-1]):
                arm()
        s = exe.stats()
        uploads = s["uploads"] - before["uploads"]
    if uploads < a.rounds * n:
        raise SystemExit(f"bench_python: {uploads} uploads of '{name}', expected {a.rounds * n}")
    rel = [c / p - 1 for p, c in zip(plain, changed)]
    print(f"decode step launch from Python: {statistics.median(plain) / 1e3:.4f} ms "
          f"(rounds {spread([p / 1e3 for p in plain])[0]})")
    print(f"decode step with a 4 KB set ('{name}') first: {statistics.median(changed) / 1e3:.4f} ms "
          f"({100 * statistics.median(rel):+.2f}%, rounds {100 * min(rel):+.2f}..{100 * max(rel):+.2f}%)")
    if a.figures:
        with open(a.figures, "a") as f:
            f.write(f"python_launch_small\t{statistics.median(py):.2f}\tus\t{statistics.median(cpp):.2f}\n")
            f.write(f"python_step_set4k\t{statistics.median(changed) / 1e3:.4f}\tms\t"
                    f"{statistics.median(plain) / 1e3:.4f}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
