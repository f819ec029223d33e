"""python -m harness worker (harness.worker): several cells in one process,
each its own result. In-process with the scripted backend for the exact
logic; then the real command with native PyTorch (.venvs/pytorch-cpu)."""
import ctypes
import io
import json
import os
import signal
import subprocess
import sys

import pytest

import processes
from workercells import (  # noqa: F401 (autouse fixtures)
    ProtocolLines, commands, restore_thread_variables, write_spec)
from harness import frameworks, worker
from harness.gpu import cell as gpu_cell
from harness.errors import Terminated
from harness.frameworks import backends
from dlrepro.run import store as results
from tests import fake_nvml
from tests.fake_backend import Backend, Script

WAIT_S = 300


def load_valid(path):
    result = json.loads(open(str(path)).read())
    assert results.validation_errors(result) == []
    return result


def events(protocol):
    return [(line.split(" ", 1)[0], json.loads(line.split(" ", 1)[1]))
            for line in protocol.getvalue().splitlines()]


@pytest.fixture
def serve(monkeypatch, tmp_path):
    """serve(backend, [spec paths]) -> (exit status, protocol events)."""
    def _serve(backend, lines):
        monkeypatch.setattr(frameworks, "load",
                            lambda name, part="backend": backend)
        protocol = io.StringIO()
        status = worker.serve(commands(lines), protocol)
        return status, events(protocol)
    return _serve


def test_cells_of_one_group_each_write_their_own_result(serve, make_cell,
                                                        tmp_path):
    first = write_spec(tmp_path, "a", make_cell(network="fcn5"))
    second = write_spec(tmp_path, "b", make_cell(network="lstm32"))
    status, said = serve(Backend(Script([0.1] * 12)), [first, second])
    assert status == 0
    assert [e for e, _ in said] == ["cell-start", "cell-done"] * 2
    a, b = load_valid(tmp_path / "a.json"), load_valid(tmp_path / "b.json")
    assert (a["cell"]["network"], b["cell"]["network"]) == ("fcn5", "lstm32")
    assert (a["isolation"]["position"], b["isolation"]["position"]) == (1, 2)
    assert b["isolation"]["cells_before"] == ["a"]
    assert a["isolation"]["worker_pid"] == os.getpid()
    # The process started for the first cell: the second has no start.
    assert a["phases"]["process_start"] is not None
    assert b["phases"]["process_start"] is None
    assert b["phases"]["harness_ready"] > a["phases"]["result_written"]
    # the backend's report of what it freed before b; none before a
    assert b["isolation"]["memory_held"]["framework"]["note"] == \
        "the fake framework holds nothing"
    assert a["isolation"]["memory_held"]["framework"] is None


def test_the_backends_release_memory_is_called_between_cells(
        serve, make_cell, tmp_path):
    backend = Backend(Script([0.1] * 12))
    calls = []
    report = backends.memory_report(["cache emptied"], {"cached_bytes": 0},
                                    "keeps its context")
    backend.release_memory = (lambda device, collect: calls.append(device)
                              or report)
    paths = [write_spec(tmp_path, n, make_cell()) for n in "ab"]
    serve(backend, paths)
    assert calls == ["cpu"]
    held = load_valid(tmp_path / "b.json")["isolation"]["memory_held"]
    assert held["framework"] == report and held["note"] is None


def test_a_failing_release_memory_is_noted_and_the_cell_runs(
        serve, make_cell, tmp_path):
    backend = Backend(Script([0.1] * 12))

    def broken(device, collect):
        raise RuntimeError("allocator gone")
    backend.release_memory = broken
    serve(backend, [write_spec(tmp_path, n, make_cell()) for n in "ab"])
    b = load_valid(tmp_path / "b.json")
    assert b["status"] == "ok"
    assert b["isolation"]["memory_held"]["framework"] is None
    assert b["isolation"]["memory_held"]["note"] == \
        "release_memory failed: allocator gone"


def test_a_cell_that_differs_in_a_process_wide_setting_is_refused(
        serve, make_cell, tmp_path):
    paths = [write_spec(tmp_path, "a", make_cell()),
             write_spec(tmp_path, "b", make_cell(threads=2, seed=3)),
             write_spec(tmp_path, "c", make_cell(network="fcn5"))]
    status, said = serve(Backend(Script([0.1] * 12)), paths)
    refused = load_valid(tmp_path / "b.json")
    assert refused["status"] == "error" and refused["timing"] is None
    assert refused["error"]["type"] == "GroupMismatch"
    assert "cell.threads is 2 here, 1 in this worker" in refused["error"][
        "message"]
    assert "cell.seed is 3 here, 0" in refused["error"]["message"]
    assert load_valid(tmp_path / "c.json")["status"] == "ok"
    assert load_valid(tmp_path / "c.json")["isolation"]["cells_before"] == \
        ["a"]
    assert status == 0


def test_a_failing_cell_ends_with_its_status_and_the_next_runs(
        serve, make_cell, tmp_path):
    paths = [write_spec(tmp_path, n, make_cell()) for n in "ab"]
    status, _ = serve(Backend(Script([0.1] * 12, raise_at=2,
                                     exc=RuntimeError("bad kernel"))), paths)
    assert load_valid(tmp_path / "a.json")["error"]["message"] == \
        "bad kernel"
    assert load_valid(tmp_path / "b.json")["status"] == "ok"
    assert status == 0


def test_a_failure_before_the_cell_starts_still_leaves_a_result(
        serve, make_cell, tmp_path, monkeypatch):
    def broken(*args, **kwargs):
        raise OSError("no such device")
    monkeypatch.setattr(gpu_cell, "CellGpus", broken)
    status, said = serve(Backend(Script([])),
                         [write_spec(tmp_path, "a", make_cell())])
    result = load_valid(tmp_path / "a.json")
    assert result["error"] == {"type": "OSError",
                               "message": "no such device"}
    assert said[-1] == ("cell-done", {"result": str(tmp_path / "a.json"),
                                      "status": "error"})
    assert status == 0


@pytest.mark.parametrize("exc, status", [
    (Terminated("terminated by signal 15"), 143),
    (KeyboardInterrupt(), 130)])
def test_a_signal_in_a_cell_ends_it_and_then_the_worker(
        serve, make_cell, tmp_path, exc, status):
    paths = [write_spec(tmp_path, n, make_cell()) for n in "ab"]
    ended, said = serve(Backend(Script([0.1] * 12, raise_at=4, exc=exc)),
                        paths)
    assert ended == status
    result = load_valid(tmp_path / "a.json")
    assert result["error"]["type"] == type(exc).__name__
    assert len(result["timing"]["per_iteration_s"]) == 1
    assert not (tmp_path / "b.json").exists()
    assert said[-1][0] == "cell-done"


def test_a_line_that_names_no_spec_is_answered_and_skipped(
        serve, make_cell, tmp_path):
    good = write_spec(tmp_path, "a", make_cell())
    status, said = serve(Backend(Script([0.1] * 6)),
                         [str(tmp_path / "x.json"),
                          str(tmp_path / "gone.spec.json"), good])
    assert [e for e, _ in said] == ["cell-invalid"] * 2 + [
        "cell-start", "cell-done"]
    invalid = [fields["message"] for e, fields in said if e == "cell-invalid"]
    assert "named <id>.spec.json" in invalid[0]
    assert "cannot read spec" in invalid[1]
    assert load_valid(tmp_path / "a.json")["isolation"]["position"] == 1
    assert status == 0


def test_gpu_memory_held_is_read_through_nvml(monkeypatch):
    fake_nvml.configure([fake_nvml.hopper_h200(), fake_nvml.hopper_h200()])
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")

    class Process(object):
        def __init__(self, pid, used):
            self.pid, self.usedGpuMemory = pid, used
    monkeypatch.setattr(fake_nvml, "nvmlDeviceGetComputeRunningProcesses",
                        lambda handle: [Process(1, 5), Process(os.getpid(),
                                                               7 << 30)],
                        raising=False)
    total = fake_nvml.device_state(1)["memory_total"]
    assert worker.gpu_held(fake_nvml) == [
        {"index": 1, "process_bytes": 7 << 30,
         "device_used_bytes": total // 100}]


def test_gpu_memory_of_a_process_nvml_cannot_see_is_null(monkeypatch):
    # In a container NVML lists the host's PIDs; an old nvidia-ml-py has
    # no process list at all (as the fake).
    fake_nvml.configure([fake_nvml.hopper_h200()])
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert worker.gpu_held(fake_nvml)[0]["process_bytes"] is None
    fake_nvml.configure([fake_nvml.hopper_h200()], loaded=False)
    assert worker.gpu_held(fake_nvml) is None


# The real command, with native PyTorch.

class Worker(ProtocolLines):
    """`python -m harness worker` in the PyTorch venv; its protocol lines
    read with a bound on the wait."""

    wait_s = WAIT_S

    def __init__(self, root, log):
        python = str(root / ".venvs" / "pytorch-cpu" / "bin" / "python")
        if not os.path.exists(python):
            pytest.skip("no .venvs/pytorch-cpu")
        self.log = open(str(log), "w")
        self.proc = processes.start(
            [python, "-s", "-m", "harness", "worker"], cwd=str(root),
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log)

    def send(self, path):
        self.proc.stdin.write(worker.command_line(path).encode())
        self.proc.stdin.flush()

    def ended(self):
        return "the worker ended ({}): {}".format(
            self.proc.wait(WAIT_S), open(self.log.name).read()[-2000:])

    def wait_for(self, word):
        event = self.next_event()
        assert event[0] == word, event
        return event[1]

    def finish(self):
        self.proc.stdin.close()
        return self.proc.wait(WAIT_S)


def tiny(make_cell, network, **overrides):
    fields = dict(network=network, batch_size=1, global_batch_size=1,
                  iterations=2, warmup=1)
    fields.update(overrides)
    return make_cell(**fields)


def test_real_pytorch_group(root, make_cell, tmp_path):
    cells = {"a": tiny(make_cell, "fcn5"), "b": tiny(make_cell, "lstm32"),
             "c": tiny(make_cell, "fcn5", threads=2),
             "d": tiny(make_cell, "alexnet-r")}
    run = Worker(root, tmp_path / "worker.log")
    for name, cell in sorted(cells.items()):
        run.send(write_spec(tmp_path, name, cell))
        assert run.wait_for("cell-start")["spec"].endswith(name + ".spec.json")
        assert run.wait_for("cell-done")["result"] == str(
            tmp_path / (name + ".json"))
    assert run.finish() == 0
    got = dict((n, load_valid(tmp_path / (n + ".json"))) for n in cells)
    for name in "abd":
        assert got[name]["status"] == "ok", got[name]["error"]
        assert got[name]["cell"] == dict(cells[name], precision="default",
                                         compile=None)
        assert got[name]["isolation"]["worker_pid"] == run.proc.pid
    assert got["c"]["error"]["type"] == "GroupMismatch"
    assert got["d"]["isolation"]["cells_before"] == ["a", "b"]
    assert got["b"]["isolation"]["memory_held"]["rss_bytes"] > \
        got["a"]["isolation"]["memory_held"]["rss_bytes"]
    # The heap is trimmed between cells, not before the first.
    assert got["a"]["isolation"]["memory_held"]["heap_trimmed"] is None
    assert got["b"]["isolation"]["memory_held"]["heap_trimmed"] is True
    assert got["b"]["environment"]["allocator"] == \
        got["a"]["environment"]["allocator"] == {
            "library": os.confstr("CS_GNU_LIBC_VERSION"),
            "mmap_threshold_bytes": 32 * 1024 * 1024,
            # Trimming off: glibc's size_t maximum.
            "trim_threshold_bytes": 2 ** (8 * ctypes.sizeof(ctypes.c_size_t))
            - 1,
            "mmap_max": 0}


def long_cell(make_cell):
    return tiny(make_cell, "fcn5", iterations=10 ** 7)


def test_real_sigterm_mid_cell_ends_the_cell_then_the_worker(
        root, make_cell, tmp_path):
    run = Worker(root, tmp_path / "worker.log")
    run.send(write_spec(tmp_path, "a", tiny(make_cell, "fcn5")))
    run.send(write_spec(tmp_path, "b", long_cell(make_cell)))
    run.send(write_spec(tmp_path, "c", tiny(make_cell, "fcn5")))
    run.wait_for("cell-start")
    run.wait_for("cell-done")
    run.wait_for("cell-start")
    run.proc.send_signal(signal.SIGTERM)
    assert run.wait_for("cell-done")["status"] == "error"
    assert run.proc.wait(WAIT_S) == 143
    assert load_valid(tmp_path / "b.json")["error"]["type"] == "Terminated"
    assert load_valid(tmp_path / "a.json")["status"] == "ok"
    assert not (tmp_path / "c.json").exists()


def test_real_kill_9_loses_only_the_running_cell(root, make_cell, tmp_path):
    run = Worker(root, tmp_path / "worker.log")
    run.send(write_spec(tmp_path, "a", tiny(make_cell, "fcn5")))
    run.send(write_spec(tmp_path, "b", long_cell(make_cell)))
    run.wait_for("cell-start")
    run.wait_for("cell-done")
    run.wait_for("cell-start")
    run.proc.kill()
    assert run.proc.wait(WAIT_S) == -signal.SIGKILL
    assert load_valid(tmp_path / "a.json")["status"] == "ok"
    assert sorted(p.name for p in tmp_path.iterdir()
                  if p.suffix == ".json") == ["a.json", "a.spec.json",
                                              "b.spec.json"]
