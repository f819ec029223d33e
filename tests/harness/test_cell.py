"""harness.throughput with a scripted backend and clock: exact results for every
status, each validated against the result schema."""
import json
import os
import subprocess
import sys
import time

import pytest

from harness import frameworks, phases, spec, throughput
from harness.errors import HarnessError, Terminated
from dlrepro.run import store as results
from tests.fake_backend import Backend, Script
from paths import TESTS

# A file's mtime is read from the kernel's coarse clock, up to a tick
# behind time.time() (4 ms at HZ=250: a write that began 3.4 ms after its
# stamp once had an mtime before it), and phases are rounded to the
# millisecond. Linux's clock id, where the time module has no name for it.
CLOCK_REALTIME_COARSE = getattr(time, "CLOCK_REALTIME_COARSE", 5)
SLACK_S = time.clock_getres(CLOCK_REALTIME_COARSE) + 0.0005

GOLDEN = str(TESTS / "golden" / "result-v1-ok.json")


@pytest.fixture(autouse=True)
def restore_thread_variables(monkeypatch):
    # run_cell sets the thread variables of this process: restore them after.
    from harness.threads import THREAD_ENV_VARS
    for name in THREAD_ENV_VARS:
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def run(make_cell, monkeypatch, tmp_path):
    """run(script, **cell overrides) -> result written by run_cell."""
    def _run(script, backend=None, **overrides):
        fake = backend or Backend(script)
        monkeypatch.setattr(frameworks, "load",
                            lambda name, part="backend": fake)
        out = tmp_path / "result.json"
        result = throughput.run_cell({"cell": make_cell(**overrides),
                                      "container": None}, str(out),
                                     clock=script.clock)
        on_disk = json.loads(out.read_text())
        assert on_disk == json.loads(json.dumps(result))
        assert results.validation_errors(on_disk) == []
        return on_disk
    return _run


def test_ok_cell_records_exact_times_and_statistics(run):
    r = run(Script([0.5, 0.3, 0.1, 0.2, 0.2, 0.1], losses=[2.3, 2.2, 2.1,
                                                           2.0, 1.9, 1.8]))
    assert r["status"] == "ok" and r["error"] is None
    t = r["timing"]
    assert t["warmup_s"] == pytest.approx([0.5, 0.3])
    assert t["per_iteration_s"] == pytest.approx([0.1, 0.2, 0.2, 0.1])
    assert t["mean_s"] == pytest.approx(0.15)
    assert t["samples_per_s"] == pytest.approx(8 * 4 / 0.6)
    assert r["loss"]["per_iteration"] == [2.1, 2.0, 1.9, 1.8]
    assert r["loss"]["warmup"] == [2.3, 2.2]
    assert r["model"]["parameters"] == 14_205_962
    assert r["model"]["framework_parameters"] == 14_205_962
    assert r["model"]["achieved_flops_per_s"] == pytest.approx(
        r["model"]["executed_flops_per_iteration"] / 0.15)
    assert r["environment"]["framework_version"] == "0.0-fake"
    assert r["environment"]["threads"]["requested"] == 1
    assert r["environment"]["threads"]["environment"]["OMP_NUM_THREADS"] == "1"
    assert r["gpu_clocks"]["applicable"] is False


def _normalized(result):
    """The result with host-specific values masked, for the golden file."""
    r = json.loads(json.dumps(result))
    for key in ("started_at", "finished_at"):
        r[key] = "<time>"
    env = r["environment"]
    for key in ("host", "os", "cpu_model", "cpu_count", "cpus_usable",
                "python_version", "python_executable", "harness_digest",
                "harness_path", "memory"):
        env[key] = f"<{key}>"
    if env.get("allocator"):  # glibc's version is the host's
        env["allocator"]["library"] = "<library>"
    # How many objects the test process held, and how long walking took.
    env["python_gc"]["frozen_objects"] = "<count>"
    env["python_gc"]["settle_s"] = "<seconds>"
    r["timing"]["cpu_time_s"] = r["timing"]["cpu_utilization"] = "<cpu>"
    # What the rest of this machine did meanwhile (its keys stay).
    for block in ("host_cpu", "process_counts"):
        r["timing"][block] = {key: f"<{key}>" for key in r["timing"][block]}
    r["phases"] = {name: None if at is None else "<time>"
                   for name, at in r["phases"].items()}
    return r


def test_result_format_matches_the_golden_file(run):
    r = _normalized(run(Script([0.5, 0.3, 0.1, 0.2, 0.2, 0.1])))
    if os.environ.get("DLREPRO_UPDATE_GOLDEN"):
        with open(GOLDEN, "w") as handle:
            json.dump(r, handle, indent=2, sort_keys=True)
            handle.write("\n")
    with open(GOLDEN) as handle:
        assert r == json.load(handle), (
            "the result format changed: if on purpose, bump the schema "
            "version or rerun with DLREPRO_UPDATE_GOLDEN=1")


def test_every_phase_of_an_ok_cell_is_stamped_in_order(run, tmp_path):
    r = run(Script([0.5, 0.3, 0.1, 0.2, 0.2, 0.1]))
    stamps = [r["phases"][name] for name in phases.THROUGHPUT]
    assert None not in stamps, r["phases"]
    assert stamps == sorted(stamps)
    # The interpreter started before the harness (it counts), and the
    # write began before the file's last change.
    assert r["phases"]["process_start"] < r["phases"]["harness_ready"]
    assert stamps[-1] <= os.stat(tmp_path / "result.json").st_mtime + SLACK_S


def test_a_failed_cell_keeps_the_phases_it_reached(run):
    r = run(Script([0.1] * 6, raise_at=4, exc=MemoryError("CUDA out of memory")))
    reached = {name for name, at in r["phases"].items() if at is not None}
    assert reached == set(phases.THROUGHPUT) - {"timed_done"}


def test_a_framework_that_never_imported_has_no_later_phase(
        make_cell, monkeypatch, tmp_path):
    def fail(name, part="backend"):
        raise ImportError("No module named 'torch'")
    monkeypatch.setattr(frameworks, "load", fail)
    out = tmp_path / "r.json"
    throughput.run_cell({"cell": make_cell()}, str(out))
    block = json.loads(out.read_text())["phases"]
    assert [n for n in phases.THROUGHPUT if block[n] is None] == [
        "framework_imported", "model_built", "warmup_done", "timed_done"]


def test_nan_loss_marks_the_cell_diverged(run):
    r = run(Script([0.1] * 6, losses=[2.0, 1.0, 0.5, float("nan"), 1, 1]))
    assert r["status"] == "diverged"
    assert r["error"]["type"] == "Diverged"
    assert r["loss"]["per_iteration"] == [0.5, None]
    assert r["timing"]["completed_iterations"] == 2


def test_out_of_memory_keeps_the_iterations_measured(run):
    r = run(Script([0.1] * 6, raise_at=4, exc=MemoryError("CUDA out of memory")))
    assert r["status"] == "oom"
    assert r["error"] == {"type": "MemoryError", "message": "CUDA out of memory"}
    assert r["timing"]["per_iteration_s"] == pytest.approx([0.1])


def test_crash_in_the_framework_is_an_error_with_its_message(run, capsys):
    r = run(Script([0.1] * 6, raise_at=1, exc=RuntimeError("bad kernel\nmore")))
    assert r["status"] == "error"
    assert r["error"] == {"type": "RuntimeError", "message": "bad kernel"}
    assert r["timing"] is None
    assert "Traceback" in capsys.readouterr().err


def test_sigterm_is_recorded_with_partial_timings(run):
    r = run(Script([0.1] * 6, raise_at=5,
                   exc=Terminated("terminated by signal 15")))
    assert r["status"] == "error"
    assert r["error"]["type"] == "Terminated"
    assert len(r["timing"]["per_iteration_s"]) == 2


def test_multi_gpu_throughput_cells_are_unsupported(run):
    r = run(Script([]), device="gpu", gpus=2, global_batch_size=16,
            threads=None)
    assert r["status"] == "unsupported"
    assert "data-parallel" in r["error"]["message"]


def test_device_the_backend_lacks_is_unsupported(run):
    r = run(Script([]), device="gpu", gpus=1, threads=None)
    assert r["status"] == "unsupported"


def test_framework_that_does_not_import_is_unsupported(make_cell, monkeypatch, tmp_path):
    def fail(name, part="backend"):
        raise ImportError("No module named 'torch'")
    monkeypatch.setattr(frameworks, "load", fail)
    r = throughput.run_cell({"cell": make_cell()}, str(tmp_path / "r.json"))
    assert r["status"] == "unsupported"
    assert "No module named 'torch'" in r["error"]["message"]
    assert results.validation_errors(r) == []


def test_two_bias_lstm_count_is_explained(run):
    from harness import networks
    net = networks.get("lstm")
    backend = Backend(Script([0.1] * 6), parameters=networks.parameter_count(
        net) + networks.lstm_extra_bias(net))
    r = run(backend.script, backend=backend, network="lstm")
    assert "two LSTM bias vectors" in r["model"]["parameter_note"]


@pytest.mark.parametrize("overrides,message", [
    ({"batch_size": 0}, "batch_size must be an integer >= 1, got 0"),
    ({"iterations": "5"}, "iterations must be an integer >= 1, got '5'"),
    ({"framework": "theano"}, "unknown framework 'theano'; valid frameworks: caffe"),
    ({"network": "vgg"}, "unknown network 'vgg'"),
    ({"device": "tpu"}, "device must be one of cpu, gpu"),
    ({"global_batch_size": 9}, "global_batch_size must be batch_size x workers"),
    ({"gpus": 1}, "a cpu cell uses 0 gpus"),
    ({"threads": 0}, "threads must be an integer >= 1"),
])
def test_invalid_cells_are_refused(make_cell, overrides, message):
    with pytest.raises(HarnessError, match=message.replace("(", r"\(")):
        spec.validate_cell(make_cell(**overrides))


def test_missing_and_unknown_fields_are_named(make_cell):
    cell = make_cell(colour="blue")
    del cell["seed"]
    with pytest.raises(HarnessError, match=r"missing \['seed'\], unknown \['colour'\]"):
        spec.validate_cell(cell)


def test_entry_point_reports_bad_specs_in_one_line(make_cell, tmp_path, root):
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"cell": make_cell(batch_size=-1)}))
    proc = subprocess.run([sys.executable, "-m", "harness", "run", "--spec",
                           str(spec), "--out", str(tmp_path / "r.json")],
                          cwd=root, capture_output=True, text=True)
    assert proc.returncode == 2
    assert proc.stderr == ("harness: error: batch_size must be an integer "
                           ">= 1, got -1\n")
    assert not (tmp_path / "r.json").exists()


def test_entry_point_reports_unreadable_specs(tmp_path, root):
    (tmp_path / "spec.json").write_text("{not json")
    proc = subprocess.run([sys.executable, "-m", "harness", "run", "--spec",
                           str(tmp_path / "spec.json"), "--out", "x.json"],
                          cwd=root, capture_output=True, text=True)
    assert proc.returncode == 2
    assert proc.stderr.startswith("harness: error: spec ")
    assert "Traceback" not in proc.stderr


def test_interpreter_without_the_framework_says_so_in_the_result(make_cell, tmp_path,
                                                                  root):
    # The host's interpreter has no PyTorch: a cell run with it (a wrong
    # --python) must end in a valid result that names the missing module,
    # and the error path must not try to import torch again.
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"cell": make_cell(), "container": None}))
    out = tmp_path / "r.json"
    proc = subprocess.run([sys.executable, "-m", "harness", "run", "--spec",
                           str(spec), "--out", str(out)], cwd=root,
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(out.read_text())
    assert results.validation_errors(result) == []
    assert result["status"] == "unsupported"
    assert "No module named 'torch'" in result["error"]["message"]
    assert sys.executable in result["error"]["message"]


@pytest.mark.parametrize("runtime", ["native", "docker", "podman",
                                     "charliecloud", "slurm-podman"])
def test_runtime_is_any_plain_name(make_cell, runtime):
    assert spec.validate_cell(make_cell(runtime=runtime))["runtime"] == runtime


@pytest.mark.parametrize("runtime", ["", "Docker", "docker run", None, 3])
def test_runtime_that_is_not_a_plain_name_is_refused(make_cell, runtime):
    with pytest.raises(HarnessError, match="runtime must be a name"):
        spec.validate_cell(make_cell(runtime=runtime))


def test_host_facing_modules_load_no_framework_runner_or_gpu_code(root):
    # The host imports exactly these; they must stay light and pure.
    host_facing = ("spec", "blocks", "errors", "resultfile", "networks",
                   "provenance", "data.datasets", "figures", "gpu.clocks",
                   "gpu.nvml")
    code = ("import sys\n"
            "for name in {!r}:\n"
            "    __import__('harness.' + name)\n"
            "print(sorted(m for m in sys.modules if m in ('torch', "
            "'tensorflow', 'mxnet', 'cntk', 'numpy', 'pynvml', "
            "'harness.gpu.cell', 'harness.gpu.telemetry') or "
            "m.split('.')[:2] in (['harness', 'frameworks'], "
            "['harness', 'throughput'], ['harness', 'converge'], "
            "['harness', 'lifecycle'])))\n").format(host_facing)
    proc = subprocess.run([sys.executable, "-c", code], cwd=root,
                          capture_output=True, text=True)
    assert proc.stdout.strip() == "[]", proc.stdout + proc.stderr
