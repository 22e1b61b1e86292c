#!/usr/bin/env python3
"""Checks amk's outputs for every sample against numpy, computed independently of amk's ops.

    /usr/bin/python3 scripts/check_samples.py --amk build/default/amk [--backend cpu] [samples/*.json]

For each sample, amk runs it with --save-inputs, so its initial buffers (random, .npy,
safetensors, inline) are written next to the outputs. This script reads those inputs, computes
the expected outputs with numpy in float64 (rounding intermediates to the program's f16 / bf16
buffers where the program stores them), and compares by normalized error
||amk - numpy|| / ||numpy||; integer outputs must match exactly. Exit 0 when every sample
passes, 1 otherwise. The initial-data generators themselves are tested by amk's unit tests.
"""
import argparse
import glob
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

F64 = np.float64


def bf16(a):
    bits = np.asarray(a, dtype=np.float32).view(np.uint32).astype(np.uint64)
    r = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint32) << 16
    return r.astype(np.uint32).view(np.float32).astype(F64)


def f16(a):
    return np.asarray(a, dtype=np.float32).astype(np.float16).astype(F64)


def f32(a):
    return np.asarray(a, dtype=np.float32).astype(F64)


def silu(x):
    return x / (1.0 + np.exp(-x))


def rmsnorm(x, w, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def softmax(x):
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def expect_elementwise_chain(i):
    a, b = i["a"], i["b"]
    s = f32(a + b)
    p = f32(s * a)
    q = f16(0.5 * p)
    return {"out": silu(q) * b}


def expect_gemv_chain(i):
    h1 = f32(i["w1"] @ i["x0"])
    h2 = bf16(i["w2"] @ h1)
    return {"y": i["w3"] @ h2 + i["r"]}


def expect_mlp_block(i):
    x = i["x"]
    xn = f32(rmsnorm(x, i["g"], 1e-5))
    gate, up = f32(i["wg"] @ xn), f32(i["wu"] @ xn)
    h = f32(silu(gate) * up)
    return {"out": i["wd"] @ h + x}


def expect_diamond(i):
    x = i["x"].reshape(8, 64)
    left = f32(-1.5 * x)
    right = f32(softmax(0.5 * x))
    return {"out": left + right, "bias": np.full(4, 7.25)}


def expect_tiny_lm_head(i):
    embed = i["embed"].reshape(96, 64)
    hidden = embed[i["ids"].astype(np.int64)]
    normed = f32(rmsnorm(hidden[1], i["norm_w"], 1e-6))
    logits = embed @ normed
    return {"hidden": hidden, "logits": logits, "next_token": np.array([np.argmax(logits)])}


EXPECT = {
    "elementwise_chain": (expect_elementwise_chain, 1e-5),
    "gemv_chain": (expect_gemv_chain, 2e-3),
    "mlp_block": (expect_mlp_block, 1e-4),
    "diamond": (expect_diamond, 1e-5),
    "tiny_lm_head": (expect_tiny_lm_head, 1e-5),
}


def check(amk, backend, path):
    name = json.load(open(path))["name"]
    if name not in EXPECT:
        print(f"SKIP {path}: no numpy reference for '{name}'")
        return True
    fn, tol = EXPECT[name]
    with tempfile.TemporaryDirectory() as out:
        cmd = [amk, "-q", "run", path, "--backend", backend, "-o", out, "--save-inputs"]
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            print(f"FAIL {path}: amk exited {r.returncode}: {r.stderr.strip()}")
            return False
        manifest = json.load(open(os.path.join(out, "manifest.json")))
        inputs = {e["name"]: np.load(os.path.join(out, e["file"])).astype(F64) for e in manifest["inputs"]}
        outputs = {e["name"]: np.load(os.path.join(out, e["file"])) for e in manifest["outputs"]}
        expected = fn(inputs)
        ok = True
        for key, want in expected.items():
            got = outputs[key]
            want = np.asarray(want).reshape(got.shape)
            if np.issubdtype(got.dtype, np.integer):
                good = np.array_equal(got, want)
                detail = "exact" if good else f"got {got.ravel()[:8]} want {want.ravel()[:8]}"
            else:
                err = np.linalg.norm(got.astype(F64) - want) / max(np.linalg.norm(want), 1e-30)
                good = bool(np.isfinite(err) and err <= tol)
                detail = f"normalized error {err:.2e} (tolerance {tol:.0e})"
            print(f"{'ok  ' if good else 'FAIL'} {name}.{key}: {detail}")
            ok = ok and good
        return ok


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--amk", required=True)
    ap.add_argument("--backend", default="cpu")
    ap.add_argument("samples", nargs="*")
    args = ap.parse_args()
    here = os.path.dirname(os.path.abspath(__file__))
    samples = args.samples or sorted(glob.glob(os.path.join(here, "..", "samples", "*.json")))
    results = [check(args.amk, args.backend, s) for s in samples]
    passed = sum(results)
    print(f"{passed} passed, {len(results) - passed} failed")
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
