#!/usr/bin/env python3
"""Writes wrapper.json, the valid sample wrapper program of the unit tests, the way a dataflow
compiler would: its launch package packed with struct and carried inline as base64.

    /usr/bin/python3 tests/wrapper/sample/make_sample.py
"""
import base64
import json
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))


def b64(data):
    return base64.b64encode(data).decode()


def array(dtype, fmt, values, **extra):
    data = struct.pack("<" + fmt * len(values), *values)
    return dict(dtype=dtype, count=len(values), **extra, data=b64(data))


QUEUES = 2
# Four 16-byte task records (op, a, b, out): two per queue.
tasks = [(1, 0, 0, 0), (1, 1, 0, 1), (1, 2, 0, 2), (1, 3, 0, 3)]
instructions = b"".join(struct.pack("<4I", *t) for t in tasks)

program = {
    "format": "amk.wrapper",
    "version": 1,
    "name": "sample_dataflow",
    "description": "two queues of two tasks; mbarrier slots; one TMA map over w",
    "wrapper": {"kernel_name": "df_main", "source_path": "kernel.cu", "defines": ["DF_TILE=64", "DF_FAST"]},
    "launch": {
        "queues": QUEUES,
        "block_dim": [128],
        "dynamic_smem_bytes": 1024,
        "cluster_size": 2,
        "scheduling_policy": "load_balancing",
        "timeout_ms": 5000,
    },
    "package": {
        "instructions": {"dtype": "u8", "count": len(instructions), "record_bytes": 16,
                         "data": b64(instructions)},
        "queue_offsets": array("i32", "i", [0, 2]),
        "queue_lengths": array("i32", "i", [2, 2]),
        "slots": {"dtype": "u8", "count": 64, "record_bytes": 16, "init": {"kind": "zeros"}},
        "barrier_init_offsets": array("i32", "i", [0, 1]),
        "barrier_init_lengths": array("i32", "i", [1, 1]),
        "barrier_init_indices": array("i32", "i", [0, 2]),
        "args": array("f32", "f", [0.5, 1.0, 1.5, 2.0]),
        "input_slots": array("i32", "i", [1, 3]),
        "task_coords": array("i32", "i", [0, 0, 0, 1, 1, 0, 1, 1], record_bytes=8),
        "global_staging": {"dtype": "f32", "count": 16},
        "flags": {"dtype": "u32", "count": 4},
    },
    "tensor_args": [
        {"name": "x", "dtype": "f32", "shape": [64], "init": {"kind": "random", "seed": 1}},
        {"name": "w", "dtype": "bf16", "shape": [16, 64],
         "init": {"kind": "random", "seed": 2, "low": -0.5, "high": 0.5}},
        {"name": "y", "dtype": "f32", "shape": [16], "output": True},
    ],
    "tma": [{"name": "w_map", "tensor": "w", "dims": [64, 16], "box": [64, 8]}],
    "target": {
        "arch": "sm_90a",
        "sm_count": 132,
        "max_shared_memory_per_block": 49152,
        "max_shared_memory_per_block_optin": 232448,
        "max_shared_memory_per_sm": 233472,
        "cluster_launch": True,
        "compiler_version": "nvcc 13.0",
        "fingerprint": "target:sm_90a:132:232448:cluster",
    },
    "artifact_fingerprint": "artifact:sample_dataflow:1",
}

with open(os.path.join(HERE, "wrapper.json"), "w") as f:
    json.dump(program, f, indent=2)
    f.write("\n")
