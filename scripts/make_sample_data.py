#!/usr/bin/env python3
"""Writes the data files the samples read (deterministic; committed under samples/data).

    /usr/bin/python3 scripts/make_sample_data.py

- samples/data/gemv_chain_x0.npy: f32[512], the input vector of gemv_chain.json.
- samples/data/tiny_lm.safetensors: a bf16 embedding table [96, 64] and an f32 norm weight [64]
  under Hugging Face tensor names, for tiny_lm_head.json. The safetensors container is written
  by hand (8-byte little-endian header length, JSON header, raw little-endian data).
"""
import json
import os
import struct

import numpy as np

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "samples", "data")


def to_bf16_bits(a):
    """float32 -> bf16 bit patterns, round to nearest even (NaN stays NaN)."""
    bits = np.asarray(a, dtype=np.float32).view(np.uint32).astype(np.uint64)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
    return rounded.astype(np.uint16)


def write_safetensors(path, tensors):
    header, blobs, offset = {}, [], 0
    for name, (dtype, shape, data) in tensors.items():
        raw = data.tobytes()
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    header["__metadata__"] = {"format": "pt", "source": "amk scripts/make_sample_data.py"}
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for b in blobs:
            f.write(b)


def main():
    os.makedirs(ROOT, exist_ok=True)
    rng = np.random.default_rng(2026)
    x0 = rng.uniform(-1.0, 1.0, size=512).astype(np.float32)
    np.save(os.path.join(ROOT, "gemv_chain_x0.npy"), x0)

    embed = rng.normal(0.0, 0.5, size=(96, 64)).astype(np.float32)
    norm_w = rng.uniform(0.8, 1.2, size=64).astype(np.float32)
    write_safetensors(
        os.path.join(ROOT, "tiny_lm.safetensors"),
        {
            "model.embed_tokens.weight": ("BF16", embed.shape, to_bf16_bits(embed)),
            "model.norm.weight": ("F32", norm_w.shape, norm_w),
        },
    )


if __name__ == "__main__":
    main()
