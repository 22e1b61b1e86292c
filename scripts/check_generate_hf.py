#!/usr/bin/env python3
"""Checks a generation by amk (`amk gen llama --steps N --prompt IDS`, one launch) against
Hugging Face transformers' LlamaForCausalLM on the same weights, on the GPU.

    python3 scripts/check_generate_hf.py --amk build/default/amk --preset llama-3.2-1b \
        [--prompt-len 32] [--steps 128] [--seed S] [--work DIR] [--tolerance 1e-3]

1. Draws a prompt of --prompt-len ids (seed printed), writes the program and its seeded bf16
   weights (`amk gen llama --write-weights`, Hugging Face tensor names, the config in the
   file's metadata) and runs it on the GPU (`amk run`): the generated ids and every step's
   logits (all_logits).
2. Builds LlamaForCausalLM from that config with the same (bf16) weights on the GPU, in float64
   (--dtype; eager attention, no TF32). amk stores its KV cache in bf16, as the weights: the
   reference decodes with a transformers cache that stores each step's K and V rounded to bf16
   too (the step's own row enters its attention unrounded, as in amk). Teacher forcing, one
   step at a time over the prompt followed by amk's ids, gives the logits of every step; each
   step's normalized error ||amk - hf|| / ||hf|| must be within --tolerance. The same with an
   unrounded cache (plain transformers) is printed for information: the cost of the bf16 cache.
3. Greedy: transformers' generate(do_sample=False) from the prompt, with the bf16-storing cache.
   Its ids must equal amk's up to the first step whose top-2 margin (in transformers' logits)
   is within the numeric noise measured in 2 (twice the largest |amk - hf| of that step's
   logits); past such a near tie the sequences may part. Prints how many steps were near ties.

Exit 0 on success, 1 on a mismatch, 2 when amk fails.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np


def run(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        print(f"FAIL: {' '.join(cmd)} exited {r.returncode}: {r.stderr.strip()[-2000:]}")
        sys.exit(2)
    return r.stdout


def bf16_cache(torch, transformers):
    """A DynamicCache that stores K and V rounded to bf16 (amk's cache) and returns the step's
    own rows unrounded."""
    class Bf16Cache(transformers.DynamicCache):
        def update(self, key_states, value_states, layer_idx, cache_kwargs=None):
            r = lambda t: t.to(torch.bfloat16).to(t.dtype)
            k, v = super().update(r(key_states), r(value_states), layer_idx, cache_kwargs)
            n = key_states.shape[-2]
            return (torch.cat([k[..., :-n, :], key_states], dim=-2),
                    torch.cat([v[..., :-n, :], value_states], dim=-2))
    return Bf16Cache()


def teacher_forced(model, tokens, cache, torch):
    """Logits of every step, one token at a time through `cache`: [steps, vocab] float64."""
    out = []
    with torch.no_grad():
        for s, t in enumerate(tokens):
            r = model(input_ids=torch.tensor([[t]], device="cuda"), past_key_values=cache,
                      use_cache=True, position_ids=torch.tensor([[s]], device="cuda"))
            cache = r.past_key_values
            out.append(r.logits[0, -1].double().cpu().numpy())
    return np.stack(out)


def hf_model(weights, torch, transformers, dtype):
    from safetensors import safe_open
    with safe_open(weights, framework="pt") as f:
        cfg = json.loads(f.metadata()["amk.config"])
        state = {k: f.get_tensor(k) for k in f.keys() if not k.startswith("amk.")}
    rs = cfg["rope_scaling"]
    config = transformers.LlamaConfig(
        vocab_size=cfg["vocab_size"], hidden_size=cfg["hidden_size"],
        intermediate_size=cfg["intermediate_size"], num_hidden_layers=cfg["num_hidden_layers"],
        num_attention_heads=cfg["num_attention_heads"],
        num_key_value_heads=cfg["num_key_value_heads"], head_dim=cfg["head_dim"],
        rms_norm_eps=cfg["rms_norm_eps"], rope_theta=cfg["rope_theta"],
        rope_scaling=None if rs["rope_type"] == "default" else {
            "rope_type": "llama3", "factor": rs["factor"], "low_freq_factor": rs["low_freq_factor"],
            "high_freq_factor": rs["high_freq_factor"],
            "original_max_position_embeddings": rs["original_max_position_embeddings"]},
        max_position_embeddings=131072, tie_word_embeddings=cfg["tie_word_embeddings"],
        attention_bias=False, mlp_bias=False, torch_dtype=dtype, attn_implementation="eager")
    with torch.device("cuda"):
        model = transformers.LlamaForCausalLM(config).to(dtype)
    missing, unexpected = model.load_state_dict({k: v.to(dtype) for k, v in state.items()},
                                                strict=False)
    missing = [m for m in missing if not (cfg["tie_word_embeddings"] and m == "lm_head.weight")]
    if missing or unexpected:
        raise SystemExit(f"weights do not fit the model: missing {missing[:4]}, "
                         f"unexpected {unexpected[:4]}")
    if cfg["tie_word_embeddings"]:
        model.tie_weights()
    return model.eval(), cfg


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--amk", required=True)
    ap.add_argument("--preset", default="llama-3.2-1b")
    ap.add_argument("--prompt-len", type=int, default=32)
    ap.add_argument("--steps", type=int, default=128)
    ap.add_argument("--seed", type=int)
    ap.add_argument("--tolerance", type=float, default=1e-3)
    ap.add_argument("--work", help="work in this folder and keep it")
    ap.add_argument("--kv-dtype", default="bf16", choices=["bf16", "f32"],
                    help="amk's KV caches (amk gen llama --kv-dtype): with f32 the reference's "
                         "cache is transformers' own, unrounded")
    ap.add_argument("--dtype", default="float64", choices=["float64", "float32"],
                    help="the reference model's dtype (float64 needs 8 bytes a parameter)")
    args = ap.parse_args()
    seed = args.seed if args.seed is not None else int.from_bytes(os.urandom(4), "little")

    import torch
    import transformers
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False

    with tempfile.TemporaryDirectory() as tmp:
        work = args.work or tmp
        os.makedirs(work, exist_ok=True)
        prog, weights, out = (os.path.join(work, n)
                              for n in ("gen.json", "weights.safetensors", "out"))
        vocab = 128256 if args.preset.startswith("llama-3") else 512
        prompt = np.random.default_rng(seed).integers(0, vocab, args.prompt_len).tolist()
        print(f"seed {seed}: prompt of {len(prompt)} ids, {args.steps} new tokens, {args.preset}")
        run([args.amk, "-q", "gen", "llama", "--preset", args.preset, "--seed", str(seed % 1000),
             "--steps", str(args.steps), "--prompt", ",".join(map(str, prompt)), "--all-logits",
             "--kv-dtype", args.kv_dtype,
             "--write-weights", weights, "-o", prog])
        report = json.loads(run([args.amk, "--json", "run", prog, "--backend", "cuda", "-o", out]))
        manifest = json.load(open(os.path.join(out, "manifest.json")))
        outputs = {e["name"]: np.load(os.path.join(out, e["file"])) for e in manifest["outputs"]}
        amk_ids = [int(i) for i in outputs["ids"].ravel()]
        passes = len(prompt) + args.steps - 1
        amk_logits = outputs["all_logits"].astype(np.float64).reshape(passes, -1)
        launch_ms = dict(report["timings_ms"]).get("launch")

        model, cfg = hf_model(weights, torch, transformers, getattr(torch, args.dtype))
        ok = True
        tokens = prompt + amk_ids[:-1]
        new_cache = (lambda: bf16_cache(torch, transformers)) if args.kv_dtype == "bf16" else (
            lambda: transformers.DynamicCache())
        hf_logits = teacher_forced(model, tokens, new_cache(), torch)
        plain = teacher_forced(model, tokens, transformers.DynamicCache(), torch)
        errs = np.linalg.norm(amk_logits - hf_logits, axis=1) / np.linalg.norm(hf_logits, axis=1)
        perrs = np.linalg.norm(amk_logits - plain, axis=1) / np.linalg.norm(plain, axis=1)
        noise = 2 * np.abs(amk_logits - hf_logits).max(axis=1)
        good = bool(np.all(np.isfinite(errs)) and errs.max() <= args.tolerance)
        print(f"{'ok  ' if good else 'FAIL'} teacher-forced logits of {passes} steps vs "
              f"transformers ({args.dtype}, K/V stored in {args.kv_dtype} as amk's cache): "
              f"normalized error "
              f"step 0 {errs[0]:.2e}, median {np.median(errs):.2e}, worst {errs.max():.2e} at "
              f"step {int(errs.argmax())} (tolerance {args.tolerance:.0e})")
        print(f"info: vs plain transformers ({args.dtype} cache): step 0 {perrs[0]:.2e}, median "
              f"{np.median(perrs):.2e}, worst {perrs.max():.2e}")
        ok &= good

        # amk's ids are the argmax of its own logits (first largest, as amk's argmax).
        first = len(prompt) - 1  # the step whose logits give the first new token
        own = [int(np.argmax(amk_logits[first + i])) for i in range(args.steps)]
        consistent = own == amk_ids
        print(f"{'ok  ' if consistent else 'FAIL'} amk's ids are the argmax of its own logits")
        ok &= consistent
        # generate() from a cache filled token by token with the prompt but its last token, as
        # amk decodes the prompt (one prefill forward would attend the prompt's rows unrounded).
        cache = new_cache()
        with torch.no_grad():
            for s, t in enumerate(prompt[:-1]):
                model(input_ids=torch.tensor([[t]], device="cuda"), past_key_values=cache,
                      use_cache=True, position_ids=torch.tensor([[s]], device="cuda"))
            gen = model.generate(torch.tensor([prompt], device="cuda"), do_sample=False,
                                 past_key_values=cache,
                                 max_new_tokens=args.steps, min_new_tokens=args.steps,
                                 eos_token_id=None, pad_token_id=0, temperature=None, top_p=None)
        hf_ids = gen[0, len(prompt):].tolist()
        margins = []
        for s in range(first, passes):
            top2 = np.sort(hf_logits[s])[-2:]
            margins.append(top2[1] - top2[0])
        near = [i for i, m in enumerate(margins) if m <= noise[first + i]]
        agree, verdict = 0, "all equal"
        for i in range(args.steps):
            if i < len(hf_ids) and hf_ids[i] == amk_ids[i]:
                agree += 1
                continue
            if i in near:
                verdict = (f"part at new token {i} on a near tie (margin {margins[i]:.3g} <= "
                           f"noise {noise[first + i]:.3g})")
            else:
                verdict = (f"MISMATCH at new token {i}: amk {amk_ids[i]}, transformers "
                           f"{hf_ids[i] if i < len(hf_ids) else None} (margin {margins[i]:.3g} > "
                           f"noise {noise[first + i]:.3g})")
                ok = False
            break
        print(f"{'ok  ' if 'MISMATCH' not in verdict else 'FAIL'} greedy ids vs transformers "
              f"generate: {agree} of {args.steps} equal, {verdict}; {len(near)} near-tie steps")
        if launch_ms:
            print(f"amk: one launch of {passes} steps, {launch_ms:.1f} ms, "
                  f"{launch_ms / passes:.4f} ms a step")
        print(f"{args.preset} generation vs transformers: {'PASS' if ok else 'FAIL'}")
        return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
