#!/usr/bin/env python3
"""PyTorch baselines for amk's one-launch generation: greedy tokens per second on the same weights.

    amk gen llama --preset llama-3.2-1b --write-weights W.safetensors -o 1b.json
    python3 scripts/torch_generate.py --weights W.safetensors --prompt-len 32 --steps 128
        [--samples 5] [--warmup 1] [--out FILE.json] [--no-hf]

The prompt is the synthetic one of scripts/bench_generate.py: ids (i * 7919 + 13) % 128000 for
i < --prompt-len. Two arms, timed interleaved sample by sample (median / min / max / spread):

- torch_graph: greedy decoding from plain torch ops (torch_baseline's Llama: bf16 weights and
  activations, RMSNorm in f32, Llama 3 RoPE, SwiGLU, lm_head tied when the file has none) with a
  static bf16 KV cache of prompt + steps - 1 positions, as amk's. The position and the current
  token live on the device, so one decode step is captured as a torch.cuda.CUDAGraph and
  replayed once a pass: pass p feeds prompt[p + 1] while p + 1 < prompt length (teacher forcing
  token by token, as amk does), else its own argmax; attention runs over a mask of positions
  <= p. Timed with CUDA events around all prompt + steps - 1 replays.
- transformers_generate (unless --no-hf): LlamaForCausalLM built by check_generate_hf.hf_model
  in bf16 (sdpa attention where supported), model.generate(do_sample=False) of exactly --steps
  tokens, timed wall-clock between torch.cuda.synchronize() calls. Its prompt is one batched
  prefill forward, not token by token ("prefill": "batched").

Prints one JSON object (also to --out) and a one-line summary to stderr.
"""
import argparse
import json
import os
import statistics
import sys
import time
import types

import torch
import torch.nn.functional as F
from safetensors import safe_open

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_baseline  # noqa: E402


def gqa_attention():
    """SDPA over a kv-head cache: enable_gqa where torch has it (>= 2.5), else repeat_interleave."""
    q = torch.zeros(1, 4, 1, 8, device="cuda", dtype=torch.bfloat16)
    kv = torch.zeros(1, 2, 3, 8, device="cuda", dtype=torch.bfloat16)
    m = torch.ones(1, 1, 1, 3, device="cuda", dtype=torch.bool)
    try:
        F.scaled_dot_product_attention(q, kv, kv, attn_mask=m, enable_gqa=True)
        return "enable_gqa", lambda q, k, v, m: F.scaled_dot_product_attention(
            q, k, v, attn_mask=m, enable_gqa=True)
    except (TypeError, RuntimeError):
        def attend(q, k, v, m):  # kv head g serves query heads g*group .. g*group+group-1
            g = q.shape[1] // k.shape[1]
            return F.scaled_dot_product_attention(
                q, k.repeat_interleave(g, dim=1), v.repeat_interleave(g, dim=1), attn_mask=m)
        return "repeat_interleave", attend


class GraphLlama(torch_baseline.Llama):
    """torch_baseline's Llama (its qkv and after_attention halves of a layer) with the position,
    the token, the prompt and the generated ids as device tensors: step() runs one pass without
    a host sync."""

    def __init__(self, t, cfg, prompt, passes, attend):
        self.cfg, self.dt, self.t, self.attend = cfg, torch.bfloat16, t, attend
        self.L, self.H = cfg["num_hidden_layers"], cfg["hidden_size"]
        self.nh, self.nkv, self.hd = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
        self.eps, self.T = cfg["rms_norm_eps"], passes
        self.embed = t["model.embed_tokens.weight"]
        self.head = t.get("lm_head.weight", self.embed)  # tied when the file has no lm_head
        dev = self.embed.device
        kv = lambda: torch.zeros(1, self.nkv, passes, self.hd, device=dev, dtype=torch.bfloat16)
        self.k = [kv() for _ in range(self.L)]  # [1, nkv, T, hd]: amk's cache size
        self.v = [kv() for _ in range(self.L)]
        # RoPE tables of every position (float64 angles as torch_baseline, rounded to bf16).
        freqs = torch.arange(passes, dtype=torch.float64)[:, None] * torch_baseline.llama3_inv_freq(cfg)
        emb = torch.cat([freqs, freqs], dim=-1)
        self.cos_tab = emb.cos().to(device=dev, dtype=self.dt)  # [T, hd]
        self.sin_tab = emb.sin().to(device=dev, dtype=self.dt)
        self.positions = torch.arange(passes, device=dev)
        self.n_prompt = len(prompt)
        # The prompt padded to passes + 1: the last pass reads index passes (then not chosen).
        self.prompt = torch.zeros(passes + 1, dtype=torch.long, device=dev)
        self.prompt[: len(prompt)] = torch.tensor(prompt, dtype=torch.long)
        self.ids = torch.zeros(passes, dtype=torch.long, device=dev)  # each pass's argmax
        self.pos = torch.zeros(1, dtype=torch.long, device=dev)
        self.cur = torch.zeros(1, dtype=torch.long, device=dev)

    def reset(self):
        """Position 0, token prompt[0]; the cache needs no reset (each row is written before
        the mask admits it)."""
        self.pos.zero_()
        self.cur.copy_(self.prompt[:1])

    def step(self):
        pos = self.pos
        self.cos = self.cos_tab.index_select(0, pos)  # [1, hd]: torch_baseline's rope reads these
        self.sin = self.sin_tab.index_select(0, pos)
        mask = (self.positions <= pos).view(1, 1, 1, self.T)  # the valid cache rows
        x = F.embedding(self.cur, self.embed)  # [1, H]
        for l in range(self.L):
            q, k, v = self.qkv(x, l)
            self.k[l].index_copy_(2, pos, k)  # row pos of [1, nkv, T, hd]
            self.v[l].index_copy_(2, pos, v)
            a = self.attend(q, self.k[l], self.v[l], mask)  # [1, nh, 1, hd]
            x = self.after_attention(x, a, l)
        logits = F.linear(self.rmsnorm(x, self.t["model.norm.weight"]), self.head)  # [1, vocab]
        tok = torch.argmax(logits, dim=-1)  # [1], the first largest
        self.ids.index_copy_(0, pos, tok)
        nxt = pos + 1
        self.cur.copy_(torch.where(nxt < self.n_prompt, self.prompt.index_select(0, nxt), tok))
        self.pos.copy_(nxt)


def hf_generate_model(weights):
    """check_generate_hf.hf_model in bf16 (built in bf16: no f32 copy), sdpa where supported."""
    import transformers
    import check_generate_hf
    for impl in ("sdpa", "eager"):
        # hf_model names eager attention in its LlamaConfig: a stand-in module swaps the name.
        tf = types.SimpleNamespace(
            LlamaForCausalLM=transformers.LlamaForCausalLM,
            LlamaConfig=lambda **kw: transformers.LlamaConfig(**{**kw, "attn_implementation": impl}))
        old = torch.get_default_dtype()
        torch.set_default_dtype(torch.bfloat16)
        try:
            model, cfg = check_generate_hf.hf_model(weights, torch, tf, torch.bfloat16)
        except (ValueError, ImportError, NotImplementedError) as e:
            if impl == "eager":
                raise
            print(f"torch_generate: sdpa attention unavailable ({e}); eager", file=sys.stderr)
            continue
        finally:
            torch.set_default_dtype(old)
        # hf_model's .to(bf16) rounds the RoPE inv_freq buffers; from_pretrained keeps them f32.
        inv = torch_baseline.llama3_inv_freq(cfg).float()
        for m in model.modules():
            if isinstance(getattr(m, "inv_freq", None), torch.Tensor):
                m.inv_freq = inv.to(m.inv_freq.device)
        return model, model.config._attn_implementation, transformers.__version__


def stats(ms, new, passes=None):
    med = statistics.median(ms)
    r = {"loop_ms": ms, "median_ms": med, "min_ms": min(ms), "max_ms": max(ms),
         "rel_spread": (max(ms) - min(ms)) / med, "samples": len(ms),
         "ms_per_new_token": med / new, "new_tokens_per_s": new * 1000.0 / med}
    if passes:
        r["passes"], r["step_ms"] = passes, med / passes
    return r


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--weights", required=True, help="safetensors from amk gen llama --write-weights")
    ap.add_argument("--prompt-len", type=int, default=32)
    ap.add_argument("--steps", type=int, default=128, help="new tokens")
    ap.add_argument("--samples", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=1, help="untimed full loops per arm")
    ap.add_argument("--out", help="also write the JSON here")
    ap.add_argument("--no-hf", action="store_true", help="skip the transformers arm")
    args = ap.parse_args()
    if args.prompt_len < 1 or args.steps < 1 or args.samples < 1:
        ap.error("--prompt-len, --steps and --samples must be >= 1")
    if not torch.cuda.is_available():
        print("torch_generate: no CUDA device", file=sys.stderr)
        return 2

    with safe_open(args.weights, framework="pt", device="cuda") as f:
        cfg = json.loads(f.metadata()["amk.config"])
        # The weights only: amk.kv.* is a prefill cache this script does not use.
        t = {k: f.get_tensor(k) for k in f.keys() if not k.startswith("amk.")}
    for name in [n for n in t if n.endswith(".T")]:  # amk gen llama --down transposed
        t[name[:-2]] = t.pop(name).t().contiguous()
    n, new = args.prompt_len, args.steps
    passes = n + new - 1
    # bench_generate.py's prompt (its modulus 128000; a smaller vocabulary bounds it).
    prompt = [(i * 7919 + 13) % min(128000, cfg["vocab_size"]) for i in range(n)]

    gqa, attend = gqa_attention()
    model = GraphLlama(t, cfg, prompt, passes, attend)
    hf = None
    result = {"preset": cfg.get("preset"), "layers": cfg["num_hidden_layers"], "prompt": n,
              "new": new, "passes": passes, "torch": torch.__version__,
              "device": torch.cuda.get_device_name(0), "arms": {}, "ids": {}}
    if not args.no_hf:
        hf, impl, tf_version = hf_generate_model(args.weights)
        result["transformers"] = tf_version
        input_ids = torch.tensor([prompt], device="cuda")
        hf_kw = dict(attention_mask=torch.ones_like(input_ids), max_new_tokens=new,
                     min_new_tokens=new, do_sample=False, pad_token_id=0, eos_token_id=None,
                     temperature=None, top_p=None)

    with torch.no_grad():
        # Capture: warm-up steps on a side stream (each from position 0), then one step.
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(3):
                model.reset()
                model.step()
        torch.cuda.current_stream().wait_stream(s)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            model.step()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)

        def graph_loop():
            model.reset()
            start.record()
            for _ in range(passes):
                graph.replay()
            end.record()
            end.synchronize()
            return start.elapsed_time(end)

        def hf_loop():
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            out = hf.generate(input_ids, **hf_kw)
            torch.cuda.synchronize()
            return (time.perf_counter() - t0) * 1000.0, out

        for _ in range(args.warmup):
            graph_loop()
            if hf is not None:
                hf_loop()
        graph_ms, hf_ms = [], []
        for _ in range(args.samples):  # interleaved: graph, generate, graph, generate, ...
            graph_ms.append(graph_loop())
            if hf is not None:
                ms, out = hf_loop()
                hf_ms.append(ms)

    graph_ids = model.ids[n - 1 :].tolist()  # pass n-1 + i gives new token i
    result["arms"]["torch_graph"] = dict(stats(graph_ms, new, passes), gqa=gqa,
                                         kv_cache_positions=passes, prompt_fed="token_by_token")
    result["ids"]["torch_graph"] = graph_ids[:16]
    gs = result["arms"]["torch_graph"]
    line = (f"{result['preset']} {n} + {new}: torch_graph {gs['new_tokens_per_s']:.0f} new tokens/s "
            f"({gs['step_ms']:.4f} ms a pass, spread {100 * gs['rel_spread']:.1f}%)")
    if hf is not None:
        hf_ids = out[0, n:].tolist()
        result["arms"]["transformers_generate"] = dict(stats(hf_ms, new), forwards=new,
                                                       prefill="batched", attn_implementation=impl)
        result["ids"]["transformers_generate"] = hf_ids[:16]
        agree = next((i for i, (a, b) in enumerate(zip(graph_ids, hf_ids)) if a != b),
                     min(len(graph_ids), len(hf_ids)))
        result["ids_agree"] = agree  # leading new ids equal in both arms (bf16 near ties may part)
        hs = result["arms"]["transformers_generate"]
        line += (f"; transformers generate ({impl}) {hs['new_tokens_per_s']:.0f} new tokens/s "
                 f"(spread {100 * hs['rel_spread']:.1f}%); {agree} of {new} ids agree")
    text = json.dumps(result, indent=1)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")
    print(line, file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
