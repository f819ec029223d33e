"""End to end with real PyTorch on the CPU: `invoke bench --runtime native`
as a user runs it, then the JSON on disk."""
import json
import os
import signal
import subprocess
from pathlib import Path

import pytest

import processes
import waits
from paths import INVOKE
from harness import networks, provenance
from dlrepro.run import store as results


@pytest.fixture(scope="session")
def pytorch_python(framework_python):
    return framework_python("pytorch")


def bench(root, out, *args, timeout=900):
    proc = subprocess.run([INVOKE, "bench", "--framework", "pytorch",
                           "--runtime", "native", "--out", str(out), *args],
                          cwd=root, capture_output=True, text=True,
                          timeout=timeout)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc


def processes_mentioning(path):
    """PIDs whose command line contains `path` (a harness of that run)."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ")
        except OSError:
            continue
        if proc.name.isdigit() and str(path).encode() in cmdline:
            found.append(int(proc.name))
    return found


def cell_results(run_dir):
    record = results.read_run(run_dir)
    return record, {c["id"]: results.load_result(run_dir / c["file"])
                    for c in record["jobs"]}


def test_smoke_cells_end_to_end(root, tmp_path, pytorch_python):
    proc = bench(root, tmp_path, "--network", "fcn-r", "--network", "lstm",
                 "--network", "alexnet-r", "--iterations", "3", "--warmup", "1",
                 "--threads", "1")
    run_dir = (tmp_path / "latest").resolve()
    record, by_id = cell_results(run_dir)
    assert record["status"] == "complete"
    assert record["command"].startswith("invoke bench --framework pytorch")
    assert len(by_id) == 3
    for cell_id, result in by_id.items():
        assert result["status"] == "ok", result["error"]
        assert len(result["timing"]["per_iteration_s"]) == 3
        assert len(result["loss"]["per_iteration"]) == 3
        assert result["environment"]["framework_version"].startswith("2.13.0")
        assert result["environment"]["harness_digest"] == \
            provenance.harness_digest()
        assert result["environment"]["container"] is None
        net = networks.get(result["cell"]["network"])
        assert result["model"]["parameters"] == networks.parameter_count(net)
        assert result["model"]["framework_parameters"] == (
            networks.parameter_count(net) + networks.lstm_extra_bias(net))
        assert (run_dir / f"{cell_id}.log").exists()
    assert "pytorch    lstm" in proc.stdout and "3 ok" in proc.stdout


def test_thread_count_really_constrains_pytorch(root, tmp_path, pytorch_python):
    bench(root, tmp_path, "--network", "resnet-56", "--iterations", "4",
          "--warmup", "1", "--threads", "1")
    _, by_id = cell_results((tmp_path / "latest").resolve())
    result = by_id["pytorch-cpu-resnet-56-cpu-b16-t1"]
    assert result["environment"]["threads"]["framework"] == 1
    # process CPU time over wall time: one busy thread at most
    assert result["timing"]["cpu_utilization"] < 1.3


def test_sigterm_keeps_the_iterations_measured(root, tmp_path, pytorch_python):
    spec = {"cell": {"framework": "pytorch", "profile": "cpu",
                     "network": "fcn-r", "dataset": "synthetic",
                     "batch_size": 8, "global_batch_size": 8, "device": "cpu",
                     "gpus": 0, "threads": 1, "iterations": 1_000_000,
                     "warmup": 1, "runtime": "native", "seed": 0,
                     "clock_policy": "observe"}}
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    out, log = tmp_path / "r.json", tmp_path / "r.log"
    env = dict(os.environ, PYTHONPATH=str(root))
    with open(log, "w") as sink:
        proc = processes.start([str(pytorch_python), "-m", "harness", "run",
                                "--spec", str(tmp_path / "spec.json"),
                                "--out", str(out)], cwd=root, env=env,
                               stdout=sink, stderr=subprocess.STDOUT)
    waits.first_timed_iteration(log, proc)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(60) == 143
    result = results.load_result(out)
    assert result["status"] == "error"
    assert result["error"]["type"] == "Terminated"
    assert result["timing"]["completed_iterations"] > 0


def test_killed_sweep_keeps_finished_cells_and_resumes(root, tmp_path,
                                                       pytorch_python):
    args = [INVOKE, "bench", "--framework", "pytorch", "--runtime", "native",
            "--out", str(tmp_path), "--network", "alexnet-r", "--network",
            "fcn-r", "--network", "fcn5", "--iterations", "3", "--warmup", "1",
            "--threads", "1"]
    sweep = processes.start(args, cwd=root, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)

    def finished_cells():
        if not (tmp_path / "latest").exists():
            return None
        record = results.read_run(tmp_path / "latest")  # atomic: never torn
        return [c["id"] for c in record["jobs"] if c["status"] == "ok"]
    done = waits.wait_for(finished_cells, 300, what="a finished cell")
    run_dir = (tmp_path / "latest").resolve()
    os.killpg(sweep.pid, signal.SIGKILL)
    sweep.wait()
    # the running cell's harness learns of its parent's death (SIGTERM) and
    # stops, writing the iterations it had measured; under fork (PyTorch's
    # default) its server, then the child: none holds the run folder then
    waits.wait_for(lambda: not processes_mentioning(run_dir)
                   and not results.held(run_dir), 60,
                   what="the sweep's processes to stop")
    record = results.read_run(run_dir)
    assert record["status"] == "running"
    statuses = {c["id"]: c["status"] for c in record["jobs"]}
    assert statuses[done[0]] == "ok"
    kept = results.load_result(run_dir / f"{done[0]}.json")
    assert kept["status"] == "ok"
    bench(root, tmp_path, "--network", "alexnet-r", "--network", "fcn-r",
          "--network", "fcn5", "--iterations", "3", "--warmup", "1",
          "--threads", "1", "--resume")
    first = run_dir
    record = results.read_run(first)
    assert record["status"] == "complete" and record["resumed_at"]
    assert [c["status"] for c in record["jobs"]] == ["ok", "ok", "ok"]
    # the cell finished before the kill ran once only: its result is the
    # one it wrote then
    assert results.load_result(first / f"{done[0]}.json") == kept
