#!/usr/bin/env python3
"""Checks amk's Llama decode step (`amk gen llama`) against an independent numpy implementation.

    /usr/bin/python3 scripts/check_llama.py --amk build/default/amk [--backend cpu|cuda]
        [--preset tiny] [--context 16] [--seed 0] [--token 1] [--layers N] [--fused | --unfused | --rope-ops]
        [--attn-chunks N] [--combine steps|oproj] [--combine-heads N] [--mlp-act f32|bf16]
        [--from [--shards N] [--tied]]

What it does:
1. `amk gen llama --preset P --write-weights DIR/weights.safetensors -o DIR/llama.json`: the
   seeded weights and the KV cache prefill go into a safetensors file (HF tensor names plus
   `amk.kv.layers.N.{k,v}`, config in the `amk.config` metadata) that the program reads.
2. `amk run DIR/llama.json --backend B --save-inputs -o DIR/out`.
3. Recomputes the whole decode step here, in numpy float64, from the safetensors file (read by
   hand: this script never looks at amk's buffers except to compare): a Hugging Face style
   Llama forward for one token at position context-1 with the given KV cache (embedding,
   RMSNorm, q/k/v projections, RoPE with Llama 3 frequency scaling as in transformers'
   `_compute_llama3_parameters` and `rotate_half`, the new k/v row joining the cached ones
   unrounded (amk's fused (default) and unfused layers take it from the projections) or, with
   --rope-ops, rounded to bf16 as the cache stores it (kv_append runs before attention), grouped-query attention with a plain softmax over all
   positions, o_proj + residual, SwiGLU MLP + residual, final norm, lm_head (tied to the
   embedding for llama-3.2-1b)).
4. Compares: the saved inputs against the file (both readers agree), the logits by normalized
   error ||amk - numpy|| / ||numpy|| (amk keeps f32 activations over the same bf16 weights, so
   the difference is f32 rounding: tolerance 1e-4), and the next token exactly.

With --from, step 1 instead writes a small Hugging Face checkpoint folder here (config.json with
its own shape, llama3 rope scaling and tie_word_embeddings; seeded bf16 weights as
model.safetensors, or with --shards N as N shards and model.safetensors.index.json; --tied: no
lm_head.weight) and runs `amk gen llama --from DIR`; the KV prefill, seeded random by amk, is
taken from the run's saved inputs.

With --steps N (and --prompt IDS), the program is a generation (`amk gen llama --steps N
--prompt IDS --all-logits`): one run decodes the prompt token by token and then N new tokens,
the cache starting empty. The script runs the same greedy loop in numpy (each step's k/v row
enters its own attention unrounded and is stored in the cache rounded to bf16, as amk's
kv_append stores it, except that a value within f32 noise of a bf16 rounding midpoint takes the
rounding amk stored, read from the run's caches; the prompt's tokens are teacher-forced) and
compares every step's logits (normalized error) and the generated ids exactly, printing each step's top-2 margin.

Exit 0 on success, 1 on a mismatch, 2 when amk fails.
"""
import argparse
import json
import os
import struct
import subprocess
import sys
import tempfile

import numpy as np

F64 = np.float64


def bf16_round(a):
    """Rounds to bf16 (nearest even), returned as float64."""
    bits = np.asarray(a, dtype=np.float32).view(np.uint32).astype(np.uint64)
    r = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint32) << 16
    return r.astype(np.uint32).view(np.float32).astype(F64)


def read_safetensors(path):
    """A .safetensors file read by hand: {name: float64 array}, metadata."""
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        data = f.read()
    meta = header.pop("__metadata__", {})
    out = {}
    for name, e in header.items():
        b, end = e["data_offsets"]
        raw = data[b:end]
        if e["dtype"] == "BF16":
            u = np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16
            a = u.view(np.float32)
        elif e["dtype"] == "F16":
            a = np.frombuffer(raw, dtype="<f2")
        elif e["dtype"] == "F32":
            a = np.frombuffer(raw, dtype="<f4")
        else:
            raise ValueError(f"{name}: dtype {e['dtype']}")
        out[name] = a.astype(F64).reshape(e["shape"])
    return out, meta


def to_bf16_bits(a):
    """float array -> bf16 bit patterns (round to nearest even), uint16."""
    bits = np.asarray(a, dtype=np.float32).view(np.uint32).astype(np.uint64)
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)


def write_safetensors(path, tensors):
    """{name: float array} written as BF16 tensors, in order."""
    header, blobs, off = {}, [], 0
    for name, a in tensors.items():
        raw = to_bf16_bits(a).astype("<u2").tobytes()
        header[name] = {"dtype": "BF16", "shape": list(a.shape), "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    text = json.dumps(header).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


# The shape of the checkpoint --from writes: none of amk's presets, GQA, llama3 rope scaling.
HF_CONFIG = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_act": "silu",
    "hidden_size": 64, "intermediate_size": 160, "num_hidden_layers": 2,
    "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 128,
    "rms_norm_eps": 1e-5, "rope_theta": 500000.0, "max_position_embeddings": 256,
    "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                     "high_freq_factor": 4.0, "original_max_position_embeddings": 64},
    "attention_bias": False, "mlp_bias": False, "torch_dtype": "bfloat16",
}


def write_hf_checkpoint(folder, seed, shards, tied):
    """A Hugging Face Llama folder: config.json and seeded bf16 weights (one file or shards)."""
    cfg = dict(HF_CONFIG, tie_word_embeddings=tied)
    H, F, V = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
    hd = H // cfg["num_attention_heads"]
    Q, KV = cfg["num_attention_heads"] * hd, cfg["num_key_value_heads"] * hd
    rng = np.random.default_rng(seed)
    w = lambda *shape: rng.normal(0.0, 0.05, shape)
    t = {"model.embed_tokens.weight": w(V, H)}
    for l in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{l}."
        t[p + "input_layernorm.weight"] = rng.uniform(0.8, 1.2, H)
        t[p + "self_attn.q_proj.weight"] = w(Q, H)
        t[p + "self_attn.k_proj.weight"] = w(KV, H)
        t[p + "self_attn.v_proj.weight"] = w(KV, H)
        t[p + "self_attn.o_proj.weight"] = w(H, Q)
        t[p + "post_attention_layernorm.weight"] = rng.uniform(0.8, 1.2, H)
        t[p + "mlp.gate_proj.weight"] = w(F, H)
        t[p + "mlp.up_proj.weight"] = w(F, H)
        t[p + "mlp.down_proj.weight"] = w(H, F)
    t["model.norm.weight"] = rng.uniform(0.8, 1.2, H)
    if not tied:
        t["lm_head.weight"] = w(V, H)
    os.makedirs(folder, exist_ok=True)
    json.dump(cfg, open(os.path.join(folder, "config.json"), "w"), indent=2)
    if shards <= 1:
        write_safetensors(os.path.join(folder, "model.safetensors"), t)
        return
    names = list(t)
    weight_map = {}
    for i in range(shards):
        file = f"model-{i + 1:05d}-of-{shards:05d}.safetensors"
        part = names[i::shards]
        write_safetensors(os.path.join(folder, file), {n: t[n] for n in part})
        weight_map.update({n: file for n in part})
    json.dump({"metadata": {"total_size": 0}, "weight_map": weight_map},
              open(os.path.join(folder, "model.safetensors.index.json"), "w"), indent=2)


def read_hf_checkpoint(folder):
    """{name: float64 array} of every weights file of the folder, and its config.json."""
    tensors = {}
    for f in sorted(os.listdir(folder)):
        if f.endswith(".safetensors"):
            tensors.update(read_safetensors(os.path.join(folder, f))[0])
    return tensors, json.load(open(os.path.join(folder, "config.json")))


def rmsnorm(x, w, eps):
    return x / np.sqrt(np.mean(x * x) + eps) * w


def silu(x):
    return x / (1.0 + np.exp(-x))


def llama3_inv_freq(cfg):
    """transformers' _compute_llama3_parameters (plain RoPE when factor is 0)."""
    hd = cfg["head_dim"]
    inv_freq = 1.0 / (cfg["rope_theta"] ** (np.arange(0, hd, 2, dtype=F64) / hd))
    rs = cfg["rope_scaling"]
    factor = rs["factor"]
    if not factor:
        return inv_freq
    low, high, orig = rs["low_freq_factor"], rs["high_freq_factor"], rs["original_max_position_embeddings"]
    low_freq_wavelen = orig / low
    high_freq_wavelen = orig / high
    wavelen = 2 * np.pi / inv_freq
    inv_freq_llama = np.where(wavelen > low_freq_wavelen, inv_freq / factor, inv_freq)
    smooth = (orig / wavelen - low) / (high - low)
    smoothed = (1 - smooth) * inv_freq_llama / factor + smooth * inv_freq_llama
    is_medium = ~(wavelen < high_freq_wavelen) & ~(wavelen > low_freq_wavelen)
    return np.where(is_medium, smoothed, inv_freq_llama)


def rope(x, position, inv_freq):
    """x: [heads, hd]; HF apply_rotary_pos_emb with rotate_half."""
    freqs = position * inv_freq
    emb = np.concatenate([freqs, freqs])
    cos, sin = np.cos(emb), np.sin(emb)
    half = x.shape[-1] // 2
    rot = np.concatenate([-x[..., half:], x[..., :half]], axis=-1)
    return x * cos + rot * sin


def decode_step(t, cfg, token, pos, attend_rows, mlp_bf16=False):
    """One decode step of `token` at position `pos`; returns logits [vocab]. attend_rows(l, k, v)
    gives layer l's keys and values [nkv, n, hd] to attend, the step's rotated k and v among
    them. mlp_bf16: the MLP activation is stored in bf16 (--mlp-act bf16), so it is rounded as
    amk stores it."""
    L = cfg["num_hidden_layers"]
    nh, nkv, hd = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
    eps, group = cfg["rms_norm_eps"], nh // nkv
    inv_freq = llama3_inv_freq(cfg)
    embed = t["model.embed_tokens.weight"]
    x = embed[token].copy()
    for l in range(L):
        p = f"model.layers.{l}."
        xn = rmsnorm(x, t[p + "input_layernorm.weight"], eps)
        q = (t[p + "self_attn.q_proj.weight"] @ xn).reshape(nh, hd)
        k = (t[p + "self_attn.k_proj.weight"] @ xn).reshape(nkv, hd)
        v = (t[p + "self_attn.v_proj.weight"] @ xn).reshape(nkv, hd)
        q, k = rope(q, pos, inv_freq), rope(k, pos, inv_freq)
        kc, vc = attend_rows(l, k, v)
        attn = np.empty((nh, hd))
        for h in range(nh):
            g = h // group  # repeat_kv: kv head g serves query heads g*group .. g*group+group-1
            s = kc[g] @ q[h] / np.sqrt(hd)
            w = np.exp(s - s.max())
            attn[h] = (w / w.sum()) @ vc[g]
        h_ = t[p + "self_attn.o_proj.weight"] @ attn.reshape(-1) + x
        hn = rmsnorm(h_, t[p + "post_attention_layernorm.weight"], eps)
        act = silu(t[p + "mlp.gate_proj.weight"] @ hn) * (t[p + "mlp.up_proj.weight"] @ hn)
        if mlp_bf16:
            act = bf16_round(act)
        x = t[p + "mlp.down_proj.weight"] @ act + h_
    xf = rmsnorm(x, t["model.norm.weight"], eps)
    head = embed if cfg["tie_word_embeddings"] else t["lm_head.weight"]
    return head @ xf


def forward(t, cfg, new_row_f32, mlp_bf16=False):
    """One decode step at position context-1 over the file's KV cache; returns logits [vocab].
    new_row_f32: the step's own k/v row enters attention unrounded (amk's fused (default) and
    unfused layers take it from the projections); else it is read back from the bf16 cache
    (--rope-ops, where kv_append runs first)."""
    pos = cfg["position"]

    def rows(l, k, v):
        kc = t[f"amk.kv.layers.{l}.k"].copy()  # [nkv, T, hd]
        vc = t[f"amk.kv.layers.{l}.v"].copy()
        kc[:, pos], vc[:, pos] = (k, v) if new_row_f32 else (bf16_round(k), bf16_round(v))
        return kc[:, : pos + 1], vc[:, : pos + 1]

    return decode_step(t, cfg, cfg["token"], pos, rows, mlp_bf16)


TIE_WINDOW = 1e-5  # relative distance from a bf16 midpoint within which f32 noise decides


def generate(t, cfg, prompt, steps, kv_f32=False, amk_kv=None):
    """The greedy loop from an empty cache: every step's logits, the generated ids and how many
    cached values took amk's rounding. The cache stores each step's k/v rows rounded to bf16
    (amk's default), or unrounded with kv_f32; the step's own row enters its attention unrounded.
    A value within TIE_WINDOW of the midpoint between two bf16 neighbours rounds either way
    within f32 noise; there the cache takes amk's stored value (amk_kv, its final caches), so one
    such tie does not make every later step differ."""
    L, nkv, hd = cfg["num_hidden_layers"], cfg["num_key_value_heads"], cfg["head_dim"]
    kc = [np.zeros((nkv, 0, hd)) for _ in range(L)]
    vc = [np.zeros((nkv, 0, hd)) for _ in range(L)]
    ties = [0]

    def store(a, name, pos):
        if kv_f32:
            return a
        r = bf16_round(a)
        if amk_kv is None:
            return r
        got = amk_kv[name][:, pos].astype(F64)
        tie = (got != r) & (np.abs(a - (r + got) / 2) <= TIE_WINDOW * np.abs(a))
        ties[0] += int(tie.sum())
        return np.where(tie, got, r)

    def rows(l, k, v):
        pos = kc[l].shape[1]
        keys = np.concatenate([kc[l], k[:, None]], axis=1)
        vals = np.concatenate([vc[l], v[:, None]], axis=1)
        kc[l] = np.concatenate([kc[l], store(k, f"amk.kv.layers.{l}.k", pos)[:, None]], axis=1)
        vc[l] = np.concatenate([vc[l], store(v, f"amk.kv.layers.{l}.v", pos)[:, None]], axis=1)
        return keys, vals

    all_logits, ids, token = [], [], prompt[0]
    for s in range(len(prompt) + steps - 1):
        logits = decode_step(t, cfg, token, s, rows)
        all_logits.append(logits)
        token = prompt[s + 1] if s + 1 < len(prompt) else int(np.argmax(logits))
        if s + 1 >= len(prompt):
            ids.append(token)
    return all_logits, ids, ties[0]


def mark_cache_outputs(prog):
    """Makes a generation program's KV caches outputs, so the loop can read amk's stored rows."""
    with open(prog) as f:
        p = json.load(f)
    for b in p["buffers"]:
        if b["name"].startswith("amk.kv."):
            b["output"] = True
    with open(prog, "w") as f:
        json.dump(p, f)


def check_generation(args, outputs, tensors, cfg, prompt):
    """Compares a generation run with the numpy loop; True when every check holds."""
    amk_kv = {n: a for n, a in outputs.items() if n.startswith("amk.kv.")}
    want_logits, want_ids, ties = generate(tensors, cfg, prompt, args.steps,
                                           args.kv_dtype == "f32", amk_kv)
    if args.kv_dtype == "bf16":
        print(f"ok   bf16 cache: {ties} value(s) within {TIE_WINDOW:.0e} of a rounding midpoint "
              "stored as amk stored them")
    got_all = outputs["all_logits"].astype(F64).reshape(len(want_logits), -1)
    got_ids = [int(i) for i in outputs["ids"].ravel()]
    worst, near = 0.0, []
    for s, want in enumerate(want_logits):
        err = np.linalg.norm(got_all[s] - want) / max(np.linalg.norm(want), 1e-30)
        worst = max(worst, err if np.isfinite(err) else np.inf)
        top2 = np.sort(want)[-2:]
        near.append(top2[1] - top2[0])
    good = bool(worst <= args.tolerance)
    print(f"{'ok  ' if good else 'FAIL'} logits of {len(want_logits)} steps: worst normalized error "
          f"{worst:.2e} (tolerance {args.tolerance:.0e})")
    same = got_ids == want_ids
    print(f"{'ok  ' if same else 'FAIL'} generated ids: amk {got_ids}, numpy {want_ids} "
          f"(smallest top-2 margin {min(near[len(prompt) - 1:]):.3g})")
    return good and same


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--amk", required=True)
    ap.add_argument("--backend", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--preset", default="tiny")
    ap.add_argument("--context", type=int)
    ap.add_argument("--layers", type=int)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--token", type=int, default=1)
    ap.add_argument("--tolerance", type=float, default=1e-4)
    ap.add_argument("--keep", help="work in this folder and keep it")
    ap.add_argument("--fused", action="store_true",
                    help="generate the fused layer (amk gen llama --fused; amk's default too)")
    ap.add_argument("--unfused", action="store_true",
                    help="generate the unfused layer (amk gen llama --unfused)")
    ap.add_argument("--rope-ops", action="store_true",
                    help="generate the layer with rope and kv_append instructions (amk gen llama --rope-ops)")
    ap.add_argument("--attn-chunks", type=int,
                    help="attention chunks per kv head (amk gen llama --attn-chunks)")
    ap.add_argument("--combine", choices=["steps", "oproj"],
                    help="how attention's chunks are merged (amk gen llama --combine; default auto)")
    ap.add_argument("--combine-heads", type=int,
                    help="kv heads a combine merges (amk gen llama --combine-heads)")
    ap.add_argument("--mlp-act", choices=["f32", "bf16"],
                    help="dtype of the MLP activation (amk gen llama --mlp-act; default f32)")
    ap.add_argument("--vm", help="VM config overrides for the run (amk run --vm FIELD=VALUE,...)")
    ap.add_argument("--from", dest="from_hf", action="store_true",
                    help="write a small Hugging Face checkpoint folder and generate from it "
                         "(amk gen llama --from)")
    ap.add_argument("--shards", type=int, default=1,
                    help="--from: weights in this many shards with model.safetensors.index.json")
    ap.add_argument("--tied", action="store_true",
                    help="--from: tie_word_embeddings true and no lm_head.weight")
    ap.add_argument("--steps", type=int,
                    help="a generation of this many new tokens (amk gen llama --steps --all-logits)")
    ap.add_argument("--kv-dtype", choices=["bf16", "f32"], default="bf16",
                    help="--steps: the KV caches' dtype (amk gen llama --kv-dtype)")
    ap.add_argument("--prompt", default="",
                    help="--steps: the prompt's ids, comma-separated (default: --token)")
    args = ap.parse_args()
    prompt = [int(x) for x in args.prompt.split(",") if x] or [args.token]

    with tempfile.TemporaryDirectory() as tmp:
        work = args.keep or tmp
        os.makedirs(work, exist_ok=True)
        prog, weights, out = (os.path.join(work, n) for n in ("llama.json", "weights.safetensors", "out"))
        hf = os.path.join(work, "hf")
        if args.from_hf:
            write_hf_checkpoint(hf, args.seed, args.shards, args.tied)
            gen = [args.amk, "-q", "gen", "llama", "--from", hf]
        else:
            gen = [args.amk, "-q", "gen", "llama", "--preset", args.preset,
                   "--write-weights", weights]
        gen += ["--seed", str(args.seed), "--token", str(args.token), "-o", prog]
        if args.context:
            gen += ["--context", str(args.context)]
        if args.layers:
            gen += ["--layers", str(args.layers)]
        if args.fused:
            gen += ["--fused"]
        if args.unfused:
            gen += ["--unfused"]
        if args.rope_ops:
            gen += ["--rope-ops"]
        if args.attn_chunks:
            gen += ["--attn-chunks", str(args.attn_chunks)]
        if args.combine:
            gen += ["--combine", args.combine]
        if args.combine_heads is not None:
            gen += ["--combine-heads", str(args.combine_heads)]
        if args.mlp_act:
            gen += ["--mlp-act", args.mlp_act]
        if args.steps:
            gen += ["--steps", str(args.steps), "--prompt", ",".join(map(str, prompt)),
                    "--all-logits", "--kv-dtype", args.kv_dtype]
        run = [args.amk, "-q", "run", prog, "--backend", args.backend, "--save-inputs", "-o", out]
        if args.vm:
            run += ["--vm", args.vm]
        for cmd in (gen, run):
            r = subprocess.run(cmd, capture_output=True, text=True)
            if r.returncode != 0:
                print(f"FAIL: {' '.join(cmd)} exited {r.returncode}: {r.stderr.strip()}")
                return 2
            if cmd is gen and args.steps:
                mark_cache_outputs(prog)

        manifest = json.load(open(os.path.join(out, "manifest.json")))
        outputs = {e["name"]: np.load(os.path.join(out, e["file"])) for e in manifest["outputs"]}
        inputs = {e["name"]: e["file"] for e in manifest["inputs"]}
        if args.from_hf:
            tensors, cfg = read_hf_checkpoint(hf)
            context = args.context or min(1024, cfg["max_position_embeddings"])
            cfg.update(preset="hf", context=context, position=context - 1, token=args.token,
                       head_dim=cfg["hidden_size"] // cfg["num_attention_heads"])
            kv = {n: np.load(os.path.join(out, f)).astype(F64) for n, f in inputs.items()
                  if n.startswith("amk.kv.")}
        else:
            tensors, meta = read_safetensors(weights)
            cfg = json.loads(meta["amk.config"])
            kv = {}

        ok = True
        # Both readers of the file agree (amk's saved initial buffers vs this script's parse).
        bad = [n for n, a in tensors.items()
               if n in inputs and not np.array_equal(np.load(os.path.join(out, inputs[n])).astype(F64).ravel(), a.ravel())]
        print(f"{'ok  ' if not bad else 'FAIL'} inputs: {len(tensors)} tensors read identically"
              + (f" (differ: {bad[:4]})" if bad else ""))
        ok &= not bad

        if args.steps:
            ok &= check_generation(args, outputs, tensors, cfg, prompt)
            print(f"{cfg['preset']}: {cfg['num_hidden_layers']} layers, generation of {args.steps} "
                  f"after a prompt of {len(prompt)}, backend {args.backend}: "
                  f"{'PASS' if ok else 'FAIL'}")
            return 0 if ok else 1

        want = forward({**tensors, **kv}, cfg, new_row_f32=not args.rope_ops, mlp_bf16=args.mlp_act == "bf16")
        got = outputs["act.logits"].astype(F64).ravel()
        err = np.linalg.norm(got - want) / max(np.linalg.norm(want), 1e-30)
        good = bool(np.isfinite(err) and err <= args.tolerance)
        print(f"{'ok  ' if good else 'FAIL'} logits: normalized error {err:.2e} (tolerance {args.tolerance:.0e})")
        ok &= good
        tok, want_tok = int(outputs["next_token"].ravel()[0]), int(np.argmax(want))
        top2 = np.sort(want)[-2:]
        print(f"{'ok  ' if tok == want_tok else 'FAIL'} next token: amk {tok}, numpy {want_tok} "
              f"(margin {top2[1] - top2[0]:.3g})")
        ok &= tok == want_tok
        print(f"{cfg['preset']}: {cfg['num_hidden_layers']} layers, context {cfg['context']}, "
              f"backend {args.backend}: {'PASS' if ok else 'FAIL'}")
        return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
