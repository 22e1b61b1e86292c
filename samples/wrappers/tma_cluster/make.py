#!/usr/bin/python3
"""Writes the tma_cluster wrapper program the way a dataflow compiler would: y = s * W x with
W bf16 [M, K] read through a TMA descriptor, on clusters of CLUSTER blocks that split K and add
their partial sums through distributed shared memory; y is an output tensor argument and is
also written to global staging.

    /usr/bin/python3 samples/wrappers/tma_cluster/make.py --out DIR --seed N [--device-json F]

DIR gets program.json, kernel.cu, x.npy (f32), w.npy (raw bf16 bits), NaN poison for what the
kernel writes, and meta.json (the scale) for scripts/check_wrappers.py.

Package layout (kernel.cu reads the same records):
  instructions  16-byte tasks   {op=1, tile, coord, xslot}
  task_coords   16-byte records {row0, k0, k_boxes, 0}: the block's K part of one row tile
  slots         32-byte records {kind, smem_offset, bytes, mbar_offset, arrive_count, 0, 0, 0},
                per queue NSLOT TMA stage slots (kind 1) then 2 exchange slots (kind 2)
  barrier_init  per queue: its stage slots, in ring order
  args          {cluster_size, tensor_args, w_arg, x_arg, y_arg, k, m, scale f32}
  tma           w_map over w: dims [K, M], box [256, 16], no swizzle
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

M, K = 1024, 4096
BOX_K, BOX_ROWS = 256, 16       # the TMA box; kernel.cu's kBoxK and kBoxRows
THREADS = 256
NSLOT = 4                       # TMA ring depth per block
STAGE_BYTES = BOX_K * BOX_ROWS * 2
XBYTES = 64                     # one exchange slot: BOX_ROWS partial sums, f32, 64-byte spaced
W_ARG, X_ARG, Y_ARG = 0, 1, 2   # tensor-argument indices


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, required=True)
    ap.add_argument("--device-json")
    ap.add_argument("--cluster", type=int, choices=(2, 4), default=4)
    ap.add_argument("--clusters", type=int, default=16)
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    rng = np.random.default_rng(a.seed)
    scale = 1.0 / np.sqrt(K)
    queues = a.cluster * a.clusters
    k_part = K // a.cluster
    assert k_part % BOX_K == 0 and M % BOX_ROWS == 0

    # Row tile t goes to cluster t % clusters; block r of that cluster takes K part r of it.
    # All blocks of a cluster hold the same tiles in the same order (the exchange needs it).
    # Exchange slots alternate per task, so a slot is rewritten only two cluster barriers later.
    per_q = NSLOT + 2
    coords, queue_tasks = [], [[] for _ in range(queues)]
    for t in range(M // BOX_ROWS):
        cl = t % a.clusters
        for r in range(a.cluster):
            q = cl * a.cluster + r
            xslot = q * per_q + NSLOT + len(queue_tasks[q]) % 2
            queue_tasks[q].append([1, t, len(coords), xslot])
            coords.append([t * BOX_ROWS, r * k_part, k_part // BOX_K, 0])
    instructions = [rec for q in queue_tasks for rec in q]
    offsets = np.cumsum([0] + [len(q) for q in queue_tasks[:-1]]).astype(np.int32)
    lengths = np.array([len(q) for q in queue_tasks], dtype=np.int32)

    # Shared memory: NSLOT stages of STAGE_BYTES (128-byte aligned for TMA), two exchange
    # slots, then the stage mbarriers. Every block has the same layout, so the leader finds a
    # peer's exchange slot at its own offset.
    xbase = NSLOT * STAGE_BYTES
    mbar_base = xbase + 2 * XBYTES
    slots = []
    for _ in range(queues):
        slots += [[1, s * STAGE_BYTES, STAGE_BYTES, mbar_base + 8 * s, 1, 0, 0, 0]
                  for s in range(NSLOT)]
        slots += [[2, xbase + i * XBYTES, XBYTES, 0, 0, 0, 0, 0] for i in range(2)]
    bi_offsets = np.arange(queues, dtype=np.int32) * NSLOT
    bi_lengths = np.full(queues, NSLOT, dtype=np.int32)
    bi_indices = np.array([q * per_q + s for q in range(queues) for s in range(NSLOT)],
                          dtype=np.int32)
    args = struct.pack("<7If", a.cluster, 3, W_ARG, X_ARG, Y_ARG, K, M, scale)

    w = pack.bf16_bits(rng.uniform(-1, 1, (M, K)))
    x = rng.uniform(-1, 1, K).astype(np.float32)

    program = {
        "format": "amk.wrapper",
        "version": 1,
        "name": "tma_cluster",
        "description": "y = s W x: 2-D TMA boxes of bf16 W through mbarrier slots, clusters split "
                       "K and reduce through distributed shared memory",
        "wrapper": {"kernel_name": "tc_main", "source_path": "kernel.cu",
                    "defines": [f"TC_CLUSTER={a.cluster}", f"TC_THREADS={THREADS}"]},
        "launch": {"queues": queues, "block_dim": [THREADS],
                   "dynamic_smem_bytes": mbar_base + 8 * NSLOT, "cluster_size": a.cluster,
                   "scheduling_policy": "load_balancing", "timeout_ms": 5000},
        "package": {
            "instructions": pack.inline("u8", pack.records("<u4", instructions), 16),
            "queue_offsets": pack.inline("i32", offsets),
            "queue_lengths": pack.inline("i32", lengths),
            "slots": pack.inline("u8", pack.records("<u4", slots), 32),
            "barrier_init_offsets": pack.inline("i32", bi_offsets),
            "barrier_init_lengths": pack.inline("i32", bi_lengths),
            "barrier_init_indices": pack.inline("i32", bi_indices),
            "args": pack.inline("u8", np.frombuffer(args, dtype=np.uint8)),
            "task_coords": pack.inline("u8", pack.records("<i4", coords), 16),
            "global_staging": {"dtype": "f32", "count": M,
                               "init": pack.poison(a.out, "poison_staging.npy", M)},
            "flags": {"dtype": "u32", "count": 1},
        },
        "tensor_args": [
            {"name": "w", "dtype": "bf16", "shape": [M, K], "init": pack.save_npy(a.out, "w.npy", w)},
            {"name": "x", "dtype": "f32", "shape": [K], "init": pack.save_npy(a.out, "x.npy", x)},
            {"name": "y", "dtype": "f32", "shape": [M], "output": True,
             "init": pack.poison(a.out, "poison_y.npy", M)},
        ],
        "tma": [{"name": "w_map", "tensor": "w", "dims": [K, M], "box": [BOX_K, BOX_ROWS]}],
        "target": pack.target(a.device_json, "samples/wrappers/tma_cluster/make.py"),
        "artifact_fingerprint": f"artifact:tma_cluster:c{a.cluster}:seed{a.seed}",
    }
    pack.copy_kernel(HERE, a.out)
    pack.write_program(a.out, program)
    with open(os.path.join(a.out, "meta.json"), "w") as f:
        json.dump({"sample": "tma_cluster", "seed": a.seed, "scale": float(np.float32(scale))},
                  f, indent=2)


if __name__ == "__main__":
    main()
