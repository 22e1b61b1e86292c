#!/usr/bin/env python3
"""Generates the bad-input corpus: malformed programs, each with the exact error amk must give.

    /usr/bin/python3 tests/bad/make_corpus.py --amk build/default/amk

Writes tests/bad/json/*.json, tests/bad/amkb/*.amkb and tests/bad/expected.tsv (file, exit
code, error code, location). The files are committed: they are the corpus CI runs
(tests/cli/bad_inputs.sh) and the fuzzers' seeds. The .amkb cases start from `amk convert` of a
valid program and corrupt it at places read from the file's own section table.

The few cases too large to commit (GENERATED_CASES) are listed in expected.tsv as generated/NAME
and never written into the tree; the test writes them to a scratch folder at run time:

    /usr/bin/python3 tests/bad/make_corpus.py --generated-into DIR
"""
import argparse
import copy
import json
import os
import struct
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))

BASE = {
    "format": "amk.program",
    "version": 1,
    "name": "base",
    "launch": {"grid": 2, "block": 128},
    "buffers": [
        {"name": "x", "dtype": "f32", "shape": [256], "init": {"kind": "random", "seed": 1}},
        {"name": "w", "dtype": "bf16", "shape": [64, 256], "init": {"kind": "random", "seed": 2}},
        {"name": "y", "dtype": "f32", "shape": [64], "output": True},
        {"name": "z", "dtype": "f32", "shape": [64], "output": True},
    ],
    "counters": ["done"],
    "instructions": [
        {"name": "g0", "op": "gemv", "operands": {"w": "w", "x": "x", "y": "y"}, "signals": [{"counter": "done"}]},
        {"name": "s0", "op": "scale", "operands": {"x": "y", "y": "z"}, "params": {"alpha": 2.0},
         "waits": [{"counter": "done", "value": 1}]},
    ],
    "queues": [["g0"], ["s0"]],
}

P, IO, DEV = 3, 4, 5  # exit codes: invalid program, io, device (this machine cannot run it)


def mutate(fn):
    p = copy.deepcopy(BASE)
    fn(p)
    return json.dumps(p, indent=1)


def setp(path, value):
    def f(p):
        node = p
        for k in path[:-1]:
            node = node[k]
        node[path[-1]] = value
    return f


def delp(path):
    def f(p):
        node = p
        for k in path[:-1]:
            node = node[k]
        del node[path[-1]]
    return f


def both(*fns):
    def f(p):
        for fn in fns:
            fn(p)
    return f


gemv_rows = lambda p: p["instructions"][0]["operands"].__setitem__("w", {"buffer": "w", "offset": 0, "extent": 256 * 32})

JSON_CASES = [
    # (name, text, exit, code, where)
    ("empty_file", "", P, "json.syntax", "byte 1"),
    ("truncated", json.dumps(BASE)[:200], P, "json.syntax", "byte 201"),
    ("not_an_object", "[1, 2, 3]", P, "json.type", "/"),
    # 100 arrays in a comment: the 64th '[' (byte 7 + 64) opens level 65 of at most 64.
    ("deep_nesting", '{"_c": ' + "[" * 100 + "]" * 100 + "}", P, "json.depth", "byte 71"),
    ("wrong_format", mutate(setp(["format"], "amk.prog")), P, "program.format", "/format"),
    ("version_2", mutate(setp(["version"], 2)), P, "program.version", "/version"),
    ("version_string", mutate(setp(["version"], "1")), P, "json.type", "/version"),
    ("missing_buffers", mutate(delp(["buffers"])), P, "json.missing", "/"),
    ("unknown_top_key", mutate(setp(["bufers"], [])), P, "json.unknown_key", "/bufers"),
    ("unknown_dtype", mutate(setp(["buffers", 0, "dtype"], "f8")), P, "buffer.dtype", "/buffers/0/dtype"),
    ("negative_dim", mutate(setp(["buffers", 0, "shape"], [-4])), P, "json.range", "/buffers/0/shape/0"),
    ("fractional_dim", mutate(setp(["buffers", 0, "shape"], [2.5])), P, "json.range", "/buffers/0/shape/0"),
    ("zero_dim", mutate(setp(["buffers", 0, "shape"], [0])), P, "buffer.shape", "/buffers/0/shape/0"),
    ("size_overflow", mutate(setp(["buffers", 0, "shape"], [4294967296, 4294967296, 16])), P, "buffer.size", "/buffers/0/shape"),
    ("too_large", mutate(setp(["buffers", 0, "shape"], [1 << 40])), P, "buffer.size", "/buffers/0/shape"),
    ("rank_9", mutate(setp(["buffers", 0, "shape"], [1] * 9)), P, "buffer.shape", "/buffers/0/shape"),
    ("duplicate_buffer", mutate(setp(["buffers", 1, "name"], "x")), P, "name.duplicate", "/buffers/1/name"),
    ("bad_buffer_name", mutate(setp(["buffers", 0, "name"], "x y")), P, "name.invalid", "/buffers/0/name"),
    ("duplicate_counter", mutate(setp(["counters"], ["done", "done"])), P, "name.duplicate", "/counters/1"),
    ("unknown_init_kind", mutate(setp(["buffers", 0, "init"], {"kind": "ones"})), P, "init.kind", "/buffers/0/init/kind"),
    ("values_count", mutate(setp(["buffers", 0, "init"], {"kind": "values", "values": [1, 2, 3]})), P, "init.values", "/buffers/0/init/values"),
    ("value_out_of_range", mutate(both(setp(["buffers", 0, "dtype"], "f16"), setp(["buffers", 0, "shape"], [1]),
                                       setp(["buffers", 0, "init"], {"kind": "values", "values": [1e6]}))), P, "init.values", "/buffers/0/init/values/0"),
    ("path_escapes", mutate(setp(["buffers", 0, "init"], {"kind": "npy", "path": "../../etc/passwd"})), P, "path.escape", "/buffers/0/init/path"),
    ("absolute_path", mutate(setp(["buffers", 0, "init"], {"kind": "raw", "path": "/etc/passwd", "offset": 0})), P, "path.escape", "/buffers/0/init/path"),
    ("unknown_op", mutate(setp(["instructions", 0, "op"], "gemm")), P, "instruction.op", "/instructions/0/op"),
    ("retired_op", mutate(setp(["instructions", 0, "op"], "gemv_splitk")), P, "op.retired", "/instructions/0/op"),
    ("dangling_buffer", mutate(setp(["instructions", 0, "operands", "x"], "nope")), P, "ref.buffer", "/instructions/0/operands/x"),
    ("dangling_counter", mutate(setp(["instructions", 1, "waits"], [{"counter": "nope", "value": 1}])), P, "ref.counter", "/instructions/1/waits/0/counter"),
    ("unknown_operand_slot", mutate(setp(["instructions", 0, "operands", "bias"], "x")), P, "instruction.operand", "/instructions/0/operands/bias"),
    ("missing_operand", mutate(delp(["instructions", 0, "operands", "x"])), P, "instruction.operand", "/instructions/0/operands"),
    ("missing_param", mutate(delp(["instructions", 1, "params", "alpha"])), P, "instruction.param", "/instructions/1/params"),
    ("unknown_param", mutate(setp(["instructions", 1, "params", "beta"], 1.0)), P, "instruction.param", "/instructions/1/params/beta"),
    ("too_many_waits", mutate(setp(["instructions", 1, "waits"], [{"counter": "done", "value": 1}] * 5)), P, "instruction.capacity", "/instructions/1/waits"),
    ("queue_dangling", mutate(setp(["queues"], [["g0"], ["s1"]])), P, "ref.instruction", "/queues/1/0"),
    ("queue_index_past_end", mutate(setp(["queues"], [[0], [7]])), P, "ref.instruction", "/queues/1/0"),
    ("queue_duplicate", mutate(setp(["queues"], [["g0", "s0"], ["s0"]])), P, "queue.duplicate", "/queues/1/0"),
    ("queue_missing", mutate(setp(["queues"], [["g0"], []])), P, "queue.missing", "/queues"),
    ("grid_queue_mismatch", mutate(setp(["launch", "grid"], 3)), P, "queue.shape", "/queues"),
    # More persistent blocks than any device holds at once (the planner allocated per block).
    ("grid_too_large", mutate(setp(["launch", "grid"], 4294967295)), P, "launch.grid", "/launch/grid"),
    ("deadlock", mutate(setp(["queues"], [["s0", "g0"], []])), P, "verify.deadlock", "/queues/0/0"),
    ("cyclic_waits", mutate(both(setp(["instructions", 0, "waits"], [{"counter": "done", "value": 1}]), delp(["queues"]))), P, "verify.deadlock", "/instructions/0"),
    ("unsatisfiable_wait", mutate(setp(["instructions", 1, "waits"], [{"counter": "done", "value": 2}])), P, "verify.wait.unsatisfiable", "/instructions/1/waits/0/value"),
    # Two adds of 2^32 - 1 to one counter: past the device's 32-bit counters in one pass.
    ("counter_overflow", mutate(setp(["instructions", 0, "signals"], [{"counter": "done", "add": 4294967295}] * 2)),
     P, "verify.counter.overflow", "/instructions/0/signals/1/add"),
    ("operand_out_of_bounds", mutate(setp(["instructions", 1, "operands", "x"], {"buffer": "y", "offset": 32, "extent": 64})), P, "verify.operand.bounds", "/instructions/1/operands/x"),
    ("gemv_shape", mutate(setp(["instructions", 0, "operands", "y"], {"buffer": "z", "offset": 0, "extent": 32})), P, "verify.shape", "/instructions/0/operands/y"),
    ("gemv_w2_extent", mutate(setp(["instructions", 0, "operands", "w2"], {"buffer": "w", "offset": 0, "extent": 256 * 32})), P, "verify.shape", "/instructions/0/operands/w2"),
    ("gemv_merge_head_dim", mutate(setp(["instructions", 0, "params"], {"head_dim": 6, "heads": 1})),
     P, "verify.param", "/instructions/0/params/head_dim"),
    ("gemv_merge_partials_shape", mutate(setp(["instructions", 0, "params"], {"head_dim": 64, "heads": 4})),
     P, "verify.shape", "/instructions/0/operands/x"),
    ("argmax_index_map_extent", mutate(both(
        setp(["buffers"], BASE["buffers"] + [{"name": "idx", "dtype": "i32", "shape": [1], "output": True},
                                             {"name": "map", "dtype": "i32", "shape": [64], "init": {"kind": "random", "seed": 3}}]),
        setp(["instructions", 1], {"name": "s0", "op": "argmax",
                                   "operands": {"x": "y", "index": "idx", "index_map": {"buffer": "map", "offset": 0, "extent": 32}},
                                   "params": {"base": 5}, "waits": [{"counter": "done", "value": 1}]}))),
     P, "verify.shape", "/instructions/1/operands/index_map"),
    ("wrong_dtype", mutate(both(setp(["buffers", 2, "dtype"], "i32"))), P, "verify.dtype", "/instructions/0/operands/y"),
    ("overlapping_writes", mutate(both(setp(["instructions", 1, "waits"], []),
                                       setp(["instructions", 1, "operands"], {"x": {"buffer": "x", "offset": 0, "extent": 64}, "y": "y"}))),
     P, "verify.hazard", "/instructions/1/operands/y"),
    ("read_write_race", mutate(setp(["instructions", 1, "waits"], [])), P, "verify.hazard", "/instructions/1/operands/x"),
    ("block_not_multiple_of_32", mutate(setp(["launch", "block"], 100)), P, "launch.block", "/launch/block"),
    ("cluster_in_cooperative", mutate(setp(["launch", "cluster"], [2, 1, 1])), P, "launch.cluster", "/launch/cluster"),
    ("bad_mode", mutate(setp(["launch", "mode"], "graph")), P, "launch.mode", "/launch/mode"),
    ("tma_rank_6", mutate(setp(["tma"], [{"name": "t", "buffer": "w", "dims": [1, 1, 1, 1, 1, 1], "box": [1, 1, 1, 1, 1, 1]}])), P, "tma.rank", "/tma/0/dims"),
    ("tma_box_256", mutate(setp(["tma"], [{"name": "t", "buffer": "w", "dims": [256, 64], "box": [512, 8]}])), P, "tma.box", "/tma/0/box/0"),
    ("tma_misaligned", mutate(setp(["tma"], [{"name": "t", "buffer": "w", "offset": 3, "dims": [128, 64], "box": [64, 8]}])), P, "verify.tma.align", "/tma/0/offset"),
    ("tma_out_of_buffer", mutate(setp(["tma"], [{"name": "t", "buffer": "w", "dims": [256, 128], "box": [64, 8]}])), P, "verify.tma.bounds", "/tma/0"),
    ("tma_bad_swizzle", mutate(setp(["tma"], [{"name": "t", "buffer": "w", "dims": [256, 64], "box": [64, 8], "swizzle": "256B"}])), P, "tma.swizzle", "/tma/0/swizzle"),
    ("custom_untrusted", mutate(setp(["custom_ops"], [{"name": "my_op", "operands": ["x"], "params": [], "source": "__device__ void f() {}"}])), P, "custom.untrusted", "/custom_ops"),
    # Programs with ranks.
    ("timeout_zero", mutate(setp(["launch", "timeout_ms"], 0)), P, "launch.timeout_ms", "/launch/timeout_ms"),
    ("passes_zero", mutate(setp(["launch", "passes"], 0)), P, "launch.passes", "/launch/passes"),
    ("ranks_zero", mutate(setp(["launch", "ranks"], 0)), P, "launch.ranks", "/launch/ranks"),
    ("ranks_nine", mutate(setp(["launch", "ranks"], 9)), P, "json.range", "/launch/ranks"),
    ("init_list_one_rank", mutate(setp(["buffers", 0, "init"], [{"kind": "zeros"}, {"kind": "zeros"}])),
     P, "buffer.init", "/buffers/0/init"),
    ("instruction_rank_missing", mutate(both(setp(["launch", "ranks"], 2), setp(["instructions", 1, "ranks"], [2]))),
     P, "instruction.ranks", "/instructions/1/ranks/0"),
    ("all_reduce_one_rank", mutate(setp(["instructions", 1], {"name": "s0", "op": "all_reduce", "operands": {"x": "z"}})),
     P, "verify.ranks", "/instructions/1/op"),
    ("send_unmatched", mutate(both(setp(["launch", "ranks"], 2),
                                   setp(["instructions", 1], {"name": "s0", "op": "send", "operands": {"x": "z"},
                                                              "params": {"peer": 1}, "ranks": [0]}))),
     P, "verify.ranks", "/instructions/1"),
    # Init windows.
    ("window_past_tensor", mutate(setp(["buffers", 1, "init", "window"], {"of": [128, 256], "at": [65, 0]})),
     P, "init.window", "/buffers/1/init/window/at/0"),
    ("window_dims", mutate(setp(["buffers", 1, "init", "window"], {"of": [64 * 256], "at": [0]})),
     P, "init.window", "/buffers/1/init/window/of"),
    ("window_on_values", mutate(setp(["buffers", 3, "init"], {"kind": "constant", "value": 1,
                                                             "window": {"of": [128], "at": [0]}})),
     P, "json.unknown_key", "/buffers/3/init/window"),
]

# Wrapper programs (schemas/wrapper.md): a small valid one, and mutations of it. Its queue arrays
# are i32 base64: offsets [0, 1], lengths [1, 1] over two 16-byte instruction records.
WRAPPER_BASE = {
    "format": "amk.wrapper",
    "version": 1,
    "name": "wrapper_base",
    "wrapper": {"kernel_name": "df_main", "source": "extern \"C\" __global__ void df_main() {}"},
    "launch": {"queues": 2, "block_dim": [128]},
    "package": {
        "instructions": {"dtype": "u8", "count": 32, "record_bytes": 16, "init": {"kind": "zeros"}},
        "queue_offsets": {"dtype": "i32", "count": 2, "data": "AAAAAAEAAAA="},
        "queue_lengths": {"dtype": "i32", "count": 2, "data": "AQAAAAEAAAA="},
    },
    "target": {"arch": "sm_90a", "sm_count": 132, "max_shared_memory_per_block_optin": 232448,
               "cluster_launch": True, "compiler_version": "nvcc 13.0", "fingerprint": "t:1"},
}


def wrapper(fn):
    p = copy.deepcopy(WRAPPER_BASE)
    fn(p)
    return json.dumps(p, indent=1)


JSON_CASES += [
    # queue 1: offset 1 + length 2 = 3 records of 2
    ("wrapper_queue_range", wrapper(setp(["package", "queue_lengths", "data"], "AQAAAAIAAAA=")),
     P, "wrapper.package.queue_range", "/package/queue_offsets"),
    ("wrapper_bad_policy", wrapper(setp(["launch", "scheduling_policy"], "spread")),
     P, "wrapper.launch.scheduling_policy", "/launch/scheduling_policy"),
    ("wrapper_source_escape", wrapper(both(delp(["wrapper", "source"]), setp(["wrapper", "source_path"], "../../CMakeLists.txt"))),
     P, "path.escape", "/wrapper/source_path"),
    # queue_offsets says 2 elements but carries 3
    ("wrapper_size_lie", wrapper(setp(["package", "queue_offsets", "data"], "AAAAAAEAAAACAAAA")),
     P, "wrapper.package.size", "/package/queue_offsets/data"),
    # 32 bytes of instructions are no whole number of 12-byte records
    ("wrapper_record_lie", wrapper(setp(["package", "instructions", "record_bytes"], 12)),
     P, "wrapper.package.record_bytes", "/package/instructions/record_bytes"),
    ("wrapper_tensor_args_given", wrapper(setp(["package", "tensor_args"], {"dtype": "u8", "count": 144})),
     P, "wrapper.package.tensor_args", "/package/tensor_args"),
    ("wrapper_cluster_grid", wrapper(setp(["launch", "cluster_size"], 4)),
     P, "wrapper.launch.cluster_size", "/launch/cluster_size"),
    # a TMA spec over a tensor argument that does not exist, and two specs of one name
    ("wrapper_tma_unknown_tensor", wrapper(both(setp(["tensor_args"], [{"name": "w", "dtype": "f32", "shape": [16, 64]}]),
                                                setp(["tma"], [{"name": "m", "tensor": "v", "dims": [64, 16], "box": [64, 8]}]))),
     P, "ref.tensor_arg", "/tma/0/tensor"),
    ("wrapper_tma_duplicate", wrapper(both(setp(["tensor_args"], [{"name": "w", "dtype": "f32", "shape": [16, 64]}]),
                                           setp(["tma"], [{"name": "m", "tensor": "w", "dims": [64, 16], "box": [64, 8]},
                                                          {"name": "m", "tensor": "w", "dims": [64, 16], "box": [64, 8]}]))),
     P, "name.duplicate", "/tma/1/name"),
]

# Cases too large to commit, written at test time: expected.tsv names them under generated/ and
# tests/cli/bad_inputs.sh writes them to a scratch folder with --generated-into. Each text is a
# function so that only the modes that write it pay for it.
GENERATED = "generated"
GENERATED_CASES = [
    # More buffers than amk's limit (kMaxBuffers = 65536): about 5 MB of JSON.
    ("too_many_buffers", lambda: mutate(setp(["buffers"], [{"name": f"b{i}", "dtype": "u8", "shape": [1]} for i in range(70000)])),
     P, "limit.buffers", "/buffers"),
]

# Data files are checked when the data is materialized, not at load: a missing one (io error), a
# safetensors file whose tensors share bytes (its data file is in DATA_FILES).
RUN_CASES = [
    ("missing_npy", mutate(setp(["buffers", 0, "init"], {"kind": "npy", "path": "no_such.npy"})), IO, "io.missing", "/buffers/0/init/path"),
    # Valid, but 2 TiB of buffers: more host memory than the machine has, refused before any is
    # allocated (the biggest buffer is named).
    ("host_memory", mutate(setp(["buffers"], BASE["buffers"] + [{"name": "big0", "dtype": "u8", "shape": [1 << 40]},
                                                                {"name": "big1", "dtype": "u8", "shape": [(1 << 40) - (1 << 20)]}])),
     DEV, "host.memory", "/buffers/4"),
    ("safetensors_overlap", mutate(setp(["buffers", 0, "init"], {"kind": "safetensors", "path": "overlap.safetensors", "tensor": "a"})),
     P, "init.safetensors.overlap", "/buffers/0/init/path"),
    # A valid wrapper program: the CPU backend refuses it by kind.
    ("wrapper_cpu_backend", wrapper(lambda p: None), P, "wrapper.backend.cpu", "/format"),
]


def safetensors_file(header, data_bytes):
    text = json.dumps(header).encode()
    return struct.pack("<Q", len(text)) + text + bytes(data_bytes)


# Data files the RUN_CASES name, written beside them in json/.
DATA_FILES = [
    # x is f32[256] (1024 bytes): a is [0, 1024), b [512, 1536) overlaps its second half.
    ("overlap.safetensors", lambda: safetensors_file(
        {"a": {"dtype": "F32", "shape": [256], "data_offsets": [0, 1024]},
         "b": {"dtype": "F32", "shape": [256], "data_offsets": [512, 1536]}}, 1536)),
]




def write_generated(out_dir):
    os.makedirs(out_dir, exist_ok=True)
    for name, text, _, _, _ in GENERATED_CASES:
        with open(os.path.join(out_dir, name + ".json"), "w") as f:
            f.write(text())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--amk", help="the amk binary (needed to write the committed corpus)")
    ap.add_argument("--generated-into", metavar="DIR",
                    help="write only the large generated cases, into DIR (outside the tree)")
    args = ap.parse_args()
    if args.generated_into:
        write_generated(args.generated_into)
        return 0
    if not args.amk:
        ap.error("--amk is required unless --generated-into is given")
    os.makedirs(os.path.join(HERE, "json"), exist_ok=True)
    rows = []
    for name, text, code, err, where in JSON_CASES:
        fname = os.path.join("json", name + ".json")
        with open(os.path.join(HERE, fname), "w") as f:
            f.write(text)
        rows.append(("validate", fname, code, err, where))
    for name, _, code, err, where in GENERATED_CASES:
        rows.append(("validate", GENERATED + "/" + name + ".json", code, err, where))
    for name, data in DATA_FILES:
        with open(os.path.join(HERE, "json", name), "wb") as f:
            f.write(data())
    for name, text, code, err, where in RUN_CASES:
        fname = os.path.join("json", name + ".json")
        with open(os.path.join(HERE, fname), "w") as f:
            f.write(text)
        rows.append(("run", fname, code, err, where))
    try:
        import amkb_cases  # noqa: F401  (written once the binary format is documented)
        rows += amkb_cases.generate(args.amk, HERE, BASE)
        rows += amkb_cases.generate_wrapper(args.amk, HERE, WRAPPER_BASE)
    except ImportError:
        pass
    with open(os.path.join(HERE, "expected.tsv"), "w") as f:
        f.write("# command\tfile\texit\tcode\twhere\n")
        for r in rows:
            f.write("\t".join(str(x) for x in r) + "\n")
    print(f"{len(rows)} cases")


if __name__ == "__main__":
    sys.exit(main())
