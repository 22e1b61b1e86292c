#!/usr/bin/env python3
"""Prints amk's performance table from a results file, or compares two results files.

    python3 scripts/perf_compare.py scripts/perf_baseline.json [--same-run]
    python3 scripts/perf_compare.py BASELINE.json NEW.json [--noise 0.006]
    python3 scripts/perf_compare.py BASELINE.json --measured FIGURES.tsv --device D --commit C

--measured: a new results file (on stdout) from a run's figures: a tab-separated file of
`id value unit [baseline_value]` lines (scripts/gpu_check.sh writes it), each figure's other
fields taken from the baseline file's figure of that id (its baseline value replaced by the
run's when the line gives one, and then marked same_run), today's date.

One file: the performance table, as Markdown (--same-run: only the figures whose baseline ran in
the same run, the README's table). Two files: per figure (matched by id),
the old and new values, the change in percent and a verdict: "regression" when the change is
worse than the noise threshold in the figure's better direction, "improvement" when better by
more than it, else "tie" (BENCH.md: a difference within the run-to-run spread, about 0.6%, is a
tie). Figures present in only one file are listed as such.

Exit codes: 0 done (no regression), 1 a regression, 2 a malformed file or bad arguments (one
line naming the file and the problem).

Results file (schema_version 1): {"schema_version": 1, "description": "...", "figures": [F...]},
each F: id, what (one line), value (> 0), unit, better ("lower" or "higher"), baseline (null or
{name, value in the figure's unit, same_run}), target (null or {value, source}), command, run
(optional: the gpu_check call that measured it), device, date (YYYY-MM-DD), commit.
"""
import argparse
import json
import math
import re
import sys

SCHEMA_VERSION = 1
DEFAULT_NOISE = 0.006


class Malformed(Exception):
    pass


def _number(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _one_line(v):
    return isinstance(v, str) and v.strip() != "" and "\n" not in v


def _check_keys(obj, where, required, optional=()):
    if not isinstance(obj, dict):
        raise Malformed(f"{where}: expected an object, got {type(obj).__name__}")
    for k in required:
        if k not in obj:
            raise Malformed(f"{where}: missing key '{k}'")
    for k in obj:
        if k not in required and k not in optional:
            raise Malformed(f"{where}: unknown key '{k}'")


def _check_figure(f, where):
    _check_keys(f, where, ("id", "what", "value", "unit", "better", "baseline", "target", "command",
                           "device", "date", "commit"), ("run",))
    for k in ("id", "what", "unit", "command", "device"):
        if not _one_line(f[k]):
            raise Malformed(f"{where}.{k}: expected a non-empty one-line string")
    if not re.fullmatch(r"[A-Za-z0-9_.-]+", f["id"]):
        raise Malformed(f"{where}.id: '{f['id']}' (letters, digits, '_', '.', '-' only)")
    if not _number(f["value"]) or f["value"] <= 0:
        raise Malformed(f"{where}.value: expected a number > 0, got {json.dumps(f['value'])}")
    if f["better"] not in ("lower", "higher"):
        raise Malformed(f"{where}.better: expected \"lower\" or \"higher\", "
                        f"got {json.dumps(f['better'])}")
    if f["baseline"] is not None:
        b = f["baseline"]
        _check_keys(b, where + ".baseline", ("name", "value", "same_run"))
        if not _one_line(b["name"]):
            raise Malformed(f"{where}.baseline.name: expected a non-empty one-line string")
        if not _number(b["value"]) or b["value"] <= 0:
            raise Malformed(f"{where}.baseline.value: expected a number > 0, "
                            f"got {json.dumps(b['value'])}")
        if not isinstance(b["same_run"], bool):
            raise Malformed(f"{where}.baseline.same_run: expected true or false")
    if f["target"] is not None:
        t = f["target"]
        _check_keys(t, where + ".target", ("value",), ("source",))
        if not _number(t["value"]) or t["value"] <= 0:
            raise Malformed(f"{where}.target.value: expected a number > 0, "
                            f"got {json.dumps(t['value'])}")
        if "source" in t and not _one_line(t["source"]):
            raise Malformed(f"{where}.target.source: expected a non-empty one-line string")
    if "run" in f and not _one_line(f["run"]):
        raise Malformed(f"{where}.run: expected a non-empty one-line string")
    if not isinstance(f["date"], str) or not re.fullmatch(r"\d{4}-\d{2}-\d{2}", f["date"]):
        raise Malformed(f"{where}.date: expected YYYY-MM-DD, got {json.dumps(f['date'])}")
    if not isinstance(f["commit"], str) or not re.fullmatch(r"[0-9a-f]{7,40}", f["commit"]):
        raise Malformed(f"{where}.commit: expected 7 to 40 hex digits, "
                        f"got {json.dumps(f['commit'])}")


def load(path):
    """The file's figures in order, checked; raises Malformed with the file's name."""
    try:
        with open(path, encoding="utf-8") as fh:
            doc = json.load(fh)
    except OSError as e:
        raise Malformed(f"{path}: cannot read: {e.strerror or e}")
    except UnicodeDecodeError as e:
        raise Malformed(f"{path}: not UTF-8 text: {e.reason} at byte {e.start}")
    except json.JSONDecodeError as e:
        raise Malformed(f"{path}: not valid JSON: {e.msg} at line {e.lineno} column {e.colno}")
    except (ValueError, RecursionError) as e:  # e.g. an integer too long, nesting too deep
        why = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise Malformed(f"{path}: not readable as JSON: {why}")
    try:
        if not isinstance(doc, dict):
            raise Malformed(f"expected a JSON object at the top, got {type(doc).__name__}")
        if "schema_version" not in doc:
            raise Malformed("missing key 'schema_version'")
        if doc["schema_version"] != SCHEMA_VERSION or isinstance(doc["schema_version"], bool):
            raise Malformed(f"schema_version {json.dumps(doc['schema_version'])} is not supported "
                            f"(this script reads {SCHEMA_VERSION})")
        _check_keys(doc, "top level", ("schema_version", "figures"), ("description",))
        if not isinstance(doc["figures"], list):
            raise Malformed("figures: expected a list")
        seen = set()
        for i, f in enumerate(doc["figures"]):
            _check_figure(f, f"figures[{i}]")
            if f["id"] in seen:
                raise Malformed(f"figures[{i}].id: '{f['id']}' appears twice")
            seen.add(f["id"])
    except Malformed as e:
        raise Malformed(f"{path}: {e}")
    return doc["figures"]


def num(v):
    return str(v) if isinstance(v, int) else repr(float(v))


def cell(text):
    return text.replace("|", "\\|")


def target_text(f):
    t = f["target"]
    if t is None:
        return ""
    op = "<=" if f["better"] == "lower" else ">="
    met = f["value"] <= t["value"] if f["better"] == "lower" else f["value"] >= t["value"]
    src = f" ({t['source']})" if "source" in t else ""
    return f"{op} {num(t['value'])} {f['unit']}{src}: {'met' if met else '**not met**'}"


def print_table(figures, same_run=False):
    if same_run:
        figures = [f for f in figures if f["baseline"] is not None and f["baseline"]["same_run"]]
    runs = sorted({(f["device"], f["date"], f["commit"]) for f in figures})
    if runs:
        print("Measured on " + "; ".join(f"{d}, {day}, commit {c}" for d, day, c in runs) + ".")
        print()
    print("| figure | value | baseline (same run) | target | command |")
    print("| --- | --- | --- | --- | --- |")
    footnote = False
    for f in figures:
        b = f["baseline"]
        base = ""
        if b is not None:
            base = f"{b['name']}: {num(b['value'])} {f['unit']}"
            if not b["same_run"]:
                base += " *"
                footnote = True
        print(f"| {cell(f['what'])} | **{num(f['value'])} {f['unit']}** | {cell(base)} | "
              f"{cell(target_text(f))} | `{cell(f['command'])}` |")
    if footnote:
        print()
        print("\\* not measured in the same run as the figure.")


def compare(old_path, old, new_path, new, noise):
    """Prints the comparison; returns the number of regressions."""
    by_id = {f["id"]: f for f in new}
    old_ids = {f["id"] for f in old}
    rows, counts = [], {"regression": 0, "improvement": 0, "tie": 0}
    for o in old:
        n = by_id.get(o["id"])
        if n is None:
            continue
        if n["unit"] != o["unit"]:
            raise Malformed(f"{new_path}: figure '{o['id']}': unit '{n['unit']}' differs from "
                            f"{old_path}'s '{o['unit']}'")
        if n["better"] != o["better"]:
            raise Malformed(f"{new_path}: figure '{o['id']}': better '{n['better']}' differs from "
                            f"{old_path}'s '{o['better']}'")
        change = (n["value"] - o["value"]) / o["value"]
        worse = change if o["better"] == "lower" else -change
        verdict = "regression" if worse > noise else "improvement" if worse < -noise else "tie"
        counts[verdict] += 1
        rows.append((o, n, change, verdict))
    print("| figure | old | new | change | verdict |")
    print("| --- | --- | --- | --- | --- |")
    for o, n, change, verdict in rows:
        shown = f"**{verdict}**" if verdict == "regression" else verdict
        print(f"| {o['id']} ({o['better']} is better) | {num(o['value'])} {o['unit']} | "
              f"{num(n['value'])} {n['unit']} | {change * 100:+.2f}% | {shown} |")
    only_old = [f["id"] for f in old if f["id"] not in by_id]
    only_new = [f["id"] for f in new if f["id"] not in old_ids]
    if only_old or only_new:
        print()
    for i in only_old:
        print(f"only in {old_path}: {i}")
    for i in only_new:
        print(f"only in {new_path}: {i}")
    devices = sorted({(o["device"], n["device"]) for o, n, _, _ in rows
                      if o["device"] != n["device"]})
    for a, b in devices:
        print(f"note: {a} in {old_path}, {b} in {new_path}: figures from different devices")
    print()
    print(f"{counts['regression']} regression(s), {counts['improvement']} improvement(s), "
          f"{counts['tie']} tie(s) at a noise threshold of {noise * 100:g}%")
    return counts["regression"]


def measured(base, tsv_path, device, commit):
    """A results document: the baseline's figures for the ids the TSV names, the TSV's values."""
    import datetime
    by_id = {f["id"]: f for f in base}
    out = []
    try:
        lines = open(tsv_path, encoding="utf-8").read().splitlines()
    except OSError as e:
        raise Malformed(f"{tsv_path}: cannot read: {e.strerror or e}")
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        cols = line.split("\t")
        if len(cols) not in (3, 4):
            raise Malformed(f"{tsv_path}:{n}: expected 'id value unit [baseline]', got {line!r}")
        fid, unit = cols[0], cols[2]
        if fid not in by_id:
            raise Malformed(f"{tsv_path}:{n}: no figure '{fid}' in the baseline file")
        f = dict(by_id[fid])
        if unit != f["unit"]:
            raise Malformed(f"{tsv_path}:{n}: unit {unit!r}, the baseline's is {f['unit']!r}")
        try:
            f["value"] = float(cols[1])
            if len(cols) == 4 and f["baseline"] is not None:
                f["baseline"] = dict(f["baseline"], value=float(cols[3]), same_run=True)
        except ValueError:
            raise Malformed(f"{tsv_path}:{n}: not a number in {line!r}")
        f["device"], f["commit"] = device, commit
        f["date"] = datetime.date.today().isoformat()
        f.pop("run", None)
        out.append(f)
    return {"schema_version": SCHEMA_VERSION, "description": f"measured by scripts/gpu_check.sh",
            "figures": out}


def main(argv):
    ap = argparse.ArgumentParser(
        description="Print amk's performance table, or compare two results files.")
    ap.add_argument("baseline", help="results file (scripts/perf_baseline.json)")
    ap.add_argument("new", nargs="?", help="a new results file to compare with the baseline")
    ap.add_argument("--measured", metavar="TSV",
                    help="write a results file from a run's figures (id, value, unit[, baseline])")
    ap.add_argument("--device", default="unknown", help="with --measured: the device's name")
    ap.add_argument("--commit", default="unknown", help="with --measured: the commit measured")
    ap.add_argument("--same-run", action="store_true",
                    help="the table: only figures whose baseline ran in the same run")
    ap.add_argument("--noise", type=float, default=None,
                    help=f"relative change counted as a tie (default {DEFAULT_NOISE}: "
                         "BENCH.md's 0.6%%)")
    args = ap.parse_args(argv)
    if args.noise is None:
        args.noise = DEFAULT_NOISE
    elif args.new is None:
        ap.error("--noise applies only when comparing two files")
    if not (math.isfinite(args.noise) and 0 <= args.noise < 1):
        ap.error(f"--noise {args.noise}: expected a fraction in [0, 1), e.g. 0.006")
    try:
        old = load(args.baseline)
        if args.measured is not None:
            if args.new is not None:
                ap.error("--measured takes the baseline file alone")
            print(json.dumps(measured(old, args.measured, args.device, args.commit), indent=1))
            return 0
        if args.new is None:
            print_table(old, args.same_run)
            return 0
        new = load(args.new)
        return 1 if compare(args.baseline, old, args.new, new, args.noise) else 0
    except Malformed as e:
        print(f"perf_compare: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except BrokenPipeError:
        sys.exit(0)
