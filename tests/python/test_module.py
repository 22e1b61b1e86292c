"""The Python module `amk` on the CPU backend: the same verdicts, programs and outputs as the
amk command line, and errors Python can branch on. Needs PYTHONPATH at build/<preset>/python and
$AMK (the amk binary)."""
import glob
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import amk

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
AMK = os.environ["AMK"]
SAMPLES = sorted(glob.glob(os.path.join(ROOT, "samples", "*.json")))


def cli_json(*args):
    r = subprocess.run([AMK, "--json", *args], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


@pytest.mark.parametrize("path", SAMPLES, ids=os.path.basename)
def test_validate_matches_the_cli(path):
    verdict = amk.load(path).validate()
    cli = cli_json("validate", path)["programs"][0]
    for key in ("status", "name", "instructions", "critical_path"):
        assert verdict[key] == cli[key], key


@pytest.mark.parametrize("path", SAMPLES, ids=os.path.basename)
def test_cpu_outputs_equal_the_cli_byte_for_byte(path, tmp_path):
    report = amk.run(path, backend="cpu", out_dir=str(tmp_path / "py"))
    assert report["status"] == "ok"
    r = subprocess.run([AMK, "-q", "run", path, "--backend", "cpu", "-o", str(tmp_path / "cli")],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    manifest = json.load(open(tmp_path / "cli" / "manifest.json"))
    assert manifest["outputs"], "a sample with outputs"
    for entry in manifest["outputs"]:
        a = (tmp_path / "py" / entry["file"]).read_bytes()
        b = (tmp_path / "cli" / entry["file"]).read_bytes()
        assert a == b, entry["name"]


def test_json_round_trip_and_dict():
    p = amk.load(SAMPLES[0])
    text = p.to_json()
    assert amk.Program.from_json(text).to_json() == text
    d = p.to_dict()
    assert d["name"] == p.name and len(d["instructions"]) == p.instruction_count
    assert amk.Program.from_dict(d).to_json() == text
    assert [b["name"] for b in p.buffers] == [b["name"] for b in d["buffers"]]


def test_generated_program_equals_the_cli_one(tmp_path):
    p = amk.gen.llama(preset="tiny", steps=3, prompt=[3, 5, 7], seed=4)
    out = tmp_path / "g.json"
    r = subprocess.run([AMK, "-q", "gen", "llama", "--steps", "3", "--prompt", "3,5,7",
                        "--seed", "4", "-o", str(out)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert p.to_json() == amk.load(str(out)).to_json()
    assert p.validate()["status"] == "ok"
    assert "ids" in [b["name"] for b in p.buffers]


def test_errors_carry_kind_code_where_and_exit_code(tmp_path):
    with pytest.raises(amk.ProgramError) as e:
        amk.Program.from_json("{")
    assert isinstance(e.value, amk.Error)
    assert (e.value.kind, e.value.code, e.value.exit_code) == ("program", "json.syntax", 3)
    with pytest.raises(amk.IoError) as e:
        amk.load(str(tmp_path / "missing.json"))
    assert e.value.exit_code == 4 and e.value.where
    with pytest.raises(amk.IoError) as e:  # a folder where the program belongs
        amk.open(str(tmp_path), backend="cpu")
    assert e.value.code == "io.read" and e.value.where == str(tmp_path)
    with pytest.raises(amk.UsageError) as e:
        amk.gen.llama(kv_dtype="f16")
    assert e.value.code == "usage.gen.kv_dtype" and e.value.exit_code == 2
    with pytest.raises(amk.UsageError):
        amk.gen.llama(steps=2, prompt=[1, 512])  # outside the tiny vocabulary
    # A program the verifier refuses: an instruction reading past its buffer.
    d = amk.load(SAMPLES[0]).to_dict()
    d["instructions"][0]["operands"] = {k: {"buffer": v if isinstance(v, str) else v["buffer"],
                                            "offset": 1 << 40, "extent": 1}
                                        for k, v in d["instructions"][0]["operands"].items()}
    with pytest.raises(amk.ProgramError) as e:
        amk.Program.from_dict(d).validate()
    assert e.value.where.startswith("/instructions/0")


@pytest.mark.parametrize("path", SAMPLES, ids=os.path.basename)
def test_executable_outputs_equal_the_cli(path, tmp_path):
    r = subprocess.run([AMK, "-q", "run", path, "--backend", "cpu", "-o", str(tmp_path / "cli")],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    manifest = json.load(open(tmp_path / "cli" / "manifest.json"))
    with amk.open(path, backend="cpu") as exe:
        exe.launch()
        for entry in manifest["outputs"]:
            want = np.load(tmp_path / "cli" / entry["file"])
            got = exe.get(entry["name"])
            assert got.shape == want.shape and got.tobytes() == want.tobytes(), entry["name"]
    assert exe.closed


def test_executable_inputs_and_generation(tmp_path):
    # A decode step: another token gives other logits; the same token the same ones again.
    step = amk.gen.llama(preset="tiny", seed=2)
    with amk.open(step) as exe:
        exe.launch()
        first = exe.get("act.logits").copy()
        exe.set("token", np.array([7], dtype=np.int32))
        exe.launch()
        other = exe.get("act.logits")
        assert not np.array_equal(first, other)
        exe.set("token", np.array([1], dtype=np.int32))
        exe.launch()
        assert np.array_equal(first, exe.get("act.logits"))
    # A generation: the ids equal amk generate's.
    gen = amk.gen.llama(preset="tiny", steps=5, prompt=[3, 5, 7], seed=4)
    with amk.open(gen) as exe:
        exe.launch()
        ids = exe.get("ids").ravel().tolist()
    cli = cli_json("generate", "--steps", "5", "--prompt", "3,5,7", "--seed", "4", "--backend", "cpu")
    assert ids[-5:] == cli["ids"]


@pytest.mark.parametrize("path", SAMPLES, ids=os.path.basename)
def test_inspect_matches_the_cli(path):
    mine = amk.load(path).inspect()
    cli = cli_json("inspect", path)
    for key in ("name", "buffers", "instructions", "counters", "queues", "critical_path",
                "launch", "target"):
        assert mine[key] == cli[key], key


def test_generate_equals_the_cli():
    gen = amk.gen.llama(preset="tiny", steps=6, prompt=[2, 4, 6], seed=5)
    r = amk.generate(gen, backend="cpu")
    cli = cli_json("generate", "--steps", "6", "--prompt", "2,4,6", "--seed", "5", "--backend", "cpu")
    assert r["ids"] == cli["ids"] and r["generated"] == 6 and r["steps"] == cli["steps"]
    assert r["new_tokens_per_s"] > 0
    # eos ends the launch one step after generating it, as amk generate --eos does.
    eos = r["ids"][1]
    cut = amk.generate(gen, backend="cpu", eos=eos)
    assert cut["ids"] == r["ids"][: r["ids"].index(eos) + 1]
    assert cut["stopped_at_eos"] and cut["generated"] == len(cut["ids"])
    cli_cut = cli_json("generate", "--steps", "6", "--prompt", "2,4,6", "--seed", "5", "--backend",
                       "cpu", "--eos", str(eos))
    assert (cut["ids"], cut["steps"]) == (cli_cut["ids"], cli_cut["steps"])
    assert cut["steps"] == min(len(cut["ids"]) + 3, r["steps"])  # prompt 3 + ids - 1, + 1
    with pytest.raises(amk.UsageError) as e:  # the tiny vocabulary is 0..511
        amk.generate(gen, backend="cpu", eos=512)
    assert e.value.code == "usage.generate.eos"
    baked = amk.gen.llama(preset="tiny", steps=6, prompt=[2, 4, 6], seed=5, eos=eos)
    own = amk.generate(baked, backend="cpu")  # the program's own eos
    assert (own["ids"], own["steps"], own["stopped_at_eos"]) == (cut["ids"], cut["steps"], True)
    with amk.open(baked, backend="cpu") as exe:
        exe.launch()
        assert exe.passes_run == cut["steps"]
        assert list(exe.get("ids")[: len(cut["ids"])]) == cut["ids"]
        with pytest.raises(amk.UsageError) as e:  # no GPU stream to queue it on
            exe.launch(wait=False)
        assert e.value.code == "api.async.backend"
        exe.wait()  # (nothing pending on the CPU backend)
    with pytest.raises(amk.UsageError) as e:
        amk.generate(amk.load(SAMPLES[0]), backend="cpu")
    assert e.value.code == "usage.generate.program"


def diamond_builder():
    b = amk.ProgramBuilder("diamond", grid=4, block=128)
    x = b.buffer("x", "f32", [8, 64], init={"kind": "random", "seed": 41,
                                           "distribution": "uniform", "low": -3, "high": 3})
    src, left, right = (b.buffer(n, "f32", [8, 64]) for n in ("src", "left", "right"))
    bias = b.buffer("bias", "f32", [4], output=True)
    out = b.buffer("out", "f32", [8, 64], output=True)
    fork, join = b.counter("fork"), b.counter("join")
    produce = b.instruction("copy", {"x": x, "y": src}, signals=[fork], name="produce")
    lft = b.instruction("scale", {"x": src, "y": left}, {"alpha": -1.5}, waits=[(fork, 1)],
                        signals=[join], name="branch_left")
    rgt = b.instruction("softmax", {"x": src, "y": right}, {"cols": 64, "scale": 0.5},
                        waits=[(fork, 1)], signals=[join], name="branch_right")
    ind = b.instruction("fill", {"y": bias}, {"value": 7.25}, name="independent")
    end = b.instruction("add", {"a": left, "b": right, "y": out}, waits=[(join, 2)], name="join")
    for q in ([produce], [lft], [rgt], [ind, end]):
        b.queue(q)
    return b


def test_builder_makes_the_sample(tmp_path):
    sample = os.path.join(ROOT, "samples", "diamond.json")
    built = diamond_builder().build()
    loaded = amk.load(sample)
    assert built.validate() == loaded.validate()
    mine, theirs = built.to_dict(), loaded.to_dict()
    mine.pop("description", None), theirs.pop("description", None)
    assert mine == theirs
    with amk.open(built, backend="cpu") as a, amk.open(sample, backend="cpu") as b:
        a.launch(), b.launch()
        assert a.get("out").tobytes() == b.get("out").tobytes()


def test_builder_refusals_come_from_the_verifier():
    b = diamond_builder()
    b.buffer("x", "f32", [4])  # a second buffer named x
    with pytest.raises(amk.ProgramError) as e:
        b.build()
    assert e.value.where == "/buffers/6/name", e.value
    b = diamond_builder()
    b.instruction("add", {"a": "left", "b": "right", "y": "out"}, waits=[("join", 3)])
    with pytest.raises(amk.ProgramError):
        b.build()  # the new instruction is in no queue
    b = diamond_builder()
    b.instruction("no_such_op", {"y": "out"})
    with pytest.raises(amk.ProgramError) as e:
        b.build()
    assert e.value.where.startswith("/instructions/5"), e.value


def test_executable_refusals():
    exe = amk.open(SAMPLES[0])
    name = exe.buffers[0]["name"]
    with pytest.raises(amk.UsageError) as e:
        exe.get("no such buffer")
    assert e.value.code == "api.buffer"
    want = exe.get(name)
    with pytest.raises(amk.UsageError) as e:
        exe.set(name, np.zeros(want.size + 1, dtype=want.dtype))
    assert e.value.code == "api.size"
    other = np.int64 if want.dtype != np.int64 else np.int32
    with pytest.raises(amk.UsageError) as e:
        exe.set(name, np.zeros(want.shape, dtype=other))
    assert e.value.code == "api.dtype"
    exe.close()
    with pytest.raises(amk.UsageError) as e:
        exe.launch()
    assert e.value.code == "api.closed"
    with pytest.raises(TypeError):
        amk.open(None)
    import pathlib
    with amk.open(pathlib.Path(SAMPLES[0]), backend="cpu") as by_path:
        assert by_path.buffers
    with pytest.raises(amk.UsageError) as e:
        amk.open(SAMPLES[0], backend="gpu")
    assert e.value.code == "usage.backend" and e.value.status == amk.Status.REJECTED


class Tensor:
    """A host array seen only through DLPack (as a CPU torch tensor would be)."""

    def __init__(self, array):
        self.array = array

    def __dlpack__(self, *args, **kwargs):
        return self.array.__dlpack__()


def test_executable_tensors_on_the_cpu_backend():
    with amk.open(SAMPLES[0], backend="cpu") as exe:
        assert exe.backend == "cpu"
        name = exe.buffers[0]["name"]
        want = exe.get(name)
        fresh = np.random.default_rng().standard_normal(want.shape).astype(want.dtype) + 1
        exe.set(name, Tensor(fresh))  # read through its DLPack capsule
        assert exe.get(name).tobytes() == fresh.tobytes()
        for value, code in ((Tensor(fresh.ravel()[: fresh.size // 2]), "api.size"),
                            (Tensor(fresh.astype(np.float64)), "api.dtype"),
                            (Tensor(np.ones((2, want.size))[:, ::2]), "api.tensor.layout"),
                            ([1.0] * want.size, "api.tensor")):
            with pytest.raises(amk.UsageError) as e:
                exe.set(name, value)
            assert e.value.code == code, (code, e.value)
        assert exe.get(name).tobytes() == fresh.tobytes()  # nothing written by a refusal
        # The GPU's calls refuse on the CPU backend.
        with pytest.raises(amk.UsageError) as e:
            exe.bind(name, Tensor(fresh))
        assert e.value.code == "api.bind.backend"
        for call in (exe.attributes, exe.profile, exe.stats):
            with pytest.raises(amk.UsageError) as e:
                call()
            assert e.value.code == "api.backend"


def test_wrapper_programs_need_trust_and_the_gpu():
    wrapper = os.path.join(ROOT, "tests", "wrapper", "sample", "wrapper.json")
    with pytest.raises(amk.Error) as e:
        amk.open(wrapper, backend="cpu")
    assert e.value.code == "wrapper.untrusted", e.value
    with pytest.raises(amk.UsageError) as e:
        amk.open(wrapper, backend="cpu", trust_source=True)
    assert e.value.code == "api.wrapper.backend"


def sample_wrapper_builder():
    import base64
    folder = os.path.join(ROOT, "tests", "wrapper", "sample")
    j = json.load(open(os.path.join(folder, "wrapper.json")))
    source = open(os.path.join(folder, j["wrapper"]["source_path"])).read()
    b = amk.WrapperBuilder(j["name"], j["wrapper"]["kernel_name"], source,
                           defines=j["wrapper"]["defines"], target=j["target"],
                           queues=j["launch"]["queues"], block_dim=j["launch"]["block_dim"],
                           dynamic_smem_bytes=j["launch"]["dynamic_smem_bytes"],
                           cluster_size=j["launch"]["cluster_size"],
                           timeout_ms=j["launch"]["timeout_ms"])
    types = {"u8": np.uint8, "i32": np.int32, "u32": np.uint32, "f32": np.float32}
    for name, e in j["package"].items():
        if "data" in e:
            a = np.frombuffer(base64.b64decode(e["data"]), dtype=types[e["dtype"]])
            b.package(name, a, record_bytes=e.get("record_bytes"))
        else:
            b.package(name, dtype=e["dtype"], count=e["count"], init=e.get("init"),
                      record_bytes=e.get("record_bytes"))
    for t in j["tensor_args"]:
        b.tensor(t["name"], t["dtype"], t["shape"], init=t.get("init"), output=t.get("output", False))
    for m in j["tma"]:
        b.tma(**m)
    return b, folder


def test_wrapper_builder_makes_the_sample(tmp_path):
    b, folder = sample_wrapper_builder()
    want = amk.check_wrapper(open(os.path.join(folder, "wrapper.json")).read(), folder)
    assert b.check() == want
    path = b.write(str(tmp_path / "w"))
    cli = cli_json("validate", path)["programs"][0]
    assert cli["status"] == "ok", cli
    with pytest.raises(amk.UsageError) as e:  # loads through amk.open; the CPU cannot run it
        amk.open(path, backend="cpu", trust_source=True)
    assert e.value.code == "api.wrapper.backend"
    b.package("queue_offsets", np.array([0], dtype=np.int32))  # one queue's offset for two
    with pytest.raises(amk.ProgramError) as e:
        b.check()
    assert e.value.where.startswith("/package/queue_offsets"), e.value


def test_cuda_backend_without_a_gpu():
    if amk.open(SAMPLES[0]).backend == "cuda":
        pytest.skip("a GPU is present (tests/python/test_gpu.py runs there)")
    with pytest.raises(amk.DeviceError) as e:
        amk.open(SAMPLES[0], backend="cuda")
    assert e.value.exit_code == 5


def test_compile_for_sm90a(tmp_path):
    p = amk.load(SAMPLES[0])
    try:
        r = amk.compile(p, cache_dir=str(tmp_path), explain=True)
    except amk.DeviceError as e:
        pytest.skip(f"built without the CUDA toolkit: {e}")
    assert (r["status"], r["arch"], r["kernel"]) == ("ok", "sm_90a", "amk_vm")
    assert r["cubin_bytes"] > 0 and not r["cache_hit"]
    assert "vm config" in r["explain"]
    again = amk.compile(p, cache_dir=str(tmp_path))
    assert again["cache_hit"] and again["fingerprint"] == r["fingerprint"]
    with pytest.raises(amk.UsageError) as e:
        amk.compile(p, arch="sm_10")
    assert e.value.code == "usage.arch"


def test_stubs_name_every_public_call():
    stubs = open(os.path.join(os.path.dirname(amk.__file__), "amk.pyi")).read()
    for name in (n for n in dir(amk) if not n.startswith("_")):
        assert f"class {name}" in stubs or f"def {name}(" in stubs, name
    for cls in (amk.Program, amk.ProgramBuilder, amk.WrapperBuilder, amk.Executable, amk.gen):
        for name in (n for n in dir(cls) if not n.startswith("_")):
            assert f"def {name}(" in stubs, f"{cls.__name__}.{name}"


def test_a_program_with_ranks_runs_on_the_cpu_as_its_expansion():
    p = {"format": "amk.program", "version": 1, "name": "two_ranks", "launch": {"ranks": 2},
         "buffers": [{"name": "x", "dtype": "f32", "shape": [64],
                      "init": [{"kind": "random", "seed": 11}, {"kind": "random", "seed": 12}]},
                     {"name": "h", "dtype": "f32", "shape": [64], "output": True}],
         "counters": ["c"],
         "instructions": [
             {"op": "scale", "operands": {"x": "x", "y": "h"}, "params": {"alpha": 3},
              "signals": [{"counter": "c"}]},
             {"op": "all_reduce", "operands": {"x": "h"}, "waits": [{"counter": "c", "value": 1}]}]}
    with amk.open(amk.Program.from_dict(p), backend="auto") as exe:
        assert exe.backend == "cpu"  # (the only backend of programs with ranks so far)
        x = [exe.get(f"x.rank{r}").astype(np.float64) for r in range(2)]
        exe.launch()
        want = 3 * (x[0] + x[1])
        for r in range(2):
            assert np.abs(exe.get(f"h.rank{r}") - want).max() <= 1e-5 * np.abs(want).max()
    with pytest.raises(amk.DeviceError) as e:
        amk.open(amk.Program.from_dict(p), backend="cuda")
    assert e.value.code in ("device.ranks", "device.unsupported")  # (unsupported: built without CUDA)


def test_a_fault_on_one_rank_names_the_instruction_and_the_rank():
    p = {"format": "amk.program", "version": 1, "name": "bad_id", "launch": {"ranks": 2},
         "buffers": [{"name": "table", "dtype": "f32", "shape": [4, 8]},
                     {"name": "ids", "dtype": "i32", "shape": [1],
                      "init": [{"kind": "values", "values": [1]}, {"kind": "values", "values": [9]}]},
                     {"name": "y", "dtype": "f32", "shape": [8], "output": True}],
         "counters": [],
         "instructions": [{"op": "embedding", "operands": {"table": "table", "ids": "ids", "y": "y"}}]}
    with amk.open(amk.Program.from_dict(p), backend="cpu") as exe:
        with pytest.raises(amk.Error) as e:
            exe.launch()
    assert e.value.where == "/instructions/0"
    assert "(on rank 1)" in str(e.value)


def test_a_tensor_parallel_llama_equals_the_one_rank_program():
    one, two = amk.gen.llama(seed=5), amk.gen.llama(seed=5, tp=2)
    assert two.to_dict()["launch"]["ranks"] == 2 and two.validate()["status"] == "ok"
    with amk.open(one, backend="cpu") as a, amk.open(two, backend="cpu") as b:
        a.launch()
        b.launch()
        want = a.get("act.logits").astype(np.float64)  # rank 0 gathers every rank's share
        got = b.get("act.logits.rank0").astype(np.float64)
        assert np.abs(got - want).max() <= 1e-5 * np.abs(want).max()
        assert b.get("next_token.rank0")[0] == a.get("next_token")[0]
    with pytest.raises(amk.UsageError) as e:
        amk.gen.llama(tp=3)  # 4 heads
    assert e.value.code == "usage.gen.tp"


def hf_folder(folder):
    """A small Hugging Face Llama folder (scripts/check_llama.py's), with an eos id."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("check_llama", os.path.join(ROOT, "scripts", "check_llama.py"))
    check_llama = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(check_llama)
    check_llama.write_hf_checkpoint(str(folder), seed=11, shards=2, tied=False)
    return str(folder)


def test_a_checkpoint_generates_as_the_cli_does(tmp_path):
    ck = hf_folder(tmp_path / "hf")
    program = amk.gen.llama(checkpoint=ck, steps=5, prompt=[3, 5, 7])
    assert program.validate()["status"] == "ok"
    cli = cli_json("generate", "--from", ck, "--steps", "5", "--prompt", "3,5,7", "--backend", "cpu")
    assert amk.generate(program, backend="cpu")["ids"] == cli["ids"]
    with pytest.raises(amk.UsageError) as e:
        amk.gen.llama(preset="tiny", checkpoint=ck)
    assert e.value.code == "usage.gen.from"
    with pytest.raises(amk.IoError) as e:
        amk.gen.llama(checkpoint=str(tmp_path / "missing"))
    assert e.value.exit_code == 4


def test_the_text_example_prints_the_ids_amk_generate_gives(tmp_path):
    ck = hf_folder(tmp_path / "hf")
    cfg = json.load(open(os.path.join(ck, "config.json")))
    script = os.path.join(ROOT, "scripts", "generate_text.py")
    env = dict(os.environ, PYTHONPATH=os.path.dirname(amk.__file__))
    run = lambda *a: subprocess.run([sys.executable, script, "--checkpoint", ck, *a],
                                    capture_output=True, text=True, env=env)
    cli = cli_json("generate", "--from", ck, "--steps", "6", "--prompt", "9,4", "--backend", "cpu")
    r = run("--ids", "9,4", "--steps", "6", "--backend", "cpu", "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["ids"] == cli["ids"] and out["prompt_ids"] == [9, 4] and out["generated"] == 6
    # The checkpoint's eos id (the first of a list) ends the launch one step after generating it.
    ids = cli_json("generate", "--from", ck, "--steps", "12", "--prompt", "9,4", "--backend", "cpu")["ids"]
    k = next(k for k in range(1, len(ids)) if ids[k] not in ids[:k])
    assert k + 1 < len(ids), ids  # (the stop must cut the generation short)
    cfg["eos_token_id"] = [ids[k], max(ids) + 1]
    json.dump(cfg, open(os.path.join(ck, "config.json"), "w"))
    r = run("--ids", "9,4", "--steps", "12", "--backend", "cpu", "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["ids"] == ids[:k + 1]
    # Plain output: the ids on one line; a text prompt without a tokenizer is refused.
    r = run("--ids", "9,4", "--steps", "2", "--eos", "-1", "--backend", "cpu")
    assert r.returncode == 0 and r.stdout.split() == [str(i) for i in cli["ids"][:2]], r.stderr
    r = run("--prompt", "hello", "--backend", "cpu")
    assert r.returncode != 0 and "--ids" in r.stderr
    for bad in (("--ids", ","), ("--ids", "1", "--steps", "0"), ("--ids", "1", "--steps", "-1")):
        r = run(*bad, "--backend", "cpu")
        assert r.returncode == 2 and "Traceback" not in r.stderr, (bad, r.stderr)
    # amk's errors keep their exit codes: an id outside the vocabulary (128) is a usage error.
    r = run("--ids", "9,400", "--backend", "cpu")
    assert r.returncode == 2 and "generate_text:" in r.stderr


def test_logs_go_to_stderr_at_the_level_asked(capfd, tmp_path):
    amk.run(SAMPLES[0], backend="cpu", out_dir=str(tmp_path / "quiet"))
    out, err = capfd.readouterr()
    assert out == "" and err == ""  # warnings and errors only, by default
    amk.set_log_level("info")
    try:
        amk.run(SAMPLES[0], backend="cpu", out_dir=str(tmp_path / "info"))
    finally:
        amk.set_log_level("warn")
    out, err = capfd.readouterr()
    assert out == "" and "amk: info: load_verify done in" in err
    with pytest.raises(amk.UsageError) as e:
        amk.set_log_level("loud")
    assert e.value.code == "usage.log_level" and e.value.exit_code == 2
