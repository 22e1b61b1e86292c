#!/usr/bin/python3
"""Writes the small wrapper programs of the GPU refusal, hang and fault tests into one folder:

    ok.json            y = 2 x + staging index, one block per queue (the good run)
    spin.json          every block spins until the host sets the abort word (exit 8, timeout)
    spin_deaf.json     spins without polling the abort word (exit 8, launch.hang)
    fault.json         stores through a null pointer (exit 7, launch.fault)
    cluster_limit.json a cluster of 32 blocks, past any kernel's limit (exit 5, device.cluster)
    smem_limit.json    static shared memory + the opt-in maximum of dynamic (exit 5, device.smem)
    too_wide.json      more queues than can be co-resident (exit 5, device.coresidency)
    wrong_target.json  a snapshot with another SM count (exit 5, device.target)

    /usr/bin/python3 tests/gpu/wrappers/make_probe.py OUT_DIR [DEVICES_JSON]
"""
import base64
import copy
import json
import os
import sys

import numpy as np

KERNEL = r"""
#include "amk_wrapper.h"

#ifndef PROBE_MODE
#define PROBE_MODE 0
#endif

// Mode 0: y[i] = 2 x[i] and staging[i] = i for this block's slice. Mode 1: spin until the abort
// word is set. Mode 2: store through a null pointer. Mode 3: spin without looking at the abort
// word. Mode 4: as mode 0 with 2 KiB of static shared memory.
extern "C" __global__ void probe(AMK_WRAPPER_PARAMS) {
#if PROBE_MODE == 4
  __shared__ volatile float pad[512];  // (volatile: the static shared memory stays)
  pad[threadIdx.x % 512] = 0.0f;
  __syncthreads();
#endif
  const amk_wrapper_tensor_arg_t* t = tensor_args;
  const float* x = (const float*)t[0].data;
  float* y = (float*)t[1].data;
  float* staging = (float*)global_staging;
  const unsigned n = (unsigned)t[0].shape[0];
  const unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
#if PROBE_MODE == 1
  while (!amk_wrapper_abort_requested(flags)) {
  }
  return;
#elif PROBE_MODE == 2
  if (i == 0) *(volatile float*)0 = 1.0f;
#elif PROBE_MODE == 3
  for (volatile unsigned k = 0;; k = k + 1) {
  }
#endif
  if (i < n) {
    y[i] = 2.0f * x[i];
    staging[i] = (float)i;
  }
}
"""

QUEUES = 4
BLOCK = 64
N = QUEUES * BLOCK


def b64(a):
    return base64.b64encode(np.ascontiguousarray(a).tobytes()).decode()


def target(devices_json):
    t = {"arch": "sm_90a", "sm_count": 132, "max_shared_memory_per_block": 49152,
         "max_shared_memory_per_block_optin": 232448, "max_shared_memory_per_sm": 233472,
         "cluster_launch": True}
    if devices_json:
        devices = json.load(open(devices_json)).get("devices", [])
        if devices:
            d = devices[0]
            t = {"arch": d["arch"], "sm_count": d["sm_count"],
                 "max_shared_memory_per_block": d["smem_per_block_bytes"],
                 "max_shared_memory_per_block_optin": d["smem_per_block_optin_bytes"],
                 "max_shared_memory_per_sm": d["smem_per_sm_bytes"],
                 "cluster_launch": bool(d["cluster_launch"])}
    t["compiler_version"] = "probe 1"
    t["fingerprint"] = "probe:{}:{}".format(t["arch"], t["sm_count"])
    return t


def program(tgt, mode=0, queues=QUEUES, cluster=1, smem=0, timeout_ms=2000):
    offsets = np.arange(queues, dtype=np.int32)
    return {
        "format": "amk.wrapper", "version": 1, "name": "probe_mode%d" % mode,
        "wrapper": {"kernel_name": "probe", "source_path": "probe.cu",
                    "defines": ["PROBE_MODE=%d" % mode]},
        "launch": {"queues": queues, "block_dim": [BLOCK], "dynamic_smem_bytes": smem,
                   "cluster_size": cluster, "scheduling_policy": "load_balancing",
                   "timeout_ms": timeout_ms},
        "package": {
            "instructions": {"dtype": "u8", "count": 4 * queues, "record_bytes": 4,
                             "data": b64(offsets)},
            "queue_offsets": {"dtype": "i32", "count": queues, "data": b64(offsets)},
            "queue_lengths": {"dtype": "i32", "count": queues,
                              "data": b64(np.ones(queues, np.int32))},
            "global_staging": {"dtype": "f32", "count": N,
                               "init": {"kind": "constant", "value": -1.0}},
            "flags": {"dtype": "u32", "count": 4},
        },
        "tensor_args": [
            {"name": "x", "dtype": "f32", "shape": [N],
             "init": {"kind": "random", "seed": 7, "low": -1.0, "high": 1.0}},
            {"name": "y", "dtype": "f32", "shape": [N], "output": True,
             "init": {"kind": "constant", "value": -3.0}},
        ],
        "target": tgt,
    }


def main():
    out = sys.argv[1]
    tgt = target(sys.argv[2] if len(sys.argv) > 2 else None)
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "probe.cu"), "w") as f:
        f.write(KERNEL)
    wrong = copy.deepcopy(tgt)
    wrong["sm_count"] = tgt["sm_count"] + 1
    progs = {
        "ok": program(tgt),
        "spin": program(tgt, mode=1, timeout_ms=300),
        "spin_deaf": program(tgt, mode=3, timeout_ms=300),
        "fault": program(tgt, mode=2),
        "cluster_limit": program(tgt, queues=32, cluster=32),
        "smem_limit": program(tgt, mode=4, smem=tgt["max_shared_memory_per_block_optin"]),
        "too_wide": program(tgt, queues=65536),
        "wrong_target": dict(program(tgt), target=wrong),
    }
    for name, p in progs.items():
        with open(os.path.join(out, name + ".json"), "w") as f:
            json.dump(p, f, indent=1)


if __name__ == "__main__":
    main()
