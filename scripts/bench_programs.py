#!/usr/bin/env python3
"""Writes the runtime micro-benchmark programs (BENCH.md: dispatch and dependent hop).

    python3 scripts/bench_programs.py OUT_DIR

- dispatch_<n>.json: 132 blocks, each with n independent `nop` instructions (no waits or
  signals). (t(n2) - t(n1)) / (n2 - n1) is the cost of dispatching one independent instruction
  on a block, launch overhead cancelled.
- hop_<k>.json: a chain of k `nop`s, instruction i on block (i * 37) % 132 (consecutive steps on
  different SMs), each waiting for its predecessor's signal on its own counter.
  (t(k2) - t(k1)) / (k2 - k1) is the latency of one dependent hop between blocks.
"""
import json
import os
import sys

GRID = 132


def base(name, desc):
    return {"format": "amk.program", "version": 1, "name": name, "description": desc,
            "launch": {"grid": GRID, "block": 128, "timeout_ms": 20000},
            "buffers": [{"name": "unused", "dtype": "u8", "shape": [1]}]}


def dispatch(n):
    p = base(f"dispatch_{n}", f"{GRID} blocks x {n} independent nops")
    p["instructions"] = [{"op": "nop"} for _ in range(GRID * n)]
    p["queues"] = [list(range(b * n, (b + 1) * n)) for b in range(GRID)]
    return p


def hop(k):
    p = base(f"hop_{k}", f"a chain of {k} dependent nops hopping between blocks")
    p["counters"] = [f"c{i}" for i in range(k)]
    ins, queues = [], [[] for _ in range(GRID)]
    for i in range(k):
        x = {"op": "nop", "signals": [{"counter": f"c{i}"}]}
        if i > 0:
            x["waits"] = [{"counter": f"c{i - 1}", "value": 1}]
        ins.append(x)
        queues[(i * 37) % GRID].append(i)
    p["instructions"] = ins
    p["queues"] = queues
    return p


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    for n in (1000, 3000):
        json.dump(dispatch(n), open(os.path.join(out, f"dispatch_{n}.json"), "w"))
    for k in (500, 2500):
        json.dump(hop(k), open(os.path.join(out, f"hop_{k}.json"), "w"))


if __name__ == "__main__":
    main()
