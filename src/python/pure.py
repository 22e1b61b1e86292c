# The Python module's pure-Python part, run in the module's namespace at import: amk.Status and
# amk.ProgramBuilder.


class Status:
    """What became of a call, as every amk.Error's `status` attribute says: OK (no error),
    TIMEOUT (the watchdog or an interrupt stopped the launch), REJECTED (refused before anything
    ran: bad arguments, program, device) or ERROR (a failure while running)."""
    OK = "ok"
    TIMEOUT = "timeout"
    REJECTED = "rejected"
    ERROR = "error"


class ProgramBuilder:
    """A program built call by call, as a compiler emits one: buffers, counters, instructions,
    queues, TMA specs, custom ops, launch and target. build() hands the JSON form to
    Program.from_dict, so the same loader and verifier check it (errors name the JSON pointer
    of what they refuse). Every method returns the name it added, to pass to the others."""

    def __init__(self, name, description="", *, grid="auto", block=256, passes=None,
                 timeout_ms=None, mode=None, cluster=None, dynamic_smem=None, min_arch=None,
                 features=None, smem_per_block=None):
        launch = {"grid": grid, "block": block}
        for key, value in (("passes", passes), ("timeout_ms", timeout_ms), ("mode", mode),
                           ("cluster", cluster), ("dynamic_smem", dynamic_smem)):
            if value is not None:
                launch[key] = value
        self._program = {"format": "amk.program", "version": 1, "name": name, "launch": launch,
                         "buffers": [], "counters": [], "instructions": []}
        if description:
            self._program["description"] = description
        target = {k: v for k, v in (("min_arch", min_arch), ("features", features),
                                    ("smem_per_block", smem_per_block)) if v is not None}
        if target:
            self._program["target"] = target

    def buffer(self, name, dtype, shape, init=None, output=False):
        """dtype: f32 f16 bf16 i32 u32 i64 u8; init: a dict as in the JSON form, e.g.
        {"kind": "random", "seed": 1, "low": -1, "high": 1}; none: zeros."""
        b = {"name": name, "dtype": dtype, "shape": list(shape)}
        if init is not None:
            b["init"] = dict(init)
        if output:
            b["output"] = True
        self._program["buffers"].append(b)
        return name

    def counter(self, name):
        self._program["counters"].append(name)
        return name

    def instruction(self, op, operands, params=None, waits=(), signals=(), name=None):
        """operands: slot -> buffer name, (buffer, offset, extent) or a dict; waits: counter
        names (value 1), (counter, value) or dicts; signals: counter names (add 1),
        (counter, add) or dicts."""
        def operand(v):
            if isinstance(v, (tuple, list)):
                return {"buffer": v[0], "offset": v[1], "extent": v[2]}
            return v

        def event(v, key):
            if isinstance(v, str):
                return {"counter": v}
            if isinstance(v, (tuple, list)):
                return {"counter": v[0], key: v[1]}
            return dict(v)

        ins = {"name": name or f"{op}_{len(self._program['instructions'])}", "op": op,
               "operands": {slot: operand(v) for slot, v in operands.items()}}
        if params:
            ins["params"] = dict(params)
        if waits:
            ins["waits"] = [event(w, "value") for w in waits]
        if signals:
            ins["signals"] = [event(s, "add") for s in signals]
        self._program["instructions"].append(ins)
        return ins["name"]

    def queue(self, instructions):
        """The next block's queue, in order (every program gives all queues or none)."""
        self._program.setdefault("queues", []).append(list(instructions))
        return len(self._program["queues"]) - 1

    def tma(self, name, buffer, dims, box, **fields):
        """A TMA descriptor spec; fields as in the JSON form (offset, strides, swizzle ...)."""
        self._program.setdefault("tma", []).append(
            {"name": name, "buffer": buffer, "dims": list(dims), "box": list(box), **fields})
        return name

    def custom_op(self, name, source, operands=(), params=()):
        """A custom op's CUDA source (opened with trust_custom_ops=True)."""
        op = {"name": name, "source": source}
        if operands:
            op["operands"] = list(operands)
        if params:
            op["params"] = list(params)
        self._program.setdefault("custom_ops", []).append(op)
        return name

    def to_dict(self):
        import copy
        return copy.deepcopy(self._program)

    def build(self, allow_outside=False, trust_custom_ops=False):
        return Program.from_dict(self._program, allow_outside=allow_outside,
                                 trust_custom_ops=trust_custom_ops)


class WrapperBuilder:
    """A wrapper program (schemas/wrapper.md): a compiler's own megakernel source with the launch
    package in executor.py's order, tensor arguments, TMA specs and the target it was made for,
    built call by call. check() runs amk's wrapper loader and structural checks (errors name the
    JSON pointer); write(folder) writes wrapper.json for amk.open(path, trust_source=True) and
    `amk run --trust-source`. numpy arrays given to package() are stored inline (base64)."""

    def __init__(self, name, kernel_name, source, *, queues, block_dim, target, defines=(),
                 description="", dynamic_smem_bytes=0, cluster_size=1, timeout_ms=None):
        launch = {"queues": queues, "block_dim": list(block_dim) if hasattr(block_dim, "__len__")
                  else [block_dim], "dynamic_smem_bytes": dynamic_smem_bytes,
                  "cluster_size": cluster_size}
        if timeout_ms is not None:
            launch["timeout_ms"] = timeout_ms
        self._program = {"format": "amk.wrapper", "version": 1, "name": name,
                         "wrapper": {"kernel_name": kernel_name, "source": source,
                                     "defines": list(defines)},
                         "launch": launch, "package": {}, "target": dict(target)}
        if description:
            self._program["description"] = description

    def package(self, name, array=None, *, dtype=None, count=None, record_bytes=None, init=None):
        """Package array `name` (instructions, queue_offsets, ... flags): a numpy array (its
        dtype and size), or dtype and count with an init dict (e.g. {"kind": "zeros"})."""
        import base64
        entry = {}
        if array is not None:
            import numpy as np
            a = np.ascontiguousarray(array)
            names = {"float32": "f32", "float16": "f16", "int32": "i32", "uint32": "u32",
                     "int64": "i64", "uint8": "u8"}
            entry["dtype"] = dtype or names.get(str(a.dtype), str(a.dtype))
            entry["count"] = int(a.size)
            entry["data"] = base64.b64encode(a.tobytes()).decode("ascii")
        else:
            entry["dtype"], entry["count"] = dtype, count
            if init is not None:
                entry["init"] = dict(init)
        if record_bytes is not None:
            entry["record_bytes"] = record_bytes
        self._program["package"][name] = entry
        return name

    def tensor(self, name, dtype, shape, init=None, output=False):
        t = {"name": name, "dtype": dtype, "shape": list(shape)}
        if init is not None:
            t["init"] = dict(init)
        if output:
            t["output"] = True
        self._program.setdefault("tensor_args", []).append(t)
        return name

    def tma(self, name, tensor, dims, box, **fields):
        self._program.setdefault("tma", []).append(
            {"name": name, "tensor": tensor, "dims": list(dims), "box": list(box), **fields})
        return name

    def to_dict(self):
        import copy
        return copy.deepcopy(self._program)

    def check(self, base_dir="."):
        return check_wrapper(self._program, base_dir)

    def write(self, folder):
        """Checks the program, then writes folder/wrapper.json; returns its path."""
        import builtins  # (amk.open is this namespace's `open`)
        import json
        import os
        os.makedirs(folder, exist_ok=True)
        self.check(folder)
        path = os.path.join(folder, "wrapper.json")
        with builtins.open(path, "w") as f:
            json.dump(self._program, f, indent=1)
        return path
