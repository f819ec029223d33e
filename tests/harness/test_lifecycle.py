"""How runs end (harness.lifecycle): one status rule for throughput cells
and convergence runs, and what `oom` means in every framework."""
import json

import jsonschema
import pytest

from harness import converge, frameworks, phases, resultfile, throughput
from harness.frameworks import backends
from harness.errors import Terminated, device_out_of_memory
from tests.fake_backend import Backend, Script

# What each framework says when the GPU runs out.
DEVICE_OOM = {
    "pytorch": "CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; "
               "79.15 GiB total capacity; 78.50 GiB already allocated)",
    "tensorflow": "OOM when allocating tensor with shape[4096,4096] and type "
                  "float on /job:localhost/replica:0/task:0/device:GPU:0 by "
                  "allocator GPU_0_bfc",
    "mxnet": "[12:00:00] src/storage/./pooled_storage_manager.h:161: "
             "cudaMalloc retry failed: out of memory",
    "cntk": "CUDA failure 2: out of memory ; GPU=0 ; hostname=h ; "
            "expr=cudaMalloc((void**) &deviceBufferPtr, sizeof(float) * 8)",
    # a failed CUDA check in SyncedMemory (Caffe aborts on it; raised to
    # Python only where pycaffe gets the error)
    "caffe": "syncedmem.cpp:56] Check failed: error == cudaSuccess (2 vs. "
             "0)  out of memory",
    # XLA's message names no device: the backend decides by the cell's
    # device (DEVICE_OF_CELL below)
    "jax": "RESOURCE_EXHAUSTED: Out of memory while trying to allocate "
           "17179869184 bytes.",
}
# ... and when the host's allocator fails: the machine, not the device.
HOST_OOM = {
    "pytorch": "[enforce fail at alloc_cpu.cpp:127] err == 0. "
               "DefaultCPUAllocator: can't allocate memory: you tried to "
               "allocate 8589934592 bytes. Error code 12 (Cannot allocate "
               "memory)",
    "tensorflow": "OOM when allocating tensor with shape[1048576,26752] and "
                  "type float on /job:localhost/replica:0/task:0/device:CPU:0 "
                  "by allocator cpu",
    "mxnet": "[12:00:00] src/storage/./cpu_device_storage.h:72: Failed to "
             "allocate CPU Memory",
    "cntk": "std::bad_alloc",
    "caffe": "std::bad_alloc",
    "jax": "RESOURCE_EXHAUSTED: Out of memory while trying to allocate "
           "8589934592 bytes.",
}


def _backend(framework, device, monkeypatch):
    """The framework's backend as a cell on `device` has configured it, for
    the backends whose rule depends on it (JAX)."""
    backend = frameworks.load(framework)
    if hasattr(backend, "_CONFIGURED"):
        monkeypatch.setitem(backend._CONFIGURED, "device", device)
    return backend


@pytest.mark.parametrize("framework", frameworks.NAMES)
def test_device_allocation_failure_is_oom(framework, monkeypatch):
    backend = _backend(framework, "gpu", monkeypatch)
    assert backend.is_out_of_memory(RuntimeError(DEVICE_OOM[framework]))


@pytest.mark.parametrize("framework", frameworks.NAMES)
@pytest.mark.parametrize("exc", [
    lambda f: RuntimeError(HOST_OOM[f]),
    lambda f: MemoryError(),
], ids=["host-allocator", "python-memoryerror"])
def test_host_allocation_failure_is_an_error_not_oom(framework, exc,
                                                      monkeypatch):
    backend = _backend(framework, "cpu", monkeypatch)
    assert not backend.is_out_of_memory(exc(framework))


def test_classifying_loads_no_framework():
    # The error path runs when the framework itself failed to import.
    import subprocess
    import sys
    code = ("import sys\n"
            "from harness import frameworks\n"
            "for name in frameworks.NAMES:\n"
            "    frameworks.load(name).is_out_of_memory(RuntimeError('x'))\n"
            "print(sorted(m for m in ('torch', 'tensorflow', 'mxnet', "
            "'cntk', 'caffe', 'jax', 'numpy') if m in sys.modules))\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True,
                          text=True)
    assert proc.stdout.strip() == "[]", proc.stderr


def test_host_allocation_failure_in_a_cell_is_an_error(make_cell, monkeypatch, tmp_path):
    fake = Backend(Script([0.1] * 6, raise_at=3,
                          exc=RuntimeError(HOST_OOM["pytorch"])))
    fake.is_out_of_memory = frameworks.load("pytorch").is_out_of_memory
    monkeypatch.setattr(frameworks, "load", lambda name, part="backend": fake)
    result = throughput.run_cell({"cell": make_cell(), "container": None},
                                 str(tmp_path / "r.json"),
                                 clock=fake.script.clock)
    assert result["status"] == "error"
    assert "DefaultCPUAllocator" in result["error"]["message"]


# --- convergence runs end as cells do ----------------------------------------------

class FailingParallel(object):
    """A data-parallel module whose training raises `exc`."""
    NAME = "pytorch"
    DEVICES = ("cpu", "gpu")
    CAPABILITIES = backends.parallel_capabilities(False, True)
    MECHANISM = {"cpu": "scripted", "gpu": "scripted"}

    def __init__(self, exc):
        self.exc = exc

    def gpu_count(self):
        return 0

    def train(self, plan, data, log):
        raise self.exc


def _converge(monkeypatch, tmp_path, exc, epochs=1):
    parts = {"parallel": FailingParallel(exc),
             "backend": frameworks.load("pytorch")}
    monkeypatch.setattr(frameworks, "load",
                        lambda name, part="backend": parts[part])
    # run_convergence sets the thread variables of this process.
    from harness.threads import THREAD_ENV_VARS
    for name in THREAD_ENV_VARS:
        monkeypatch.delenv(name, raising=False)
    spec = {"convergence": {
        "framework": "pytorch", "profile": "cpu", "network": "fcn-r",
        "device": "cpu", "workers": 1, "global_batch_size": 8,
        "epochs": epochs,
        "seed": 0, "threads": 1, "runtime": "native",
        "clock_policy": "observe", "target_loss": None,
        "data": {"source": "synthetic", "train_samples": 32,
                 "test_samples": 8}}, "container": None}
    out = tmp_path / "r.json"
    result = converge.run_convergence(spec, str(out), log=lambda _m: None)
    on_disk = json.loads(out.read_text())
    with open(resultfile.SCHEMA_PATH) as handle:
        jsonschema.Draft7Validator(json.load(handle)).validate(on_disk)
    assert on_disk == json.loads(json.dumps(result))
    return on_disk


def test_device_oom_in_a_convergence_run_is_oom(monkeypatch, tmp_path):
    r = _converge(monkeypatch, tmp_path, RuntimeError(
        "torchrun exited with status 1: torch.OutOfMemoryError: "
        + DEVICE_OOM["pytorch"]))
    assert r["status"] == "oom"
    assert "CUDA out of memory" in r["error"]["message"]
    assert r["finished_at"] is not None


def test_crash_in_a_convergence_run_is_an_error(monkeypatch, tmp_path, capsys):
    r = _converge(monkeypatch, tmp_path, ValueError("bad gradient\nmore"))
    assert r["status"] == "error"
    assert r["error"] == {"type": "ValueError", "message": "bad gradient"}
    assert "Traceback" in capsys.readouterr().err


def test_a_training_cut_short_keeps_its_curves(monkeypatch, tmp_path):
    """The exception (a lost peer, SIGTERM) carries the curves measured so
    far (dataparallel.run_epochs / launch): the result keeps them, says
    they are partial, and stays `error` with the reason. Epochs of 4
    iterations (32 samples, global batch 8): epoch 1 done, 2 of epoch 2."""
    epoch = {"epoch": 1, "iterations": 4, "train_loss": 2.0,
             "test_loss": 1.9, "test_accuracy": 0.25, "train_s": 0.4,
             "eval_s": 0.1}
    exc = Terminated("terminated by signal 15")
    exc.partial_curves = {
        "iteration_loss": [2.3, 2.1, 1.9, 1.7],
        "iteration_s": [0.5, 0.1, 0.1, 0.1], "epochs": [epoch],
        "diverged_at": None, "finished": False,
        "in_progress": {"epoch": 2, "seconds": [0.1, 0.12],
                        "loss": [1.8, 1.6], "loss_of": "part"}}
    r = _converge(monkeypatch, tmp_path, exc, epochs=2)
    assert r["status"] == "error"
    assert r["error"] == {"type": "Terminated",
                          "message": "terminated by signal 15"}
    block = r["convergence"]
    assert block["partial"] is True
    assert block["curve"] == {"loss": [2.3, 2.1, 1.9, 1.7],
                              "seconds": [0.5, 0.1, 0.1, 0.1]}
    assert block["per_epoch"] == [epoch]
    assert block["final_train_loss"] == 2.0
    assert block["in_progress"]["loss_of"] == "part"
    assert block["completed_iterations"] == 6
    assert r["timing"]["per_iteration_s"] == [0.1, 0.1, 0.1, 0.1, 0.12]
    assert r["timing"]["completed_iterations"] == 5
    assert r["loss"]["per_iteration"] == [2.1, 1.9, 1.7]
    assert "training was cut short after 6 of 8 iterations (1 complete " \
        "epochs): the curves hold what was measured until then" in \
        r["warnings"]


def test_a_training_that_never_started_has_no_partial_curve(monkeypatch,
                                                            tmp_path):
    r = _converge(monkeypatch, tmp_path, ValueError("no rendezvous"))
    block = r["convergence"]
    assert (block["partial"], block["completed_iterations"],
            block["in_progress"], block["curve"]["loss"]) == (None, 0, None,
                                                              [])


def test_the_shared_rule_names_a_device():
    assert device_out_of_memory(RuntimeError(DEVICE_OOM["tensorflow"]))
    assert not device_out_of_memory(RuntimeError("out of memory"))


def test_a_failed_convergence_run_keeps_the_phases_it_reached(monkeypatch,
                                                              tmp_path):
    r = _converge(monkeypatch, tmp_path, ValueError("no rendezvous"))
    block = r["phases"]
    assert set(block) == set(phases.CONVERGENCE)
    assert block["trained"] is None
    reached = [block[n] for n in phases.CONVERGENCE if n != "trained"]
    assert None not in reached and reached == sorted(reached)
