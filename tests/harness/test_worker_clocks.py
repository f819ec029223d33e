"""A group's GPU clock policy (harness/gpu/clockgroup.py): `python -m harness
worker` applies it once, before its first GPU cell's warm-up, and restores
it when the worker ends (end of input, SIGTERM, an exception), with the
fake NVML. In-process with the scripted backend for the exact calls; then
the worker in a real process with the GPU stand-in (tests/clockcells.py),
SIGTERM and SIGKILL, and the host's restore (dlrepro/run/gpu_restore.py)."""
import io
import json
import signal
import subprocess
import sys

import pytest

import fake_nvml
import processes
import workercells
from workercells import restore_thread_variables  # noqa: F401 (autouse)
import standins
import waits
from clockcells import STANDIN, assert_schema_valid, torch_python
from harness import frameworks, worker
from harness.gpu import clocks
from harness.errors import Terminated
from paths import INVOKE, ROOT, SCRIPTED
from dlrepro.run import gpu_restore
from tests.fake_backend import Backend, Script

LOCK = "nvmlDeviceSetGpuLockedClocks"
UNLOCK = "nvmlDeviceResetGpuLockedClocks"
GPU = {"profile": "cuda", "device": "gpu", "gpus": 1, "iterations": 3,
       "warmup": 1, "clock_policy": "disable-boost"}
GROUP_STATE = "a.worker.clock-state.json"


def write_spec(folder, name, cell):
    return workercells.write_spec(folder, name, cell,
                                  clock_state=name + ".clock-state.json")


@pytest.fixture
def serve(monkeypatch):
    """serve(script, [spec paths], devices, commands=its standard input
    when not those paths, **fake_nvml.configure's options) -> exit status:
    the worker in
    this process, the scripted backend as a GPU framework, the fake NVML
    as pynvml."""
    def _serve(script, lines, devices, commands=None, **options):
        backend = Backend(script)
        backend.DEVICES = ("cpu", "gpu")
        monkeypatch.setattr(frameworks, "load",
                            lambda name, part="backend": backend)
        monkeypatch.setitem(sys.modules, "pynvml", fake_nvml)
        fake_nvml.configure(devices, **options)
        return worker.serve(commands or workercells.commands(lines),
                            io.StringIO())
    return _serve


def results(folder, names):
    found = [json.loads((folder / (n + ".json")).read_text()) for n in names]
    for result in found:
        assert_schema_valid(result)
    return found


def state_files(folder):
    return sorted(p.name for p in folder.glob("*.clock-state.json"))


@pytest.mark.parametrize("device, changes, undone, read_back", [
    (fake_nvml.volta_v100, [LOCK], [UNLOCK], None),
    (fake_nvml.kepler_k80,
     ["nvmlDeviceSetAutoBoostedClocksEnabled",
      "nvmlDeviceSetDefaultAutoBoostedClocksEnabled",
      "nvmlDeviceSetApplicationsClocks"],
     ["nvmlDeviceResetApplicationsClocks",
      "nvmlDeviceSetDefaultAutoBoostedClocksEnabled",
      "nvmlDeviceSetAutoBoostedClocksEnabled"], True)],
    ids=["locked-clocks", "application-clocks"])
def test_a_group_sets_its_clocks_once_and_restores_them_once(
        serve, make_cell, tmp_path, device, changes, undone, read_back):
    names = "abc"
    paths = [write_spec(tmp_path, n, make_cell(GPU)) for n in names]
    assert serve(Script([0.1] * 12), paths, [device()]) == 0
    assert [c[0] for c in fake_nvml.calls()] == changes + undone
    assert fake_nvml.device_state(0)["locked"] is None
    assert fake_nvml.device_state(0)["app"] is None
    # Only the group's record is left, restored; each cell's copy went
    # with its cell.
    assert state_files(tmp_path) == [GROUP_STATE]
    state = json.loads((tmp_path / GROUP_STATE).read_text())
    assert state["status"] == "restored" and state["restored_by"] == "harness"
    for position, result in enumerate(results(tmp_path, names), 1):
        assert result["status"] == "ok", result["error"]
        block = result["gpu_clocks"]
        assert block["applied_by"] == "group" and block["mode"] == "applied"
        assert block["state_file"] == GROUP_STATE
        # Still held for the cells after it when its result was written.
        assert block["state_status"] == "changed" and block["outstanding"]
        assert block["group"]["first_cell"] == "a"
        assert block["group"]["cell_in_group"] == position
        # Locked clocks cannot be read back (None): telemetry checks them.
        assert [(c["index"], c["ok"]) for c in block["group"][
            "checked_before_warmup"]] == [(0, read_back)]
        assert block["gpus"][0]["applied"]["calls"][0]["call"] == changes[0]
        assert "set once before the warm-up of its first GPU cell (a)" in \
            block["reason"]
        assert result["telemetry"] is not None


def test_a_cell_outside_a_group_still_sets_and_restores_its_own(
        make_cell, tmp_path, monkeypatch):
    # `run` (no group): the set and the reset around the cell, as before.
    from harness.throughput import run_cell
    backend = Backend(Script([0.1] * 4))
    backend.DEVICES = ("cpu", "gpu")
    monkeypatch.setattr(frameworks, "load",
                        lambda name, part="backend": backend)
    monkeypatch.setitem(sys.modules, "pynvml", fake_nvml)
    fake_nvml.configure([fake_nvml.volta_v100()])
    spec = {"cell": make_cell(GPU), "container": None}
    result = run_cell(spec, str(tmp_path / "a.json"))
    assert [c[0] for c in fake_nvml.calls()] == [LOCK, UNLOCK]
    assert "applied_by" not in result["gpu_clocks"]
    assert result["gpu_clocks"]["state_status"] == "restored"


@pytest.mark.parametrize("exc, status", [
    (Terminated("terminated by signal 15"), 143), (KeyboardInterrupt(), 130),
    (RuntimeError("a bug outside the cells"), None)],
    ids=["SIGTERM", "SIGINT", "exception"])
def test_the_group_restores_its_clocks_however_the_worker_ends(
        serve, make_cell, tmp_path, monkeypatch, exc, status):
    paths = [write_spec(tmp_path, n, make_cell(GPU)) for n in "abc"]
    if status is None:
        # A failure of the worker itself, after its first cell.
        real = worker.Worker.run_one

        def failing(self, spec_path):
            if spec_path.endswith("b.spec.json"):
                raise exc
            return real(self, spec_path)
        monkeypatch.setattr(worker.Worker, "run_one", failing)
        with pytest.raises(RuntimeError):
            serve(Script([0.1] * 12), paths, [fake_nvml.volta_v100()])
    else:
        # Mid-cell, in the second cell's timed iterations.
        assert serve(Script([0.1] * 12, raise_at=6, exc=exc), paths,
                     [fake_nvml.volta_v100()]) == status
        ended = results(tmp_path, "b")[0]
        assert ended["error"]["type"] == type(exc).__name__
        assert ended["gpu_clocks"]["applied_by"] == "group"
    assert [c[0] for c in fake_nvml.calls()] == [LOCK, UNLOCK]
    assert fake_nvml.device_state(0)["locked"] is None
    assert state_files(tmp_path) == [GROUP_STATE]
    assert json.loads((tmp_path / GROUP_STATE).read_text())["status"] == \
        "restored"
    assert not (tmp_path / "c.json").exists()


class EndsAfter(object):
    """Standard input that gives `lines`, then raises `exc` (a signal while
    the worker waits for its next cell)."""

    def __init__(self, lines, exc):
        self.lines, self.exc = list(lines), exc

    def readline(self):
        if self.lines:
            return worker.command_line(self.lines.pop(0))
        raise self.exc


@pytest.mark.parametrize("exc, status", [
    (Terminated("terminated by signal 15"), 143), (KeyboardInterrupt(), 130)],
    ids=["SIGTERM", "SIGINT"])
def test_a_signal_between_cells_restores_the_groups_clocks(
        serve, make_cell, tmp_path, exc, status):
    path = write_spec(tmp_path, "a", make_cell(GPU))
    assert serve(Script([0.1] * 4), [path], [fake_nvml.volta_v100()],
                 commands=EndsAfter([path], exc)) == status
    assert [c[0] for c in fake_nvml.calls()] == [LOCK, UNLOCK]
    assert results(tmp_path, "a")[0]["status"] == "ok"
    assert json.loads((tmp_path / GROUP_STATE).read_text())["status"] == \
        "restored"



def test_observe_only_changes_nothing(serve, make_cell, tmp_path):
    paths = [write_spec(tmp_path, n, make_cell(GPU, clock_policy="observe"))
             for n in "ab"]
    assert serve(Script([0.1] * 8), paths, [fake_nvml.volta_v100()]) == 0
    assert fake_nvml.calls() == []
    assert state_files(tmp_path) == []
    for result in results(tmp_path, "ab"):
        assert result["gpu_clocks"]["mode"] == "observe"
        assert "applied_by" not in result["gpu_clocks"]


def test_no_permission_is_tried_once_and_said_in_every_cell(
        serve, make_cell, tmp_path):
    paths = [write_spec(tmp_path, n, make_cell(GPU)) for n in "ab"]
    assert serve(Script([0.1] * 8), paths, [fake_nvml.volta_v100()],
                 root=False) == 0
    assert fake_nvml.calls() == []
    for result in results(tmp_path, "ab"):
        assert result["gpu_clocks"]["mode"] == "observe"
        assert "NOT applied" in result["gpu_clocks"]["reason"]
        assert any("NO_PERMISSION" in w for w in result["warnings"])


# --- the worker in a real process, the host's check --------------------------

WAIT_S = 300


class GpuWorker(workercells.ProtocolLines):
    """The worker with the GPU stand-in and the fake NVML (its state in a
    file), fed spec paths; its protocol lines read with a bound."""

    wait_s = WAIT_S

    def __init__(self, folder, devices):
        env, self.fake = fake_nvml.child_env(folder, devices,
                                             path_extra=[ROOT])
        standins.write(folder / "shim", STANDIN)
        env["PYTHONUNBUFFERED"] = "1"
        env["TIMED_MARK"] = str(folder / "timing")
        env["TIMED_AFTER"] = str(GPU["warmup"])
        self.folder = folder
        self.log = open(str(folder / "worker.log"), "w")
        self.proc = processes.start(
            [torch_python(), "-c", standins.DRIVER, "worker"], cwd=str(ROOT),
            env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=self.log)

    def run(self, name, cell):
        """Feed the cell `name` and wait for its cell-start."""
        mark = self.folder / "timing"
        if mark.exists():
            mark.unlink()
        self.proc.stdin.write(worker.command_line(
            write_spec(self.folder, name, cell)).encode())
        self.proc.stdin.flush()
        assert self.next_event()[0] == "cell-start"

    def ended(self):
        return "the worker ended: " + self.log_text()

    def log_text(self):
        return (self.folder / "worker.log").read_text()[-3000:]

    def wait_until_timing(self):
        def timing():
            assert self.proc.poll() is None, self.log_text()
            return (self.folder / "timing").exists()
        waits.wait_for(timing, WAIT_S, what="the timed iterations")

    def device(self):
        return fake_nvml.use_file(str(self.fake))["devices"][0]


def group_of_two(tmp_path, make_cell):
    """A worker that has run cell a and is in cell b's timed iterations."""
    run = GpuWorker(tmp_path, [fake_nvml.volta_v100()])
    run.run("a", make_cell(GPU, batch_size=2, global_batch_size=2))
    assert run.next_event() == ("cell-done", {
        "result": str(tmp_path / "a.json"), "status": "ok"})
    run.run("b", make_cell(GPU, batch_size=2, global_batch_size=2,
                           iterations=10 ** 6))
    run.wait_until_timing()
    assert run.device()["locked"] == [1312, 1312]
    return run


def test_real_sigterm_mid_cell_restores_the_groups_clocks(make_cell,
                                                         tmp_path):
    run = group_of_two(tmp_path, make_cell)
    run.proc.send_signal(signal.SIGTERM)
    assert run.next_event()[1]["status"] == "error"
    assert run.proc.wait(WAIT_S) == 143, run.log_text()
    assert run.device()["locked"] is None
    assert [c[0] for c in fake_nvml.calls()] == [LOCK, UNLOCK]
    a, b = results(tmp_path, "ab")
    assert b["error"]["type"] == "Terminated"
    assert b["telemetry"]["samples"] >= 2
    assert b["gpu_clocks"]["gpus"][0]["timed_window_sm_clock_mhz"] is not None
    assert state_files(tmp_path) == [GROUP_STATE]
    # The host's checks find nothing left to do.
    assert gpu_restore.after_cell(tmp_path / "b.json",
                                  "b.clock-state.json") is None
    assert gpu_restore.after_group(tmp_path / GROUP_STATE) is None


def test_real_sigkill_mid_cell_leaves_a_record_the_host_restores(
        make_cell, tmp_path, monkeypatch):
    run = group_of_two(tmp_path, make_cell)
    run.proc.kill()
    assert run.proc.wait(WAIT_S) == -signal.SIGKILL
    assert run.device()["locked"] == [1312, 1312]
    # The running cell's file is the group's record, outstanding.
    assert state_files(tmp_path) == [GROUP_STATE, "b.clock-state.json"]
    copy = json.loads((tmp_path / "b.clock-state.json").read_text())
    assert copy["status"] == "changed"
    assert copy["group_state"] == GROUP_STATE
    monkeypatch.setitem(sys.modules, "pynvml", fake_nvml)
    message = gpu_restore.after_cell(tmp_path / "b.json",
                                     "b.clock-state.json")
    assert "the cell left GPU clocks changed" in message, message
    assert "restored (1 change(s) undone)" in message
    assert run.device()["locked"] is None
    for name in (GROUP_STATE, "b.clock-state.json"):
        state = json.loads((tmp_path / name).read_text())
        assert state["status"] == "restored" and state["restored_by"] == \
            "host"
    assert gpu_restore.after_group(tmp_path / GROUP_STATE) is None
    assert results(tmp_path, "a")[0]["gpu_clocks"]["applied_by"] == "group"


def test_real_sigkill_between_cells_is_restored_by_the_group_check(
        make_cell, tmp_path, monkeypatch):
    run = GpuWorker(tmp_path, [fake_nvml.volta_v100()])
    run.run("a", make_cell(GPU, batch_size=2, global_batch_size=2))
    run.next_event()
    run.proc.kill()
    run.proc.wait(WAIT_S)
    assert run.device()["locked"] == [1312, 1312]
    # Between cells no cell's file holds the record: the host's check
    # after the cell finds nothing, the one after the worker restores.
    assert gpu_restore.after_cell(tmp_path / "a.json",
                                  "a.clock-state.json") is None
    monkeypatch.setitem(sys.modules, "pynvml", fake_nvml)
    message = gpu_restore.after_group(tmp_path / GROUP_STATE)
    assert "the group's worker left GPU clocks changed" in message
    assert run.device()["locked"] is None
    assert clocks.group_state_path(str(tmp_path / "a.clock-state.json")) == \
        str(tmp_path / GROUP_STATE)


# --- the real command line: `invoke bench --isolation group` ----------------

CLI = ["bench", "--framework", "pytorch", "--runtime", "native", "--python",
       SCRIPTED, "--iterations", "3", "--warmup", "1", "--device", "gpu",
       "--clock-policy", "disable-boost", "--isolation", "group",
       "--network", "fcn5", "--network", "fcn8", "--network", "fcn-r"]
CLI_IDS = ["pytorch-cuda-{}-gpu-b16-g1".format(n)
           for n in ("fcn5", "fcn8", "fcn-r")]


def bench_on_a_fake_gpu(tmp_path, modes=""):
    """`invoke bench` of three GPU cells in one group, the scripted worker
    on the fake NVML (a V100): (its exit status, its run folder, the fake's
    state file)."""
    env, fake = fake_nvml.child_env(tmp_path, [fake_nvml.volta_v100()],
                                    path_extra=[ROOT])
    env["DLREPRO_FAKE_MODES"] = modes
    done = subprocess.run([INVOKE] + CLI + ["--out", str(tmp_path / "out")],
                          cwd=str(ROOT), env=env, capture_output=True,
                          text=True, timeout=WAIT_S)
    assert done.returncode == 0, done.stdout + done.stderr
    return done, (tmp_path / "out" / "latest").resolve(), fake


def test_cli_a_gpu_group_sets_its_clocks_once(tmp_path):
    _done, run_dir, fake = bench_on_a_fake_gpu(tmp_path)
    assert [c[0] for c in fake_nvml.use_file(fake)["calls"]] == [LOCK, UNLOCK]
    group_file = CLI_IDS[0] + ".worker.clock-state.json"
    assert state_files(run_dir) == [group_file]
    state = json.loads((run_dir / group_file).read_text())
    assert (state["status"], state["restored_by"]) == ("restored", "harness")
    for position, job in enumerate(CLI_IDS, 1):
        result = json.loads((run_dir / (job + ".json")).read_text())
        assert result["status"] == "ok"
        assert result["gpu_clocks"]["applied_by"] == "group"
        assert result["gpu_clocks"]["group"]["cell_in_group"] == position


def test_cli_a_worker_killed_mid_cell_has_its_clocks_restored_by_the_host(
        tmp_path):
    # fcn8 kills its worker (SIGKILL, as the OOM killer would) while the
    # group holds the clocks fcn5 had them set for; fcn-r then runs in a
    # fresh worker. (Each process of the fake NVML writes back the whole
    # machine it read, so the calls of one process can hide another's:
    # the check is the state files and the GPU left at the end.)
    done, run_dir, fake = bench_on_a_fake_gpu(tmp_path, modes="fcn8=kill")
    assert "the group's worker left GPU clocks changed" in done.stdout + \
        done.stderr
    assert fake_nvml.use_file(fake)["devices"][0]["locked"] is None
    assert state_files(run_dir) == sorted([
        CLI_IDS[0] + ".worker.clock-state.json",
        CLI_IDS[1] + ".clock-state.json",
        CLI_IDS[2] + ".worker.clock-state.json"])
    restored_by = dict(
        (path.name, json.loads(path.read_text())["restored_by"])
        for path in run_dir.glob("*.clock-state.json"))
    assert restored_by == {CLI_IDS[0] + ".worker.clock-state.json": "host",
                           CLI_IDS[1] + ".clock-state.json": "host",
                           CLI_IDS[2] + ".worker.clock-state.json": "harness"}
    killed = json.loads((run_dir / (CLI_IDS[1] + ".json")).read_text())
    assert killed["status"] == "error"
    assert any("the cell left GPU clocks changed" in w
               for w in killed["warnings"])
    assert json.loads((run_dir / (CLI_IDS[2] + ".json")).read_text())[
        "gpu_clocks"]["group"]["cell_in_group"] == 1
