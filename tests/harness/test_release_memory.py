"""Each native CPU framework's release_memory (the backend contract,
harness.frameworks) on the real worker: `python -m harness worker` in the
framework's venv runs two small cells, and the second's result carries the
report of what the framework freed after the first and still holds.
(CNTK's and Caffe's return a note alone; tests/backends/test_backend_signatures.py
holds every backend to the function.)"""
import json
import os
import subprocess

import pytest

from workercells import two_cells_in_one_worker

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


@pytest.mark.parametrize("framework", sorted(EXPECTED))
def test_the_framework_reports_what_it_freed_between_cells(
        root, make_cell, tmp_path, framework):
    cells = [make_cell(framework=framework, network=network, batch_size=1,
                       global_batch_size=1, iterations=2, warmup=1)
             for network in ("fcn5", "lstm32")]
    results = two_cells_in_one_worker(root, framework, tmp_path, cells,
                                      wait_s=WAIT_S)
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
