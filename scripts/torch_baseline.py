#!/usr/bin/env python3
"""PyTorch baseline for amk's Llama decode step: the same model, weights and KV cache.

    amk gen llama --preset llama-3.2-1b --context 1024 --write-weights W.safetensors -o 1b.json
    python3 scripts/torch_baseline.py --weights W.safetensors [--samples 50] [--warmup 10]
        [--amk-token N] [--no-graph]

Loads the safetensors file that `amk gen llama --write-weights` wrote (Hugging Face tensor
names, the KV cache prefill under `amk.kv.layers.N.{k,v}`, the config in the `amk.config`
metadata), builds one decode step (batch 1, the token at position context-1) from plain torch
ops (no transformers needed): bf16 weights and activations as a PyTorch deployment runs them,
RMSNorm in f32 as HF does, RoPE with Llama 3 scaling (HF rotate_half), the new k/v written
into the bf16 caches, grouped-query attention with scaled_dot_product_attention over all
context positions, SwiGLU, lm_head (tied for llama-3.2-1b), argmax. It times the step eager and
replayed as a torch.cuda.CUDAGraph with CUDA events (warm-up first, the two arms interleaved
sample by sample, >= 30 samples each; median / min / max), prints one JSON object, and prints
the next token.

The next token is also computed by an untimed f32-activation pass over the same bf16 weights
(the arithmetic amk does); with --amk-token N the script asserts that amk's token equals it and
exits 1 if not (the bf16 pass's token is reported too: bf16 activations may flip a near tie).
"""
import argparse
import json
import math
import statistics
import sys

import torch
import torch.nn.functional as F
from safetensors import safe_open
from safetensors.torch import load_file


def llama3_inv_freq(cfg):
    """transformers' _compute_llama3_parameters, in float64."""
    hd = cfg["head_dim"]
    inv_freq = 1.0 / (cfg["rope_theta"] ** (torch.arange(0, hd, 2, dtype=torch.float64) / hd))
    rs = cfg["rope_scaling"]
    factor = rs["factor"]
    if not factor:
        return inv_freq
    low, high, orig = rs["low_freq_factor"], rs["high_freq_factor"], rs["original_max_position_embeddings"]
    low_freq_wavelen, high_freq_wavelen = orig / low, orig / high
    wavelen = 2 * math.pi / inv_freq
    inv_freq_llama = torch.where(wavelen > low_freq_wavelen, inv_freq / factor, inv_freq)
    smooth = (orig / wavelen - low) / (high - low)
    smoothed = (1 - smooth) * inv_freq_llama / factor + smooth * inv_freq_llama
    is_medium = ~(wavelen < high_freq_wavelen) & ~(wavelen > low_freq_wavelen)
    return torch.where(is_medium, smoothed, inv_freq_llama)


class Llama:
    """A minimal Llama decode step over a dict of tensors (HF names)."""

    def __init__(self, t, cfg, device, act_dtype):
        self.cfg, self.dt = cfg, act_dtype
        self.L, self.H = cfg["num_hidden_layers"], cfg["hidden_size"]
        self.nh, self.nkv, self.hd = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
        self.eps, self.pos, self.T = cfg["rms_norm_eps"], cfg["position"], cfg["context"]
        self.t = t
        self.embed = t["model.embed_tokens.weight"]
        self.head = self.embed if cfg["tie_word_embeddings"] else t["lm_head.weight"]
        # The caches are the model's state: the step writes position context-1 of each.
        self.k = [t[f"amk.kv.layers.{l}.k"].unsqueeze(0) for l in range(self.L)]  # [1, nkv, T, hd]
        self.v = [t[f"amk.kv.layers.{l}.v"].unsqueeze(0) for l in range(self.L)]
        freqs = self.pos * llama3_inv_freq(cfg)
        emb = torch.cat([freqs, freqs])
        self.cos = emb.cos().to(device=device, dtype=act_dtype)
        self.sin = emb.sin().to(device=device, dtype=act_dtype)
        self.token = torch.tensor([cfg["token"]], dtype=torch.long, device=device)
        self.group = self.nh // self.nkv

    def w(self, name):
        return self.t[name] if self.dt == torch.bfloat16 else self.t[name].to(self.dt)

    def rmsnorm(self, x, w):
        xf = x.float()
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return w.to(self.dt) * xf.to(self.dt)

    def rope(self, x):  # [1, heads, 1, hd]
        half = self.hd // 2
        rot = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
        return x * self.cos + rot * self.sin

    def qkv(self, x, l):
        """Layer l's q [1, nh, 1, hd], k and v [1, nkv, 1, hd] of x, q and k rotated."""
        p = f"model.layers.{l}."
        xn = self.rmsnorm(x, self.t[p + "input_layernorm.weight"])
        q = F.linear(xn, self.w(p + "self_attn.q_proj.weight")).view(1, self.nh, 1, self.hd)
        k = F.linear(xn, self.w(p + "self_attn.k_proj.weight")).view(1, self.nkv, 1, self.hd)
        v = F.linear(xn, self.w(p + "self_attn.v_proj.weight")).view(1, self.nkv, 1, self.hd)
        return self.rope(q), self.rope(k), v

    def after_attention(self, x, a, l):
        """Layer l's output: o_proj of the attention a [1, nh, 1, hd] plus x, then the MLP plus
        that."""
        p = f"model.layers.{l}."
        h = F.linear(a.reshape(1, self.nh * self.hd), self.w(p + "self_attn.o_proj.weight")) + x
        hn = self.rmsnorm(h, self.t[p + "post_attention_layernorm.weight"])
        g = F.linear(hn, self.w(p + "mlp.gate_proj.weight"))
        u = F.linear(hn, self.w(p + "mlp.up_proj.weight"))
        return F.linear(F.silu(g) * u, self.w(p + "mlp.down_proj.weight")) + h

    def step(self):
        x = F.embedding(self.token, self.embed).to(self.dt)  # [1, H]
        for l in range(self.L):
            q, k, v = self.qkv(x, l)
            self.k[l][:, :, self.pos : self.pos + 1] = k.to(self.k[l].dtype)
            self.v[l][:, :, self.pos : self.pos + 1] = v.to(self.v[l].dtype)
            kc, vc = self.k[l].to(self.dt), self.v[l].to(self.dt)
            if self.group > 1:  # repeat_kv: kv head g serves query heads g*group .. +group-1
                kc = kc.repeat_interleave(self.group, dim=1)
                vc = vc.repeat_interleave(self.group, dim=1)
            a = F.scaled_dot_product_attention(q, kc, vc)  # one query: no mask needed
            x = self.after_attention(x, a, l)
        xf = self.rmsnorm(x, self.t["model.norm.weight"])
        head = self.head if self.dt == torch.bfloat16 else self.head.to(self.dt)
        logits = F.linear(xf, head)
        return logits, torch.argmax(logits, dim=-1)


def stats(ms):
    return {"median_ms": statistics.median(ms), "min_ms": min(ms), "max_ms": max(ms),
            "samples": len(ms)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--weights", required=True, help="safetensors from amk gen llama --write-weights")
    ap.add_argument("--samples", type=int, default=50)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--amk-token", type=int, help="amk's next token: assert it matches")
    ap.add_argument("--no-graph", action="store_true", help="time eager only")
    args = ap.parse_args()
    if args.samples < 30:
        ap.error("--samples must be >= 30")
    if not torch.cuda.is_available():
        print("torch_baseline: no CUDA device", file=sys.stderr)
        return 2
    dev = torch.device("cuda")

    with safe_open(args.weights, framework="pt") as f:
        cfg = json.loads(f.metadata()["amk.config"])
    t = load_file(args.weights, device="cuda")
    # amk gen llama --down transposed writes the down projection transposed, as "<HF name>.T".
    for name in [n for n in t if n.endswith(".T")]:
        t[name[:-2]] = t.pop(name).t().contiguous()
    torch.backends.cuda.matmul.allow_tf32 = False

    # Untimed f32-activation reference over the same bf16 weights (what amk computes).
    with torch.no_grad():
        ref = Llama({n: v.clone() if n.startswith("amk.kv.") else v for n, v in t.items()},
                    cfg, dev, torch.float32)
        ref_logits, ref_tok = ref.step()
        ref_tok = int(ref_tok.item())
        del ref, ref_logits
    torch.cuda.synchronize()

    model = Llama(t, cfg, dev, torch.bfloat16)
    result = {"preset": cfg["preset"], "layers": cfg["num_hidden_layers"], "context": cfg["context"],
              "position": cfg["position"], "token": cfg["token"], "torch": torch.__version__,
              "device": torch.cuda.get_device_name(0)}
    with torch.no_grad():
        for _ in range(args.warmup):
            _, tok = model.step()
        torch.cuda.synchronize()
        bf16_tok = int(tok.item())

        graph = None
        if not args.no_graph:
            s = torch.cuda.Stream()
            s.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(s):
                for _ in range(3):
                    model.step()
            torch.cuda.current_stream().wait_stream(s)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                _, g_tok = model.step()
            for _ in range(args.warmup):
                graph.replay()
            torch.cuda.synchronize()
            result["next_token_graph"] = int(g_tok.item())

        eager_ms, graph_ms = [], []
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        for _ in range(args.samples):  # interleaved: eager, graph, eager, graph, ...
            start.record()
            model.step()
            end.record()
            end.synchronize()
            eager_ms.append(start.elapsed_time(end))
            if graph is not None:
                start.record()
                graph.replay()
                end.record()
                end.synchronize()
                graph_ms.append(start.elapsed_time(end))

    weight_bytes = sum(v.numel() * v.element_size() for n, v in t.items() if not n.startswith("amk.kv."))
    kv_bytes = sum(v.numel() * v.element_size() for n, v in t.items() if n.startswith("amk.kv."))
    result["weight_bytes"], result["kv_cache_bytes"] = weight_bytes, kv_bytes
    result["eager"] = stats(eager_ms)
    if graph_ms:
        result["graph"] = stats(graph_ms)
        result["graph"]["read_TB_s"] = (weight_bytes + kv_bytes) / (result["graph"]["median_ms"] * 1e-3) / 1e12
    result["next_token"] = ref_tok
    result["next_token_bf16"] = bf16_tok
    ok = True
    # The timed arms run one model: eager and graph must pick the same token.
    if "next_token_graph" in result and result["next_token_graph"] != bf16_tok:
        print(f"MISMATCH: the graph's next token {result['next_token_graph']} != eager's {bf16_tok}",
              file=sys.stderr)
        ok = False
    if args.amk_token is not None:
        result["amk_token"] = args.amk_token
        result["match"] = args.amk_token == ref_tok
        # (bf16 activations round differently from amk's f32 ones: reported, not required)
        result["match_bf16"] = args.amk_token == bf16_tok
        if not result["match"]:
            print(f"MISMATCH: amk's next token {args.amk_token} != {ref_tok}", file=sys.stderr)
            ok = False
    print(json.dumps(result, indent=2))
    print(f"next token: {ref_tok} (bf16 activations, eager and graph: {bf16_tok})")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
