"""The Python module's GPU executable with torch: every sample against the CPU backend on fresh
random inputs, a torch tensor bound in place (the tensor the kernel writes is the one torch
reads), ordering with torch kernels before and after a launch, waited for or queued on torch's
stream without a host wait, 1000 launches of one executable with changed inputs and no device
memory growth, a generation whose ids equal `amk generate`'s, and one that ends at its eos id.
Skipped without torch or a GPU."""
import glob
import json
import os
import subprocess

import numpy as np
import pytest

import amk

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("no GPU", allow_module_level=True)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
AMK = os.environ["AMK"]
SAMPLES = sorted(glob.glob(os.path.join(ROOT, "samples", "*.json")))
TOLERANCE = {"f32": 1e-4, "f16": 2e-2, "bf16": 2e-2}


def as_float(a, dtype):
    if dtype == "bf16":  # the uint16 bits of bf16 values
        return (a.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    return a.astype(np.float64)


def fresh(buffer, rng):
    shape = buffer["shape"]
    if buffer["dtype"] == "f32":
        return rng.uniform(0.5, 1.5, shape).astype(np.float32)
    if buffer["dtype"] == "f16":
        return rng.uniform(0.5, 1.5, shape).astype(np.float16)
    if buffer["dtype"] == "bf16":
        return (rng.uniform(0.5, 1.5, shape).astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)
    return None


@pytest.mark.parametrize("path", SAMPLES, ids=os.path.basename)
def test_sample_against_the_cpu_backend(path):
    rng = np.random.default_rng()
    with amk.open(path, backend="cuda") as gpu, amk.open(path, backend="cpu") as cpu:
        outputs = [b for b in gpu.buffers if b["output"]]
        for b in gpu.buffers:  # fresh float inputs; poisoned outputs on the GPU
            value = fresh(b, rng) if not b["output"] else None
            if value is not None:
                gpu.set(b["name"], value)
                cpu.set(b["name"], value)
        for b in outputs:
            if b["dtype"] in ("f32", "f16"):
                poison = np.full(b["shape"], np.nan, dtype=np.float32 if b["dtype"] == "f32" else np.float16)
                gpu.set(b["name"], poison)
        gpu.launch()
        cpu.launch()
        assert outputs
        for b in outputs:
            g, c = gpu.get(b["name"]), cpu.get(b["name"])
            if b["dtype"] in TOLERANCE:
                g, c = as_float(g, b["dtype"]), as_float(c, b["dtype"])
                assert np.all(np.isfinite(g)), b["name"]
                err = np.linalg.norm(g - c) / max(np.linalg.norm(c), 1e-30)
                assert err <= TOLERANCE[b["dtype"]], (b["name"], err)
            else:
                assert np.array_equal(g, c), b["name"]


def elementwise():
    path = os.path.join(ROOT, "samples", "elementwise_chain.json")
    exe = amk.open(path, backend="cuda")
    f32 = [b for b in exe.buffers if b["dtype"] == "f32"]
    inputs = [b for b in f32 if not b["output"]]
    outputs = [b for b in f32 if b["output"]]
    return path, exe, inputs, outputs


def test_bound_tensors_are_read_and_written_in_place():
    path, exe, inputs, outputs = elementwise()
    with exe, amk.open(path, backend="cpu") as cpu:
        x = torch.rand(inputs[0]["shape"], device="cuda") + 0.5
        y = torch.full(outputs[0]["shape"], float("nan"), device="cuda")
        exe.bind(inputs[0]["name"], x)
        exe.bind(outputs[0]["name"], y)
        cpu.set(inputs[0]["name"], x.cpu().numpy())
        exe.launch()
        cpu.launch()
        want = torch.from_numpy(cpu.get(outputs[0]["name"])).cuda()
        torch.testing.assert_close(y, want, rtol=1e-5, atol=1e-6)  # torch sees the kernel's write
        assert exe.get(outputs[0]["name"], torch=True) is y
        np.testing.assert_allclose(exe.get(outputs[0]["name"]), want.cpu().numpy(), rtol=1e-5)
        # Stream order: torch writes x on its stream just before the launch, reads y just after.
        s = torch.cuda.Stream()
        with torch.cuda.stream(s):
            big = torch.rand(4096, 4096, device="cuda")
            for _ in range(20):
                big = big @ big / 4096  # keeps the stream busy before the write below
            x.copy_(torch.rand_like(x) + 2.0 + big[0, 0] * 0)
            exe.launch()
            y2 = y * 1.0
        s.synchronize()
        cpu.set(inputs[0]["name"], x.cpu().numpy())
        cpu.launch()
        torch.testing.assert_close(y2, torch.from_numpy(cpu.get(outputs[0]["name"])).cuda(),
                                   rtol=1e-5, atol=1e-6)


def test_launch_without_a_host_wait_orders_on_torchs_stream():
    path, exe, inputs, outputs = elementwise()
    with exe, amk.open(path, backend="cpu") as cpu:
        x = torch.rand(inputs[0]["shape"], device="cuda") + 0.5
        y = torch.full(outputs[0]["shape"], float("nan"), device="cuda")
        exe.bind(inputs[0]["name"], x)
        exe.bind(outputs[0]["name"], y)
        results = []
        for s in (torch.cuda.default_stream(), torch.cuda.Stream()):
            with torch.cuda.stream(s):
                for k in range(3):  # a busy stream: write x, launch, read y; no host wait between
                    big = torch.rand(2048, 2048, device="cuda")
                    for _ in range(10):
                        big = big @ big / 2048
                    x.copy_(torch.rand_like(x) + 1.0 + k + big[0, 0] * 0)
                    exe.launch(wait=False)
                    results.append((x.clone(), y * 1.0))
            exe.wait()
            s.synchronize()
        for x_k, y_k in results:
            cpu.set(inputs[0]["name"], x_k.cpu().numpy())
            cpu.launch()
            torch.testing.assert_close(y_k, torch.from_numpy(cpu.get(outputs[0]["name"])).cuda(),
                                       rtol=1e-5, atol=1e-6)
        assert exe.stats()["launches"] == 6


def test_generation_ending_at_eos_on_the_gpu():
    gen = amk.gen.llama(preset="tiny", steps=10, prompt=[3, 5, 7], seed=8)
    full = amk.generate(gen, backend="cpu")
    eos = full["ids"][4]
    want = full["ids"][: full["ids"].index(eos) + 1]
    r = amk.generate(gen, backend="cuda", eos=eos)
    assert r["ids"] == want and r["stopped_at_eos"]
    assert r["steps"] == amk.generate(gen, backend="cpu", eos=eos)["steps"] < full["steps"]
    baked = amk.gen.llama(preset="tiny", steps=10, prompt=[3, 5, 7], seed=8, eos=eos)
    with amk.open(baked, backend="cuda") as exe:
        exe.launch(wait=False)
        exe.wait()
        assert exe.passes_run == r["steps"]
        assert exe.get("ids").ravel().tolist()[: len(want)] == want


def test_get_as_torch_is_the_executables_memory():
    path, exe, inputs, outputs = elementwise()
    rng = np.random.default_rng()
    out = outputs[0]["name"]
    exe.launch()
    t = exe.get(out, torch=True)
    assert t.is_cuda and t.dtype == torch.float32 and tuple(t.shape) == tuple(outputs[0]["shape"])
    np.testing.assert_array_equal(t.cpu().numpy(), exe.get(out))
    exe.set(inputs[0]["name"], rng.uniform(2.0, 3.0, inputs[0]["shape"]).astype(np.float32))
    exe.launch()
    after = exe.get(out)
    np.testing.assert_array_equal(t.cpu().numpy(), after)  # the same memory: the new launch's
    exe.close()
    np.testing.assert_array_equal(t.cpu().numpy(), after)  # kept alive by the tensor


def test_bind_refusals():
    path, exe, inputs, outputs = elementwise()
    with exe:
        n = inputs[0]["name"]
        shape = inputs[0]["shape"]
        cases = ((torch.rand(shape), "api.bind.device"),
                 (torch.rand(shape, device="cuda", dtype=torch.float64), "api.dtype"),
                 (torch.rand(shape[0] * 2, device="cuda")[::2], "api.tensor.layout"),
                 (torch.rand(shape[0] + 1, device="cuda"), "api.size"),
                 (torch.rand(shape[0] + 1, device="cuda")[1:], "api.bind.alignment"))
        for value, code in cases:
            with pytest.raises(amk.UsageError) as e:
                exe.bind(n, value)
            assert e.value.code == code, (code, e.value)
    with pytest.raises(amk.UsageError) as e:
        exe.launch()
    assert e.value.code == "api.closed"


def test_a_thousand_launches_with_changed_inputs():
    path, exe, inputs, outputs = elementwise()
    rng = np.random.default_rng()
    with exe, amk.open(path, backend="cpu") as cpu:
        free0 = torch.cuda.mem_get_info()[0]
        for k in range(1000):
            x = rng.uniform(0.5, 1.5, inputs[0]["shape"]).astype(np.float32)
            exe.set(inputs[0]["name"], x)
            exe.launch()
            if k % 250 == 0:
                cpu.set(inputs[0]["name"], x)
                cpu.launch()
                np.testing.assert_allclose(exe.get(outputs[0]["name"]),
                                           cpu.get(outputs[0]["name"]), rtol=1e-5)
        free1 = torch.cuda.mem_get_info()[0]
        stats = exe.stats()
        assert stats["launches"] == 1000 and stats["uploads"] == 1000
        exe.set(inputs[0]["name"], x)  # the bytes already there: no upload
        assert exe.stats()["skipped_uploads"] == 1
        assert free0 - free1 < 16 << 20, (free0, free1)
        a = exe.attributes()
        assert a["arch"].startswith("sm_") and a["grid"] > 0 and a["registers_per_thread"] > 0
        assert "compile" in exe.setup_timings
        p = exe.profile(iterations=5)
        assert len(p["samples_ms"]) == 5 and p["median_ms"] > 0


def test_wrapper_program_launches():
    wrapper = os.path.join(ROOT, "tests", "wrapper", "sample", "wrapper.json")
    with amk.open(wrapper, backend="cuda", trust_source=True) as exe:
        exe.launch()
        assert exe.attributes()["grid"] > 0 and exe.stats()["launches"] == 1


def test_generation_equals_amk_generate():
    gen = amk.gen.llama(preset="tiny", steps=8, prompt=[3, 5, 7, 9], seed=6)
    with amk.open(gen, backend="cuda") as exe:
        exe.launch()
        ids = exe.get("ids").ravel().tolist()
    r = subprocess.run([AMK, "--json", "generate", "--steps", "8", "--prompt", "3,5,7,9",
                        "--seed", "6", "--backend", "cuda"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert ids[-8:] == json.loads(r.stdout)["ids"]


CHILD = r"""
import os, sys, time
import amk
hang = os.path.join(sys.argv[1], "tests", "gpu", "programs", "hang.json")
exe = amk.open(hang, backend="cuda", trust_custom_ops=True, timeout_ms=60000)
print("launching", flush=True)
t0 = time.time()
try:
    exe.launch()
    print("returned", flush=True)
except KeyboardInterrupt:
    print(f"KeyboardInterrupt after {time.time() - t0:.1f} s", flush=True)
exe.close()
with amk.open(os.path.join(sys.argv[1], "samples", "diamond.json"), backend="cuda") as ok:
    ok.launch()  # the process and the GPU are still usable
print("usable", flush=True)
"""


def test_ctrl_c_stops_a_waiting_launch():
    import signal
    import time
    p = subprocess.Popen([__import__("sys").executable, "-c", CHILD, ROOT], stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True, env=os.environ)
    seen = []
    while not seen or seen[-1] != "launching":  # (log lines may come first)
        line = p.stdout.readline()
        assert line, "".join(seen)
        seen.append(line.strip())
    time.sleep(1.5)  # (the launch waits on a counter that never arrives; its deadline is 60 s)
    p.send_signal(signal.SIGINT)
    out, _ = p.communicate(timeout=30)
    assert p.returncode == 0, "\n".join(seen) + out
    lines = out.splitlines()
    # (the child's deadline is 60 s: a launch the interrupt missed would outlast communicate's 30)
    assert any(line.startswith("KeyboardInterrupt after") for line in lines), out
    assert lines[-1] == "usable", out
