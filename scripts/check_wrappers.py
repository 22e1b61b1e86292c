#!/usr/bin/python3
"""Runs the sample wrapper programs (samples/wrappers/*) on the GPU and checks them against numpy.

For each sample: generate it with make.py into a temp folder from a fresh seed (printed; --seed
repeats one), targeting the live device (`amk --json devices`); `amk run --trust-source`; load
global_staging.npy and the output tensor arguments; recompute the result in float64 from the
same .npy inputs; compare by normalized error max|gpu - ref| / max|ref|. A missing output, a
wrong shape or any NaN (the poison of an element nothing wrote) fails. Exit 1 on any failure.

    /usr/bin/python3 scripts/check_wrappers.py [--amk build/default/amk] [--seed N] [--keep]
"""
import argparse
import json
import os
import secrets
import shutil
import subprocess
import sys
import tempfile

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SAMPLES = os.path.join(ROOT, "samples", "wrappers")
# The inputs are exact (bf16 weights are decoded from the same bits the kernel reads), so the
# only difference is f32 accumulation order over at most 4096 terms.
TOLERANCE = 1e-4


def bf16(path):
    return (np.load(path).astype(np.uint32) << 16).view(np.float32).astype(np.float64)


def f64(path):
    return np.load(path).astype(np.float64)


def ref_gemv_chain(d, meta):
    """h = relu(s1 W1 x), y = s2 W2 h; returns {output file: reference}."""
    x, w1, w2 = f64(f"{d}/x.npy"), bf16(f"{d}/w1.npy"), bf16(f"{d}/w2.npy")
    h = np.maximum(meta["s1"] * (w1.reshape(-1, x.size) @ x), 0.0)
    y = meta["s2"] * (w2.reshape(-1, h.size) @ h)
    return {"h.npy": h, "global_staging.npy": y}


def ref_tma_cluster(d, meta):
    """y = s W x, in the output tensor argument y and in global staging."""
    x, w = f64(f"{d}/x.npy"), bf16(f"{d}/w.npy")
    y = meta["scale"] * (w.reshape(-1, x.size) @ x)
    return {"y.npy": y, "global_staging.npy": y}


REFERENCES = {"gemv_chain": ref_gemv_chain, "tma_cluster": ref_tma_cluster}


def compare(out_dir, name, ref):
    """(ok, text) for one output file against its reference."""
    path = os.path.join(out_dir, name)
    if not os.path.exists(path):
        return False, f"{name} missing"
    got = np.load(path).astype(np.float64).reshape(-1)
    if got.shape != ref.shape:
        return False, f"{name} has {got.size} elements, want {ref.size}"
    bad = int(np.count_nonzero(~np.isfinite(got)))
    if bad:
        return False, f"{name} has {bad} NaN/inf elements (first at {int(np.argmax(~np.isfinite(got)))})"
    scale = float(np.max(np.abs(ref)))
    err = float(np.max(np.abs(got - ref))) / (scale if scale > 0 else 1.0)
    return err <= TOLERANCE, f"{name} err {err:.2e}"


def device_json(amk, tmp):
    """`amk --json devices` in a file when it lists a device, else None (make.py's defaults)."""
    r = subprocess.run([amk, "--json", "devices"], capture_output=True, text=True)
    try:
        listed = r.returncode == 0 and json.loads(r.stdout).get("devices")
    except json.JSONDecodeError:
        listed = False
    if not listed:
        return None
    path = os.path.join(tmp, "devices.json")
    with open(path, "w") as f:
        f.write(r.stdout)
    return path


def check(sample, amk, seed, devices, tmp):
    d = os.path.join(tmp, sample)
    make = [sys.executable, os.path.join(SAMPLES, sample, "make.py"), "--out", d, "--seed",
            str(seed)]
    if devices:
        make += ["--device-json", devices]
    subprocess.run(make, check=True)
    out = os.path.join(d, "out")
    r = subprocess.run([amk, "run", os.path.join(d, "program.json"), "--trust-source", "-o", out],
                       capture_output=True, text=True)
    if r.returncode != 0:
        tail = (r.stderr or r.stdout).strip().splitlines()[-3:]
        return False, f"amk run exit {r.returncode}: " + " | ".join(tail)
    with open(os.path.join(d, "meta.json")) as f:
        meta = json.load(f)
    results = [compare(out, name, ref) for name, ref in REFERENCES[sample](d, meta).items()]
    return all(ok for ok, _ in results), ", ".join(text for _, text in results)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--amk", default=os.path.join(ROOT, "build", "default", "amk"))
    ap.add_argument("--seed", type=int, help="repeat one seed (default: a fresh one)")
    ap.add_argument("--keep", action="store_true", help="keep the temp folder and print it")
    ap.add_argument("samples", nargs="*", default=sorted(REFERENCES))
    a = ap.parse_args()
    unknown = sorted(set(a.samples) - set(REFERENCES))
    if unknown:
        ap.error(f"unknown sample(s) {unknown}; known: {sorted(REFERENCES)}")
    seed = a.seed if a.seed is not None else secrets.randbelow(2**31)
    print(f"seed {seed} (repeat with --seed {seed})")
    tmp = tempfile.mkdtemp(prefix="amk_wrappers_")
    failed = 0
    try:
        devices = device_json(a.amk, tmp)
        for sample in a.samples:
            ok, text = check(sample, a.amk, seed, devices, tmp)
            failed += not ok
            print(f"{'ok  ' if ok else 'FAIL'} {sample}: {text} (tolerance {TOLERANCE:g})")
    finally:
        if a.keep:
            print(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
