#!/usr/bin/env python3
"""Generates text with amk from Python: a Hugging Face Llama folder, a prompt, N new tokens in
one launch (the Python module `amk`: PYTHONPATH=build/default/python).

    python3 scripts/generate_text.py --checkpoint DIR --prompt "The capital of France is" --steps 32
    python3 scripts/generate_text.py --checkpoint DIR --ids 128000,791,6864 --steps 32
    python3 scripts/generate_text.py --preset tiny --ids 3,5,7 --steps 8      # seeded random weights

A text prompt is tokenized with Hugging Face `tokenizers` (DIR/tokenizer.json) when it is
installed, and the new ids are decoded with it; without it, give the prompt as ids (--ids) and
the ids are printed. The end-of-sequence id comes from DIR's generation_config.json or
config.json (its first id where it lists several) unless --eos gives one; the launch ends one
step after generating it. --json prints amk.generate's dict with the prompt ids and the text.
A bad argument exits 2 naming it; amk's own errors exit with amk's codes.
"""
import argparse
import json
import os
import sys

import amk


def config_eos(folder):
    """The checkpoint's end-of-sequence id, or None."""
    for name in ("generation_config.json", "config.json"):
        path = os.path.join(folder, name)
        if not os.path.exists(path):
            continue
        eos = json.load(open(path)).get("eos_token_id")
        if isinstance(eos, list):
            eos = eos[0] if eos else None
        if isinstance(eos, int):
            return eos
    return None


def load_tokenizer(folder):
    """DIR/tokenizer.json through `tokenizers`, or None (not installed or no such file)."""
    if folder is None or not os.path.exists(os.path.join(folder, "tokenizer.json")):
        return None
    try:
        from tokenizers import Tokenizer
    except ImportError:
        return None
    return Tokenizer.from_file(os.path.join(folder, "tokenizer.json"))


def positive(text):
    """argparse type: an integer >= 1."""
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got '{text}'")
    if n < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {n}")
    return n


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--checkpoint", help="a Hugging Face Llama folder (config.json, safetensors)")
    src.add_argument("--preset", help="an amk preset with seeded random weights (tiny, llama-3.2-1b ...)")
    text = ap.add_mutually_exclusive_group(required=True)
    text.add_argument("--prompt", help="the prompt's text (needs `tokenizers` and DIR/tokenizer.json)")
    text.add_argument("--ids", help="the prompt's token ids: 1,2,3")
    ap.add_argument("--steps", type=positive, default=32, help="new tokens (default 32)")
    ap.add_argument("--eos", type=int, help="end-of-sequence id (default: the checkpoint's)")
    ap.add_argument("--backend", default="auto", choices=("auto", "cuda", "cpu"))
    ap.add_argument("--json", action="store_true", help="print the result as JSON")
    a = ap.parse_args()

    tokenizer = load_tokenizer(a.checkpoint)
    if a.prompt is not None:
        if tokenizer is None:
            ap.error("a text prompt needs the `tokenizers` package and tokenizer.json in "
                     "--checkpoint; give the prompt as --ids instead")
        prompt = tokenizer.encode(a.prompt).ids
    else:
        try:
            prompt = [int(t) for t in a.ids.replace(" ", "").split(",") if t]
        except ValueError:
            ap.error(f"--ids: expected comma-separated integers, got '{a.ids}'")
        if not prompt:
            ap.error("--ids: the prompt holds no token ids")
    eos = a.eos if a.eos is not None else (config_eos(a.checkpoint) if a.checkpoint else None)

    try:
        program = amk.gen.llama(preset=a.preset, checkpoint=a.checkpoint, steps=a.steps, prompt=prompt)
        result = amk.generate(program, backend=a.backend, eos=eos)
    except amk.Error as e:  # located, one line; the exit code amk's command line would give
        print(f"generate_text: {e}", file=sys.stderr)
        return e.exit_code

    result["prompt_ids"] = prompt
    if tokenizer is not None:
        result["text"] = tokenizer.decode(result["ids"])
    if a.json:
        print(json.dumps(result))
        return 0
    print(result["text"] if "text" in result else " ".join(map(str, result["ids"])))
    print(f"{result['generated']} new tokens in {result['launch_ms']:.1f} ms on {result['backend']} "
          f"({result['step_ms']:.3f} ms a step, {result['new_tokens_per_s']:.0f} new tokens/s)",
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
