#!/usr/bin/env python3
"""Loops of a SASS (or PTX) listing and their instruction mix: where the VM's hot loops stand.

The VM is one kernel, so ptxas allocates registers over every op compiled into it, and an op's
inner loop can grow with code that never runs (measured on the H200: the plain gemv loop took
415 instructions an iteration in the default Llama-1B VM and 553 in the fused layer's VM, the
extra being address arithmetic, IMAD, and register moves, MOV; the GEMV fell from 3.70 to 2.38
TB/s when only the norm variants were compiled in). This lists every backward branch's body
with its size and counts, so a VM change can be checked for what it does to those loops.

usage: sass_loops.py LISTING [--min-ffma N] [--max-len N]
  LISTING: `nvdisasm -c kernel.cubin` (cubin from `amk compile PROGRAM -o kernel.cubin`), or the
  VM's PTX (`amk compile PROGRAM --ptx-out vm.ptx`, no GPU needed). In PTX the columns count
  fma.rn.f32 (FFMA), 16-byte global loads (LDG128), ld.shared (LDS), ld/st.local (LDL/STL),
  mad.lo (IMAD), mov.u32 (MOV), shfl (SHFL) and bar (BAR); directives and labels are not counted.
  --min-ffma N: only loops with at least N FFMA or 8 128-bit global loads (default 32)
  --max-len N: only loops of at most N instructions, i.e. inner loops (default: all)
A loop is named by the indexes of its first and last instruction (FIRST-LAST).
"""
import collections
import re
import sys

USAGE = "usage: sass_loops.py LISTING [--min-ffma N] [--max-len N]"


def parse_ptx(text):
    """(instructions, label -> index) of a PTX listing."""
    labels, ins = {}, []
    for line in text.splitlines():
        s = line.strip()
        m = re.match(r"(\$L__\w+):", s)
        if m:
            labels[m.group(1)] = len(ins)
        elif s and not s.startswith(("//", ".")) and s not in ("{", "}", ")", "("):
            ins.append(s.rstrip(";"))
    return ins, labels


# PTX opcode -> the SASS column it is counted in.
PTX_COLUMNS = [("fma.rn.f32", "FFMA"), ("ld.shared", "LDS"), ("ld.local", "LDL"),
               ("st.local", "STL"), ("mad.lo", "IMAD"), ("mov.u32", "MOV"), ("shfl", "SHFL"),
               ("bar", "BAR")]


def parse(text):
    """(instructions, label -> index of the instruction that follows it)."""
    labels, ins = {}, []
    for line in text.splitlines():
        m = re.match(r"\s*(\.L_x_\d+):", line)
        if m:
            labels[m.group(1)] = len(ins)
            continue
        m = re.match(r"\s*/\*[0-9a-f]{4,}\*/\s+(.*?);", line)
        if m:
            ins.append(m.group(1))
    return ins, labels


def mix(ins, ptx):
    """Counts per column of a loop body (SASS: per opcode stem; PTX: the PTX_COLUMNS)."""
    c = collections.Counter()
    guard = r"^@%?!?p\w*\s+" if ptx else r"^@!?U?P[T\d]+\s+"
    for t in ins:
        words = re.sub(guard, "", t).split()
        if not words:
            continue
        op = words[0]
        if ptx:
            for prefix, col in PTX_COLUMNS:
                if op.startswith(prefix):
                    c[col] += 1
            if op.startswith("ld.global") and ".v4." in op:
                c["LDG128"] += 1
        else:
            c[op.split(".")[0]] += 1
            if op.startswith("LDG") and ".128" in op:
                c["LDG128"] += 1
    return c


def loops(ins, labels):
    """(first, last) instruction index of each loop: a branch back to a label at or before it."""
    out = []
    for i, t in enumerate(ins):
        m = re.search(r"\b(?:BRA|bra(?:\.uni)?)\b.*?(\.L_x_\d+|\$L__\w+)", t)
        if m and m.group(1) in labels and labels[m.group(1)] <= i:
            out.append((labels[m.group(1)], i))
    return out


def main(argv):
    args, min_ffma, max_len = [], 32, None
    it = iter(argv)
    for a in it:
        if a in ("--min-ffma", "--max-len"):
            v = next(it, None)
            if v is None or not v.isdigit():
                print(f"sass_loops.py: {a} needs a count\n{USAGE}", file=sys.stderr)
                return 2
            if a == "--min-ffma":
                min_ffma = int(v)
            else:
                max_len = int(v)
        elif a.startswith("-"):
            print(f"sass_loops.py: unknown option {a}\n{USAGE}", file=sys.stderr)
            return 2
        else:
            args.append(a)
    if len(args) != 1:
        print(USAGE, file=sys.stderr)
        return 2
    try:
        with open(args[0]) as f:
            text = f.read()
    except OSError as e:
        print(f"sass_loops.py: {args[0]}: {e.strerror}", file=sys.stderr)
        return 4
    ptx = re.search(r"^\s*\.version\s", text, re.M) is not None
    ins, labels = parse_ptx(text) if ptx else parse(text)
    if not ins:
        print(f"sass_loops.py: {args[0]}: no SASS instructions (expected `nvdisasm -c` output or PTX)",
              file=sys.stderr)
        return 3
    total = mix(ins, ptx)
    print(f"{args[0]}: {len(ins)} instructions, LDL {total['LDL']}, STL {total['STL']}")
    print("         loop   len  FFMA  LDG128  LDS  LDL  STL  IMAD  MOV  SHFL  BAR")
    for a, b in loops(ins, labels):
        n = b - a + 1
        c = mix(ins[a:b + 1], ptx)
        if (c["FFMA"] < min_ffma and c["LDG128"] < 8) or (max_len is not None and n > max_len):
            continue
        print(f"{f'{a}-{b}':>13s} {n:5d} {c['FFMA']:5d} {c['LDG128']:7d} {c['LDS']:4d} {c['LDL']:4d} "
              f"{c['STL']:4d} {c['IMAD']:5d} {c['MOV']:4d} {c['SHFL']:5d} {c['BAR']:4d}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
