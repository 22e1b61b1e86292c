#!/usr/bin/env python3
"""Writes the runtime micro-benchmark programs (BENCH.md: dispatch and dependent hop).

    python3 scripts/bench_programs.py OUT_DIR

- dispatch_<n>.json: 132 blocks, each with n independent `nop` instructions (no waits or
  signals). (t(n2) - t(n1)) / (n2 - n1) is the cost of dispatching one independent instruction
  on a block, launch overhead cancelled.
- hop_<k>.json: a chain of k `nop`s, instruction i on block (i * 37) % 132 (consecutive steps on
  different SMs), each waiting for its predecessor's signal on its own counter.
  (t(k2) - t(k1)) / (k2 - k1) is the latency of one dependent hop between blocks.
- gemv_8x4096x4096.json: eight independent 32 MiB bf16 matrices (256 MiB, past the 60 MiB L2)
  streamed once per launch: achieved weight bandwidth = bytes / median launch time.
- gemv_1x4096x4096.json: one 4096x4096 bf16 GEMV (BENCH.md target <= 9 us, L2 cold: time it
  with `amk profile --events --cold`).
- attn_pairs.json: 132 blocks, each running two attention_decode chunks back to back (a Llama-3.2-1B
  chunk: 4 query heads, 64 bf16 positions of head_dim 64, RoPE), every chunk its own K/V: in a
  trace (`scripts/trace_phases.py --warm`), the first of each pair runs with the op's code cold
  in the instruction caches, the second warm; attn_pairs_plain.json: the same without RoPE (no
  rotation table to compute on the first).
- gemv_0.json: the GEMV programs' launch (grid auto, 256 threads, the x buffer) with one nop a
  block instead of the GEMVs: what a launch costs by itself, so t(gemv) - t(gemv_0) is the time
  the GEMVs take inside the program.
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


def gemv_rotate(mats, rows, cols):
    """`mats` independent bf16 matrices, each [rows, cols], each split into GRID row ranges: one
    launch streams mats*rows*cols*2 bytes of weights once (far more than the 60 MiB L2)."""
    p = base(f"gemv_{mats}x{rows}x{cols}", f"{mats} bf16 GEMVs of {rows}x{cols}, row ranges over {GRID} blocks")
    p["launch"]["block"] = 256
    p["buffers"] = [{"name": "x", "dtype": "f32", "shape": [cols], "init": {"kind": "random", "seed": 1}}]
    ins = []
    for m in range(mats):
        p["buffers"].append({"name": f"w{m}", "dtype": "bf16", "shape": [rows, cols],
                             "init": {"kind": "random", "seed": 100 + m, "distribution": "normal", "mean": 0, "std": 0.02}})
        p["buffers"].append({"name": f"y{m}", "dtype": "f32", "shape": [rows], "output": True})
        step = -(-rows // GRID)
        step += (-step) % 8
        for r0 in range(0, rows, step):
            n = min(step, rows - r0)
            ins.append({"op": "gemv", "operands": {"w": {"buffer": f"w{m}", "offset": r0 * cols, "extent": n * cols},
                                                   "x": "x", "y": {"buffer": f"y{m}", "offset": r0, "extent": n}}})
    p["instructions"] = ins
    del p["launch"]["grid"]
    return p


def gemv_launch_only():
    """The GEMV programs' launch (grid auto, 256 threads, their x) with one nop a block."""
    p = base("gemv_0", f"the GEMV programs' launch with one nop on each of {GRID} blocks")
    del p["launch"]["grid"]
    p["launch"]["block"] = 256
    p["buffers"] = [{"name": "x", "dtype": "f32", "shape": [4096], "init": {"kind": "random", "seed": 1}}]
    p["instructions"] = [{"op": "nop"} for _ in range(GRID)]
    return p


def attn_pairs(rope=True):
    name = "attn_pairs" if rope else "attn_pairs_plain"
    p = base(name, f"{GRID} blocks x 2 independent attention_decode chunks (1B-shaped)"
             + ("" if rope else ", no RoPE"))
    p["launch"]["block"] = 256
    hd, group, ln, n = 64, 4, 64, 2 * GRID
    p["buffers"] = [
        {"name": "q", "dtype": "f32", "shape": [n, group * hd], "init": {"kind": "random", "seed": 11}},
        {"name": "k", "dtype": "bf16", "shape": [n, ln, hd], "init": {"kind": "random", "seed": 12}},
        {"name": "v", "dtype": "bf16", "shape": [n, ln, hd], "init": {"kind": "random", "seed": 13}},
        {"name": "out", "dtype": "f32", "shape": [n, group, hd + 2], "output": True}]
    ins = []
    for i in range(n):
        ins.append({"name": f"attn.{i % 2}.{i // 2}", "op": "attention_decode", "operands": {
            "q": {"buffer": "q", "offset": i * group * hd, "extent": group * hd},
            "k": {"buffer": "k", "offset": i * ln * hd, "extent": ln * hd},
            "v": {"buffer": "v", "offset": i * ln * hd, "extent": ln * hd},
            "out": {"buffer": "out", "offset": i * group * (hd + 2), "extent": group * (hd + 2)}},
            "params": {"head_dim": hd, "position": 1023, "theta": 500000.0 if rope else 0.0,
                       "scaling_factor": 32.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                       "original_max_position": 8192}})
    p["instructions"] = ins
    p["queues"] = [[2 * b, 2 * b + 1] for b in range(GRID)]
    return p


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    for n in (1000, 3000):
        json.dump(dispatch(n), open(os.path.join(out, f"dispatch_{n}.json"), "w"))
    for k in (500, 2500):
        json.dump(hop(k), open(os.path.join(out, f"hop_{k}.json"), "w"))
    json.dump(gemv_rotate(8, 4096, 4096), open(os.path.join(out, "gemv_8x4096x4096.json"), "w"))
    json.dump(gemv_rotate(1, 4096, 4096), open(os.path.join(out, "gemv_1x4096x4096.json"), "w"))
    json.dump(attn_pairs(), open(os.path.join(out, "attn_pairs.json"), "w"))
    json.dump(attn_pairs(False), open(os.path.join(out, "attn_pairs_plain.json"), "w"))
    json.dump(gemv_launch_only(), open(os.path.join(out, "gemv_0.json"), "w"))


if __name__ == "__main__":
    main()
