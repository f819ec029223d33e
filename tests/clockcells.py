"""What the clock tests in real processes share (test_clocks_cells,
test_gpu_check, test_gpu_restore): the PyTorch CPU environment, the stand-in
GPU framework, a harness cell started on it with the fake NVML as its pynvml,
and the waits and checks on what it leaves."""
import functools
import json
import subprocess
from pathlib import Path

import jsonschema
import pytest

import fake_nvml
import processes
import standins
import waits
from paths import ROOT
from harness import resultfile



@functools.lru_cache(maxsize=1)
def torch_python():
    """The PyTorch CPU environment, made from its lock on first use."""
    from dlrepro import matrix
    from dlrepro.images import envs
    m = matrix.load()
    return str(envs.ensure("pytorch", "cpu", m["pytorch"]["cpu"],
                           log=lambda _: None))


STANDIN = standins.source("pytorch", """Stand-in for a GPU framework in tests:
the real PyTorch backend, with `gpu` cells computed on the CPU (there is no
GPU here; NVML is faked). FAIL_AT=n makes step n raise the error a failing
GPU would; the file TIMED_MARK is made once the steps after the first
TIMED_AFTER (the timed iterations) have run for a second.""",
    declared="from harness.frameworks import backends\n"
             "CAPABILITIES = backends.capabilities()\n", more='''
import os
import time

_cpu_prepare = prepare


def prepare(network, batch_size, device, seed, batch=None, **options):
    session = _cpu_prepare(network, batch_size, device, seed, batch,
                           **options)
    fail_at = int(os.environ.get("FAIL_AT", "0"))
    if fail_at:
        step, count = session.step, [0]

        def failing():
            count[0] += 1
            if count[0] == fail_at:
                raise RuntimeError("CUDA error: an illegal memory access "
                                   "was encountered")
            return step()
        session.step = failing
    mark = os.environ.get("TIMED_MARK")
    if mark:
        session.step = _marking(session.step, mark,
                                int(os.environ["TIMED_AFTER"]))
    return session


def _marking(step, mark, warmup):
    count, first = [0], [None]

    def marked():
        loss = step()
        count[0] += 1
        if count[0] > warmup:
            now = time.monotonic()
            if first[0] is None:
                first[0] = now
            elif now - first[0] >= 1.0 and not os.path.exists(mark):
                open(mark, "w").close()
        return loss
    return marked
''')


def assert_schema_valid(result):
    with open(resultfile.SCHEMA_PATH) as handle:
        schema = json.load(handle)
    jsonschema.Draft7Validator(schema).validate(result)


GPU_CELL = {"profile": "cuda", "batch_size": 2, "global_batch_size": 2,
            "device": "gpu", "gpus": 1, "iterations": 100000,
            "clock_policy": "disable-boost"}


def start_cell(tmp_path, devices, cell, env_extra=None, stack=None,
               python=None):
    """Start the harness on a stand-in GPU cell in a real process, with the
    fake NVML (state in a file) as its pynvml. Returns (process, paths)."""
    python = python or torch_python()
    env, state = fake_nvml.child_env(tmp_path, devices, path_extra=[ROOT])
    standins.write(tmp_path / "shim", STANDIN)
    spec = {"cell": cell, "container": None,
            "clock_state": "cell.clock-state.json"}
    if stack is not None:
        spec["stack"] = stack
    (tmp_path / "cell.spec.json").write_text(json.dumps(spec))
    env["PYTHONUNBUFFERED"] = "1"
    env["TIMED_MARK"] = str(tmp_path / "timing")
    env["TIMED_AFTER"] = str(cell["warmup"])
    env.update(env_extra or {})
    with open(str(tmp_path / "cell.log"), "w") as log:
        proc = processes.start(
            [python, "-c", standins.DRIVER, "run", "--spec",
             str(tmp_path / "cell.spec.json"), "--out",
             str(tmp_path / "cell.json")],
            cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    return proc, {"state": tmp_path / "cell.clock-state.json",
                  "result": tmp_path / "cell.json", "fake": Path(state),
                  "log": tmp_path / "cell.log", "timing": tmp_path / "timing"}


def wait_until_timing(proc, paths, timeout=300):
    """Until the clocks are changed and the timed iterations have run for a
    second (the stand-in says so)."""
    def timing():
        if proc.poll() is not None:
            pytest.fail("the cell ended early:\n" + paths["log"].read_text())
        return paths["timing"].exists()
    waits.wait_for(timing, timeout, what="timing:\n" + str(paths["log"]))
    state = json.loads(paths["state"].read_text())
    assert state.get("status") == "changed", state
    return state
