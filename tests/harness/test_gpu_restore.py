"""Host-side GPU clock restore (dlrepro/gpu_restore.py, `invoke
gpu-restore`): after a SIGKILL the state file on disk is all that is left,
and it must be enough."""
import json
import signal

import pytest

import fake_nvml
from cli import invoke
from clockcells import GPU_CELL, start_cell, wait_until_timing
from paths import ROOT
from dlrepro.run import gpu_restore
from dlrepro.errors import UserError
from harness.gpu import clocks
from harness.gpu.nvml import Nvml, device_info



def test_sigkill_leaves_a_record_the_host_restores(make_cell, tmp_path):
    proc, paths = start_cell(tmp_path, [fake_nvml.kepler_k80()],
                             make_cell(GPU_CELL))
    wait_until_timing(proc, paths)
    proc.send_signal(signal.SIGKILL)
    proc.wait(30)
    device = fake_nvml.use_file(str(paths["fake"]))["devices"][0]
    assert device["app"] == [2505, 562] and device["autoboost"] == [0, 0]
    assert not paths["result"].exists()  # nothing ran after the kill
    state = json.loads(paths["state"].read_text())
    assert state["status"] == "changed"

    message = gpu_restore.after_cell(paths["result"], "cell.clock-state.json",
                                     module=fake_nvml)
    assert "left GPU clocks changed" in message and "restored" in message
    device = fake_nvml.device_state(0)
    assert device["app"] is None and device["autoboost"] == [1, 1]
    state = json.loads(paths["state"].read_text())
    assert state["status"] == "restored" and state["restored_by"] == "host"
    assert gpu_restore.after_cell(paths["result"], "cell.clock-state.json",
                                  module=fake_nvml) is None


def _changed_cell(folder, name, policy="disable-boost"):
    """A cell's clock session that was never restored (as after SIGKILL)."""
    nvml, _ = Nvml.open(fake_nvml)
    gpus = [(0,) + device_info(nvml, 0)]
    session = clocks.ClockSession(nvml, clocks.parse_policy(policy), gpus,
                                  str(folder / name), log=lambda line: None)
    session.apply()
    import atexit
    atexit.unregister(session.restore)
    return folder / name


def test_restore_run_undoes_newest_first(tmp_path):
    fake_nvml.configure([fake_nvml.pascal_p100()])
    run = tmp_path / "results" / "run-1"
    run.mkdir(parents=True)
    (run / "run.json").write_text("{}")
    (tmp_path / "results" / "latest").symlink_to("run-1")
    _changed_cell(run, "b.clock-state.json", "lock=1000")
    # the second cell found the first cell's clocks and took them as original
    _changed_cell(run, "a.clock-state.json", "disable-boost")
    assert fake_nvml.device_state(0)["app"] == [715, 1328]
    lines = gpu_restore.restore(run="latest", out=str(tmp_path / "results"),
                                module=fake_nvml)
    assert [l.split(":")[0] for l in lines] == ["a.clock-state.json",
                                                 "b.clock-state.json"]
    assert fake_nvml.device_state(0)["app"] is None
    again = gpu_restore.restore(run="latest", out=str(tmp_path / "results"),
                                module=fake_nvml)
    assert "nothing to restore" in again[0]


def _restore_fails(folder, break_it, says):
    """A changed cell's restore after `break_it(the fake's state)`: a
    UserError that matches `says`. The state file's path."""
    fake_nvml.configure([fake_nvml.ampere_a100()])
    path = _changed_cell(folder, "c.clock-state.json")
    break_it(fake_nvml.state())
    with pytest.raises(UserError, match=says):
        gpu_restore.restore_file(path, module=fake_nvml)
    return path


def test_restore_without_permission_is_a_user_error(tmp_path):
    path = _restore_fails(tmp_path, lambda s: s.update(root=False),
                          "NO_PERMISSION.*root")
    assert json.loads(path.read_text())["status"] == "restore-failed"
    fake_nvml.state()["root"] = True
    assert "restored" in gpu_restore.restore_file(path, module=fake_nvml)
    assert fake_nvml.device_state(0)["locked"] is None


def test_restore_without_nvml_says_where_to_run(tmp_path):
    _restore_fails(tmp_path, lambda s: s.update(loaded=False),
                   "LIBRARY_NOT_FOUND.*run this on")


def test_gpu_missing_from_this_host_fails_loudly(tmp_path):
    _restore_fails(tmp_path, lambda s: s["devices"][0].update(
        uuid="GPU-another-board"), "GPU_NOT_FOUND")


def _invoke(tmp_path, *args, fake=None):
    env, _ = fake_nvml.child_env(tmp_path, state=fake, path_extra=[ROOT])
    return invoke("gpu-restore", *args, env=env)


def test_invoke_gpu_restore_state_file(tmp_path):
    fake = tmp_path / "fake.json"
    fake_nvml.configure([fake_nvml.volta_v100()], path=str(fake))
    path = _changed_cell(tmp_path, "cell-7.clock-state.json")
    assert fake_nvml.device_state(0)["locked"] == [1312, 1312]
    proc = _invoke(tmp_path, "--state", str(path), fake=fake)
    assert proc.returncode == 0, proc.stderr
    assert "cell-7.clock-state.json: restored (1 change(s) undone)" in \
        proc.stdout
    assert fake_nvml.use_file(str(fake))["devices"][0]["locked"] is None
    proc = _invoke(tmp_path, "--state", str(path), fake=fake)
    assert proc.returncode == 0 and "nothing to restore" in proc.stdout


@pytest.mark.parametrize("args,message", [
    (["--state", "/nonexistent/x.clock-state.json"], "cannot read"),
    (["--state", "{root}/pyproject.toml"], "not valid JSON"),
    (["--state", "a", "--run", "latest"], "not both"),
    (["--run", "no-such-run", "--out", "{tmp}"], "no run 'no-such-run'"),
], ids=["missing", "not-json", "both", "unknown-run"])
def test_invoke_gpu_restore_bad_input(tmp_path, args, message):
    args = [a.format(root=ROOT, tmp=tmp_path) for a in args]
    proc = _invoke(tmp_path, *args)
    assert proc.returncode == 2
    assert message in proc.stderr
    assert "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_not_a_state_file(tmp_path):
    path = tmp_path / "x.clock-state.json"
    path.write_text(json.dumps({"schema_version": 1}))
    with pytest.raises(UserError, match="not a GPU clock-state file"):
        gpu_restore.load_state(path)


def test_after_cell_without_state_file_is_silent(tmp_path):
    assert gpu_restore.after_cell(tmp_path / "cell.json") is None


def test_after_cell_with_a_torn_state_file_says_so(tmp_path):
    (tmp_path / "cell.clock-state.json").write_text("{")
    message = gpu_restore.after_cell(tmp_path / "cell.json")
    assert "unreadable" in message and "nvidia-smi" in message


HEADER = {"format": clocks.STATE_FORMAT, "version": clocks.STATE_VERSION}


@pytest.mark.parametrize("fields, named", [
    ({}, "status None is not a clock-state status"),
    ({"status": ["pending"]}, "status ['pending'] is not a clock-state"),
    ({"status": "restored", "restored_by": 5}, "restored_by must be a string"),
    ({"status": "pending", "created_unix": "x"},
     "created_unix must be a number"),
    ({"status": "changed", "gpus": {"0": []}}, "gpus must be a list of GPUs"),
    ({"status": "changed", "gpus": [{"changes": "all"}]},
     "gpus must be a list of GPUs"),
], ids=["no-status", "status-list", "restored-by-number",
        "created-string", "gpus-object", "changes-string"])
def test_a_damaged_state_file_is_one_line(tmp_path, fields, named):
    """A state file the harness wrote whole, then damaged: a KeyError or
    a TypeError traceback before, or (a list status) "nothing to
    restore" for a file that says nothing."""
    path = tmp_path / "c.clock-state.json"
    path.write_text(json.dumps(dict(HEADER, **fields)))
    proc = _invoke(tmp_path, "--state", str(path))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.startswith(f"error: {path}: {named}"), proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_a_run_whose_state_files_disagree_on_a_field_type_is_one_line(
        tmp_path):
    """Two outstanding files whose created_unix a string and a number
    could not be sorted: a TypeError traceback before."""
    run = tmp_path / "run-1"
    run.mkdir()
    for name, created in (("a", "x"), ("b", 5)):
        (run / f"{name}.clock-state.json").write_text(json.dumps(dict(
            HEADER, status="pending", created_unix=created, gpus=[])))
    with pytest.raises(UserError, match="created_unix must be a number"):
        gpu_restore.restore_run(run, module=fake_nvml)
