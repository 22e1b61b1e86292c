#!/usr/bin/python3
"""Writes the gemv_chain wrapper program the way a dataflow compiler would:
h = relu(s1 * W1 x) (W1 [M1, K]), then y = s2 * W2 h (W2 [M2, M1]), as tile tasks on per-block
queues; y lands in global staging, h in an output tensor argument.

    /usr/bin/python3 samples/wrappers/gemv_chain/make.py --out DIR --seed N [--device-json F]

DIR gets program.json, kernel.cu, the inputs as .npy (x f32, W1/W2 as raw bf16 bits), NaN
poison for what the kernel writes, and meta.json (the scales) for scripts/check_wrappers.py.

Package layout (kernel.cu reads the same records):
  instructions  16-byte tasks   {op=1, layer, tile, coord}
  task_coords   32-byte records {row0, rows, k0, k_chunks, wait_first, wait_target, signal, 0}
  slots         32-byte records {kind=1, smem_offset, bytes, mbar_offset, arrive_count, 0, 0, 0}
  barrier_init  per queue: its NSLOT stage slots, in ring order
  args          {exit_word, counter_first, counter_count, tensor_args} + 2 layer records
                {w_arg, in_arg, out_arg (-1: global staging), relu, scale f32, k, m, 0}
  flags         word 0 abort (amk's), 1 exit counter, 2.. one counter per KC-chunk of h
"""
import argparse
import json
import os
import struct
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
import pack  # noqa: E402

K, M1, M2 = 1024, 1024, 512
TM, KC, THREADS = 16, 256, 256  # rows per tile, columns per chunk, threads per block
NSLOT = 4                       # ring depth per block
STAGE_BYTES = TM * KC * 2
EXIT_WORD, COUNTER_FIRST = 1, 2
X, W1, W2, H = 0, 1, 2, 3       # tensor-argument indices


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, required=True)
    ap.add_argument("--device-json")
    ap.add_argument("--queues", type=int, default=32)
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    rng = np.random.default_rng(a.seed)
    s1, s2 = 1.0 / np.sqrt(K), 1.0 / np.sqrt(M1)

    # Tasks in dependency order: every layer-1 tile, then every layer-2 tile. Tile j goes to
    # queue j % queues, so each queue holds its layer-1 tiles before its layer-2 tiles and no
    # block waits on a task queued behind it.
    counters = M1 // KC
    coords, tasks = [], []
    for t in range(M1 // TM):
        coords.append([t * TM, TM, 0, K // KC, 0, 0, COUNTER_FIRST + t * TM // KC, 0])
        tasks.append((1, 0, t))
    for t in range(M2 // TM):
        coords.append([t * TM, TM, 0, M1 // KC, COUNTER_FIRST, KC // TM, 0, 0])
        tasks.append((1, 1, t))
    queues = [[] for _ in range(a.queues)]
    for j, (op, layer, tile) in enumerate(tasks):
        queues[j % a.queues].append([op, layer, tile, j])
    instructions = [rec for q in queues for rec in q]
    offsets = np.cumsum([0] + [len(q) for q in queues[:-1]]).astype(np.int32)
    lengths = np.array([len(q) for q in queues], dtype=np.int32)

    # Each block's NSLOT stage slots: data at s * STAGE_BYTES, mbarriers after the data.
    mbar_base = NSLOT * STAGE_BYTES
    slots = [[1, s * STAGE_BYTES, STAGE_BYTES, mbar_base + 8 * s, 1, 0, 0, 0]
             for _ in range(a.queues) for s in range(NSLOT)]
    bi_offsets = np.arange(a.queues, dtype=np.int32) * NSLOT
    bi_lengths = np.full(a.queues, NSLOT, dtype=np.int32)
    bi_indices = np.arange(a.queues * NSLOT, dtype=np.int32)

    args = struct.pack("<4I", EXIT_WORD, COUNTER_FIRST, counters, 4)
    args += struct.pack("<IIiIfIII", W1, X, H, 1, s1, K, M1, 0)
    args += struct.pack("<IIiIfIII", W2, H, -1, 0, s2, M1, M2, 0)

    x = rng.uniform(-1, 1, K).astype(np.float32)
    w1 = pack.bf16_bits(rng.uniform(-1, 1, (M1, K)))
    w2 = pack.bf16_bits(rng.uniform(-1, 1, (M2, M1)))

    program = {
        "format": "amk.wrapper",
        "version": 1,
        "name": "gemv_chain",
        "description": "h = relu(s1 W1 x), y = s2 W2 h: bf16 weight tiles through mbarrier slots "
                       "(1-D bulk copies), layer-2 chunks wait on layer-1 counters in flags",
        "wrapper": {"kernel_name": "gc_main", "source_path": "kernel.cu",
                    "defines": [f"GC_TM={TM}", f"GC_KC={KC}", f"GC_THREADS={THREADS}"]},
        "launch": {"queues": a.queues, "block_dim": [THREADS],
                   "dynamic_smem_bytes": mbar_base + 8 * NSLOT, "timeout_ms": 5000},
        "package": {
            "instructions": pack.inline("u8", pack.records("<u4", instructions), 16),
            "queue_offsets": pack.inline("i32", offsets),
            "queue_lengths": pack.inline("i32", lengths),
            "slots": pack.inline("u8", pack.records("<u4", slots), 32),
            "barrier_init_offsets": pack.inline("i32", bi_offsets),
            "barrier_init_lengths": pack.inline("i32", bi_lengths),
            "barrier_init_indices": pack.inline("i32", bi_indices),
            "args": pack.inline("u8", np.frombuffer(args, dtype=np.uint8)),
            "task_coords": pack.inline("u8", pack.records("<i4", coords), 32),
            "global_staging": {"dtype": "f32", "count": M2,
                               "init": pack.poison(a.out, "poison_y.npy", M2)},
            "flags": {"dtype": "u32", "count": COUNTER_FIRST + counters},
        },
        "tensor_args": [
            {"name": "x", "dtype": "f32", "shape": [K], "init": pack.save_npy(a.out, "x.npy", x)},
            {"name": "w1", "dtype": "bf16", "shape": [M1, K],
             "init": pack.save_npy(a.out, "w1.npy", w1)},
            {"name": "w2", "dtype": "bf16", "shape": [M2, M1],
             "init": pack.save_npy(a.out, "w2.npy", w2)},
            {"name": "h", "dtype": "f32", "shape": [M1], "output": True,
             "init": pack.poison(a.out, "poison_h.npy", M1)},
        ],
        "target": pack.target(a.device_json, "samples/wrappers/gemv_chain/make.py"),
        "artifact_fingerprint": f"artifact:gemv_chain:seed{a.seed}",
    }
    pack.copy_kernel(HERE, a.out)
    pack.write_program(a.out, program)
    with open(os.path.join(a.out, "meta.json"), "w") as f:
        json.dump({"sample": "gemv_chain", "seed": a.seed, "s1": float(np.float32(s1)),
                   "s2": float(np.float32(s2))}, f, indent=2)


if __name__ == "__main__":
    main()
