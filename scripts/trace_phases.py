#!/usr/bin/env python3
"""Phase table of an `amk profile --trace FILE` Chrome trace.

A phase is the set of instructions whose names differ only in their trailing numbers
(`L3.q_proj.17` -> `L*.q_proj`, layers folded together). For each phase, averaged over its
occurrences (layers): how many instructions, the gap from the previous phase's last end to this
phase's first start (hop + waiting), the span from its first start to its last end, the mean and
max instruction time, and the bytes moved at the span's rate. The critical path of a dependent
program is roughly the sum of gap + span over the phases, which is what the last line shows.

With --warm, a second table splits each phase's instruction times by what the block ran just
before: "cold" when its previous instruction was another op (code and constants may have left the
caches in between), "warm" when it was an instruction of the same op.

With --chain=A,B,...: the layers' chain of dependent phases A, B, ... (names without the L<n>.
prefix, in the order each waits for the one before; the first waits for the previous layer's
last): for each, its step (its last instruction's end minus the previous phase's last end), and
its first and median instruction ends from that same point, each the median over the layers
after the first; then the median layer. Where the instructions carry op marks, three more
columns: the phase's first and median first mark from that same point (a gemv's first mark is
set once its wait is over and x' staged, the attention's once q is staged: the hop and the
staging) and the mean time from an instruction's first mark to its end (its work after them). A phase's step is its hop, its start-up and its stream up
to its slowest instruction: where a dependent step's time goes. Phases off the chain (a decode
step's cache appends, which nothing in the step waits for) are left out by naming the chain.

When the trace carries op marks (`amk profile --trace` stamps them inside gemv, the tiled
attention and the combine: see README, "Comparing configurations, traces"), a last table gives each phase's mean
time from an instruction's start to each mark, beside its mean duration.

usage: trace_phases.py TRACE.json [--layers] [--warm] [--chain=A,B,...]   (--layers: one row per layer phase)
"""
import json
import re
import statistics
import sys
from collections import OrderedDict


def phase_key(name, fold):
    # event names are "op #index name"; the instruction name is the last word
    inst = name.split(" ", 2)[2] if name.count(" ") >= 2 else name
    inst = re.sub(r"(\.\d+)+$", "", inst)
    if fold:
        inst = re.sub(r"^L\d+\.", "L*.", inst)
    return inst


def op_of(name):
    return name.split(" ", 1)[0]


def warm_table(events, fold):
    by_block = {}
    for e in events:
        by_block.setdefault(e["tid"], []).append(e)
    split = OrderedDict()
    for evs in by_block.values():
        evs.sort(key=lambda e: e["ts"])
        prev = None
        for e in evs:
            k = phase_key(e["name"], fold)
            s = split.setdefault(k, {"cold": [], "warm": []})
            warm = prev is not None and op_of(prev["name"]) == op_of(e["name"])
            s["warm" if warm else "cold"].append(e["dur"])
            prev = e
    def mean(v):
        return sum(v) / len(v) if v else float("nan")
    print(f"{'phase':<28}{'cold n':>8}{'cold us':>9}{'warm n':>8}{'warm us':>9}")
    for k, s in split.items():
        print(f"{k:<28}{len(s['cold']):>8}{mean(s['cold']):>9.2f}{len(s['warm']):>8}"
              f"{mean(s['warm']):>9.2f}")


def median(v):
    return statistics.median(v) if v else float("nan")


def first_mark(e):
    """Absolute time of an instruction's earliest op mark (the end of its wait and staging in a
    gemv, q staged in the tiled attention), or None when it has none."""
    marks = [v for k, v in e.get("args", {}).items() if k.endswith("_us")]
    return e["ts"] + min(marks) if marks else None


def chain_table(events, chain):
    """The layers' chain of dependent phases `chain`: each one's step from the one before."""
    layers = OrderedDict()  # layer -> phase -> [(instruction end, its first mark or None)]
    for e in events:
        m = re.match(r"L(\d+)\.(.+)$", phase_key(e["name"], False))
        if m and m.group(2) in chain:
            layers.setdefault(int(m.group(1)), {}).setdefault(m.group(2), []).append(
                (e["ts"] + e["dur"], first_mark(e)))
    full = [n for n in sorted(layers) if len(layers[n]) == len(chain)]
    if len(full) < 2:
        print(f"chain: fewer than two layers hold every phase of {','.join(chain)}")
        return
    rows = {name: {"step": [], "first": [], "mid": [], "mark0": [], "markmid": [], "busy": []}
            for name in chain}
    totals = []
    for prev, n in zip(full, full[1:]):
        if n != prev + 1:
            continue
        before = max(end for end, _ in layers[prev][chain[-1]])
        start = before
        for name in chain:
            ends = [end for end, _ in layers[n][name]]
            marked = [(end, mk) for end, mk in layers[n][name] if mk is not None]
            r = rows[name]
            r["step"].append(max(ends) - before)
            r["first"].append(min(ends) - before)
            r["mid"].append(median(ends) - before)
            if marked:
                r["mark0"].append(min(mk for _, mk in marked) - before)
                r["markmid"].append(median([mk for _, mk in marked]) - before)
                r["busy"].append(statistics.mean(end - mk for end, mk in marked))
            before = max(ends)
        totals.append(before - start)
    with_marks = any(rows[name]["mark0"] for name in chain)
    head = f"{'layer chain (L*.)':<28}{'layers':>7}{'step us':>9}{'first end':>11}{'median end':>12}"
    if with_marks:
        head += f"{'first mark':>12}{'median mark':>13}{'mean busy':>11}"
    print(head)
    for name in chain:
        r = rows[name]
        line = (f"{name:<28}{len(r['step']):>7}{median(r['step']):>9.2f}{median(r['first']):>11.2f}"
                f"{median(r['mid']):>12.2f}")
        if with_marks:
            line += (f"{median(r['mark0']):>12.2f}{median(r['markmid']):>13.2f}{median(r['busy']):>11.2f}"
                     if r["mark0"] else f"{'-':>12}{'-':>13}{'-':>11}")
        print(line)
    print(f"{'a layer':<28}{len(totals):>7}{median(totals):>9.2f}")


def marks_table(events, fold):
    """Mean microseconds from an instruction's start to each of its op's marks, per phase."""
    rows = OrderedDict()
    for e in sorted(events, key=lambda e: e["ts"]):
        marks = {k[:-3]: v for k, v in e.get("args", {}).items() if k.endswith("_us")}
        if not marks:
            continue
        r = rows.setdefault(phase_key(e["name"], fold), {"n": 0, "dur": 0.0, "marks": OrderedDict()})
        r["n"] += 1
        r["dur"] += e["dur"]
        for k, v in marks.items():
            m = r["marks"].setdefault(k, [0, 0.0])
            m[0] += 1
            m[1] += v
    if not rows:
        return
    print(f"{'phase (op marks)':<28}{'instr':>7}{'mean us':>9}  mean us from start to each mark")
    for k, r in rows.items():
        marks = "  ".join(f"{name} {tot / n:.2f}" for name, (n, tot) in r["marks"].items())
        print(f"{k:<28}{r['n']:>7}{r['dur'] / r['n']:>9.2f}  {marks}")


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    known = ("--layers", "--warm", "--chain=A,B,...")
    chain = [a.split("=", 1)[1] for a in sys.argv[1:] if a.startswith("--chain=")]
    unknown = [a for a in sys.argv[1:] if a.startswith("--") and a not in known[:2] and
               not a.startswith("--chain=")]
    if chain and not all(chain[-1].split(",")):
        print(f"trace_phases.py: --chain wants phase names A,B,... (got '{chain[-1]}')",
              file=sys.stderr)
        return 2
    if unknown:
        print(f"trace_phases.py: unknown option {unknown[0]} (options: {', '.join(known)})",
              file=sys.stderr)
        return 2
    fold = "--layers" not in sys.argv
    if len(args) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    try:
        with open(args[0]) as f:
            events = [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X"]
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        print(f"trace_phases.py: {args[0]}: not a readable `amk profile --trace` file ({e})",
              file=sys.stderr)
        return 1
    if not events:
        print(f"trace_phases.py: {args[0]}: the trace has no instruction events", file=sys.stderr)
        return 1
    # occurrences: consecutive runs of one unfolded phase name (a layer's q_proj, ...)
    occ = OrderedDict()
    for e in events:
        key = phase_key(e["name"], False)
        o = occ.setdefault(key, {"start": 1e30, "end": 0.0, "durs": [], "bytes": 0})
        o["start"] = min(o["start"], e["ts"])
        o["end"] = max(o["end"], e["ts"] + e["dur"])
        o["durs"].append(e["dur"])
        o["bytes"] += e["args"].get("bytes", 0)
    ordered = sorted(occ.items(), key=lambda kv: kv[1]["start"])
    rows = OrderedDict()
    prev_end = None
    for key, o in ordered:
        gap = 0.0 if prev_end is None else o["start"] - prev_end
        prev_end = o["end"] if prev_end is None else max(prev_end, o["end"])
        k = re.sub(r"^L\d+\.", "L*.", key) if fold else key
        r = rows.setdefault(k, {"n": 0, "count": 0, "gap": 0.0, "span": 0.0, "mean": 0.0,
                                "max": 0.0, "bytes": 0})
        r["n"] += 1
        r["count"] += len(o["durs"])
        r["gap"] += gap
        r["span"] += o["end"] - o["start"]
        r["mean"] += sum(o["durs"]) / len(o["durs"])
        r["max"] += max(o["durs"])
        r["bytes"] += o["bytes"]
    total_gap = sum(r["gap"] for r in rows.values())
    total_span = sum(r["span"] for r in rows.values())
    print(f"{'phase':<28}{'occ':>4}{'instr':>7}{'gap us':>9}{'span us':>9}{'mean us':>9}"
          f"{'max us':>9}{'GB/s':>8}{'sum gap+span':>14}")
    for k, r in rows.items():
        n = r["n"]
        rate = r["bytes"] / (r["span"] * 1e3) if r["span"] > 0 else 0.0
        print(f"{k:<28}{n:>4}{r['count'] // n:>7}{r['gap'] / n:>9.2f}{r['span'] / n:>9.2f}"
              f"{r['mean'] / n:>9.2f}{r['max'] / n:>9.2f}{rate:>8.0f}{r['gap'] + r['span']:>14.1f}")
    if "--warm" in sys.argv:
        warm_table(events, fold)
    if chain:
        chain_table(events, chain[-1].split(","))
    marks_table(events, fold)
    t0 = min(e["ts"] for e in events)
    t1 = max(e["ts"] + e["dur"] for e in events)
    print(f"total: span {t1 - t0:.1f} us; phases: gaps {total_gap:.1f} us + spans "
          f"{total_span:.1f} us (overlapping phases count twice)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
