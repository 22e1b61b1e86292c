"""What both sample generators share: the target snapshot (from `amk devices --json` or the
H100/H200 defaults), inline package arrays, bf16 rounding and .npy files.

Plain numpy; run with /usr/bin/python3.
"""
import base64
import json
import os
import shutil

import numpy as np

# sm_90a as on an H100 SXM or H200 (the GPU machine's values) when no device is given.
DEFAULT_TARGET = {
    "arch": "sm_90a",
    "sm_count": 132,
    "max_shared_memory_per_block": 49152,
    "max_shared_memory_per_block_optin": 232448,
    "max_shared_memory_per_sm": 233472,
    "cluster_launch": True,
}


def target(device_json, compiler):
    """The program's target snapshot: device 0 of `amk devices --json` when one is listed."""
    t = dict(DEFAULT_TARGET)
    if device_json:
        with open(device_json) as f:
            devices = json.load(f).get("devices", [])
        if devices:
            d = devices[0]
            t = {
                "arch": d["arch"],
                "sm_count": d["sm_count"],
                "max_shared_memory_per_block": d["smem_per_block_bytes"],
                "max_shared_memory_per_block_optin": d["smem_per_block_optin_bytes"],
                "max_shared_memory_per_sm": d["smem_per_sm_bytes"],
                "cluster_launch": bool(d["cluster_launch"]),
            }
    t["compiler_version"] = compiler
    t["fingerprint"] = "target:{}:{}:{}:{}".format(
        t["arch"], t["sm_count"], t["max_shared_memory_per_block_optin"],
        "cluster" if t["cluster_launch"] else "nocluster")
    return t


def inline(dtype, values, record_bytes=None):
    """A package array carried inline: `values` as a numpy array of the dtype's layout."""
    a = np.ascontiguousarray(values)
    elem = {"u8": 1, "i32": 4, "u32": 4, "f32": 4}[dtype]
    out = {"dtype": dtype, "count": a.nbytes // elem}
    if record_bytes is not None:
        out["record_bytes"] = record_bytes
    out["data"] = base64.b64encode(a.tobytes()).decode()
    return out


def records(dtype, rows):
    """Fixed-size records of 32-bit fields (lists of ints and floats per record)."""
    return np.array(rows, dtype=dtype).view(np.uint8).reshape(-1)


def bf16_bits(x):
    """float32 -> bf16 bit patterns (uint16), rounded to nearest even (no NaN inputs)."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    u = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    return u.astype(np.uint16)


def bf16_to_f32(bits):
    return (np.asarray(bits, dtype=np.uint32) << 16).view(np.float32)


def save_npy(out_dir, name, array):
    np.save(os.path.join(out_dir, name), np.ascontiguousarray(array))
    return {"kind": "npy", "path": name}


def poison(out_dir, name, count):
    """NaN-filled f32 contents (JSON has no NaN): an element the kernel fails to write stays NaN."""
    return save_npy(out_dir, name, np.full(count, np.nan, dtype=np.float32))


def copy_kernel(here, out_dir):
    shutil.copyfile(os.path.join(here, "kernel.cu"), os.path.join(out_dir, "kernel.cu"))


def write_program(out_dir, program):
    with open(os.path.join(out_dir, "program.json"), "w") as f:
        json.dump(program, f, indent=2)
        f.write("\n")
