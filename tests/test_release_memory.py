"""Each native CPU framework's release_memory (the backend contract,
harness.frameworks) on the real worker: `python -m harness worker` in the
framework's venv runs two small cells, and the second's result carries the
report of what the framework freed after the first and still holds.
(CNTK's and Caffe's return a note alone; tests/test_backend_signatures.py
holds every backend to the function.)"""
import json
import os
import subprocess

import pytest

import processes
from dlrepro.run import store
from harness import worker

WAIT_S = 600
# What each framework's report says on the CPU: the calls it made, and
# what it still holds (a dict's keys, or None where it cannot say).
EXPECTED = {
    # PyTorch's optimizers import dynamo, whose caches are reset.
    "pytorch": (["torch._dynamo.reset()"], None),
    # Keras 3's clear_session would collect too: the worker collects once.
    "tensorflow": (["tf.keras.backend.clear_session(free_memory=False)"],
                   None),
    "mxnet": (["mx.nd.waitall()"], None),
    "jax": ([], ["live_arrays", "live_bytes"]),
}


def spec(folder, name, cell):
    path = folder / "{}.spec.json".format(name)
    path.write_text(json.dumps({"cell": cell, "container": None}))
    return str(path)


def run_worker(root, framework, paths, log):
    python = root / ".venvs" / "{}-cpu".format(framework) / "bin" / "python"
    if not python.exists():
        pytest.skip("no .venvs/{}-cpu".format(framework))
    with open(str(log), "w") as err:
        proc = processes.start(
            [str(python), "-s", "-m", "harness", "worker"], cwd=str(root),
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err,
            text=True)
        out, _ = proc.communicate(
            "".join(worker.command_line(p) for p in paths), timeout=WAIT_S)
    return proc.returncode, out


@pytest.mark.parametrize("framework", sorted(EXPECTED))
def test_the_framework_reports_what_it_freed_between_cells(
        root, make_cell, tmp_path, framework):
    cells = [make_cell(framework=framework, network=network, batch_size=1,
                       global_batch_size=1, iterations=2, warmup=1)
             for network in ("fcn5", "lstm32")]
    paths = [spec(tmp_path, name, cell) for name, cell in zip("ab", cells)]
    status, out = run_worker(root, framework, paths, tmp_path / "log")
    log = (tmp_path / "log").read_text()[-3000:]
    assert status == 0, log
    assert out.count("cell-done") == 2, out + log
    results = [json.loads((tmp_path / n).read_text())
               for n in ("a.json", "b.json")]
    for result in results:
        assert store.validation_errors(result) == [], log
        assert result["status"] == "ok", result["error"]
    held = results[1]["isolation"]["memory_held"]
    report = held["framework"]
    assert held["note"] is None, held["note"]
    released, keys = EXPECTED[framework]
    assert report["released"] == released
    assert isinstance(report["note"], str) and report["note"]
    if keys is None:
        assert report["held"] is None
    else:
        assert sorted(report["held"]) == keys
        assert all(isinstance(report["held"][k], int) for k in keys)
    assert results[1]["isolation"]["worker_pid"] == \
        results[0]["isolation"]["worker_pid"] != os.getpid()


# On the GPU, with the framework's GPU calls faked (no GPU here): what
# each calls and reports, per GPU; "collect" is the worker's collection,
# which must come before a cache is emptied (a tensor in a reference cycle
# keeps its block until then).
GPU_EXPECTED = {
    "pytorch": (["torch.cuda.empty_cache()"],
                ["collect", "empty_cache"],
                {"index": 1, "allocated_bytes": 1001,
                 "reserved_bytes": 3001}),
    "tensorflow": (["tf.keras.backend.clear_session(free_memory=False)"],
                   ["collect", "GPU:0"],
                   {"index": 0, "current_bytes": 5, "peak_bytes": 7}),
    "mxnet": (["mx.nd.waitall()", "mx.gpu(0).empty_cache()"],
              ["collect", "gpu(0)"],
              {"index": 0, "device_free_bytes": 100,
               "device_total_bytes": 200}),
    "jax": ([], ["collect"],
            {"index": 1, "bytes_in_use": 11, "peak_bytes_in_use": 13,
             "bytes_limit": 17}),
}


@pytest.mark.parametrize("framework", sorted(GPU_EXPECTED))
def test_on_the_gpu_the_framework_frees_its_cache_and_reports_each_gpu(
        root, framework):
    python = root / ".venvs" / "{}-cpu".format(framework) / "bin" / "python"
    if not python.exists():
        pytest.skip("no .venvs/{}-cpu".format(framework))
    probe = subprocess.run(
        [str(python), str(root / "tests" / "release_gpu_probe.py"),
         framework], cwd=str(root), stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True, timeout=WAIT_S)
    assert probe.returncode == 0, probe.stderr[-3000:]
    said = json.loads(probe.stdout.splitlines()[-1])
    released, calls, last_gpu = GPU_EXPECTED[framework]
    report = said["report"]
    assert report["released"] == released
    assert said["calls"] == calls
    assert report["held"]["gpus"][-1] == last_gpu
    assert "GPU" in report["note"] or "device" in report["note"]
