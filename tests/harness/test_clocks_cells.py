"""GPU clock policy (harness/gpu/clocks.py) in real harness processes with the
fake NVML: clocks restored after an exception, SIGTERM, SIGINT and at exit,
the result still written; the gate, PTX JIT, no permission, CPU cells.
In process, per GPU generation: test_clocks_policy.py."""
import json
import os
import signal
import subprocess
import sys

import pytest

import fake_nvml
from clockcells import (GPU_CELL, assert_schema_valid, start_cell,
                        torch_python, wait_until_timing)
from paths import ROOT


# --- real processes: exception, signals, exit --------------------------------

@pytest.mark.parametrize("signum,exit_status", [
    (signal.SIGTERM, 143), (signal.SIGINT, 0)], ids=["SIGTERM", "SIGINT"])
def test_signal_restores_clocks_and_writes_the_result(make_cell, tmp_path,
                                                      signum, exit_status):
    proc, paths = start_cell(tmp_path, [fake_nvml.volta_v100()],
                             make_cell(GPU_CELL))
    wait_until_timing(proc, paths)
    assert fake_nvml.use_file(str(paths["fake"]))["devices"][0]["locked"] == \
        [1312, 1312]
    proc.send_signal(signum)
    assert proc.wait(60) == exit_status, paths["log"].read_text()
    device = fake_nvml.use_file(str(paths["fake"]))["devices"][0]
    assert device["locked"] is None
    state = json.loads(paths["state"].read_text())
    assert state["status"] == "restored" and state["restored_by"] == "harness"
    result = json.loads(paths["result"].read_text())
    assert result["status"] == "error"
    assert result["error"]["type"] in ("Terminated", "KeyboardInterrupt")
    clocks_block = result["gpu_clocks"]
    assert clocks_block["mode"] == "applied"
    assert clocks_block["state_status"] == "restored"
    assert clocks_block["gpus"][0]["restore"]["undone"] == [
        "nvmlDeviceResetGpuLockedClocks"]
    assert result["telemetry"]["samples"] >= 2
    assert result["timing"]["completed_iterations"] >= 1
    assert result["environment"]["gpus"][0]["name"] == "Tesla V100-SXM2-16GB"
    assert result["model"]["mfu"]["precision"] == "fp32"
    assert result["model"]["mfu"]["clock_mhz"] == 1312
    assert_schema_valid(result)


def test_failing_step_restores_clocks(make_cell, tmp_path):
    proc, paths = start_cell(tmp_path, [fake_nvml.kepler_k80()],
                             make_cell(GPU_CELL, iterations=6),
                             {"FAIL_AT": "5"})
    assert proc.wait(120) == 0, paths["log"].read_text()
    device = fake_nvml.use_file(str(paths["fake"]))["devices"][0]
    assert device["app"] is None and device["autoboost"] == [1, 1]
    result = json.loads(paths["result"].read_text())
    assert result["status"] == "error"
    assert "illegal memory access" in result["error"]["message"]
    assert result["gpu_clocks"]["state_status"] == "restored"
    assert_schema_valid(result)
    changed = [c[0] for c in fake_nvml.calls()]
    assert changed == ["nvmlDeviceSetAutoBoostedClocksEnabled",
                       "nvmlDeviceSetDefaultAutoBoostedClocksEnabled",
                       "nvmlDeviceSetApplicationsClocks",
                       "nvmlDeviceResetApplicationsClocks",
                       "nvmlDeviceSetDefaultAutoBoostedClocksEnabled",
                       "nvmlDeviceSetAutoBoostedClocksEnabled"]


EXIT_SCRIPT = '''
import sys
import fake_nvml
from harness.gpu import clocks
from harness.gpu.nvml import Nvml, device_info
nvml, _ = Nvml.open()
gpus = [(0,) + device_info(nvml, 0)]
session = clocks.ClockSession(nvml, clocks.parse_policy("lock=1000"), gpus,
                              sys.argv[1])
session.apply()
assert fake_nvml.device_state(0)["locked"] == [1000, 1000]
sys.exit(3)  # no restore call: atexit must do it
'''


def test_exit_without_restore_restores_at_exit(tmp_path):
    env, fake = fake_nvml.child_env(tmp_path, [fake_nvml.ampere_a100()],
                                    path_extra=[ROOT])
    proc = subprocess.run([sys.executable, "-c", EXIT_SCRIPT,
                           str(tmp_path / "s.clock-state.json")],
                          env=env, capture_output=True, text=True)
    assert proc.returncode == 3, proc.stderr
    assert fake_nvml.use_file(fake)["devices"][0]["locked"] is None
    state = json.loads((tmp_path / "s.clock-state.json").read_text())
    assert state["status"] == "restored"


MXNET_CU112 = {"sass": ["sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "sm_86"],
               "ptx": "", "min_driver": "460.27.03", "cuda": "11.2",
               "framework_version": "1.9.1"}


def test_gate_stops_the_cell_before_the_framework_starts(make_cell, tmp_path):
    # The host's Python has no PyTorch: the cell must end before importing it.
    proc, paths = start_cell(tmp_path, [fake_nvml.hopper_h200()],
                             make_cell(GPU_CELL), stack=MXNET_CU112,
                             python=sys.executable)
    assert proc.wait(60) == 0, paths["log"].read_text()
    result = json.loads(paths["result"].read_text())
    assert result["status"] == "unsupported"
    assert "sm_90" in result["error"]["message"]
    assert "unsupported" in result["error"]["message"]
    assert result["compatibility"]["verdict"] == "unsupported"
    assert result["environment"]["framework_version"] is None
    assert result["environment"]["gpus"][0]["compute_capability"] == "9.0"
    assert fake_nvml.use_file(str(paths["fake"]))["calls"] == []
    assert not paths["state"].exists()
    assert_schema_valid(result)


def test_ptx_jit_keeps_compilation_out_of_the_timings(make_cell, tmp_path):
    stack = {"sass": ["sm_80"], "ptx": "compute_80", "min_driver": "",
             "cuda": "12.8"}
    proc, paths = start_cell(tmp_path, [fake_nvml.hopper_h200()],
                             make_cell(GPU_CELL, iterations=3, warmup=0,
                                      clock_policy="observe"), stack=stack)
    assert proc.wait(120) == 0, paths["log"].read_text()
    result = json.loads(paths["result"].read_text())
    assert result["status"] == "ok"
    gate = result["compatibility"]
    assert gate["verdict"] == "ptx-jit" and gate["runs_as"] == "compute_80"
    assert gate["extra_warmup"] == 1
    assert len(result["timing"]["warmup_s"]) == 1
    assert len(result["timing"]["per_iteration_s"]) == 3
    assert gate["first_warmup_s"] == result["timing"]["warmup_s"][0]
    assert gate["jit_compile_estimate_s"] is not None
    assert any("PTX JIT" in w for w in result["warnings"])
    assert result["gpu_clocks"]["mode"] == "observe"
    assert not paths["state"].exists()
    assert_schema_valid(result)


def test_no_permission_reaches_the_cell_result(make_cell, tmp_path,
                                               monkeypatch, capsys):
    from harness.gpu import cell as gpu_cell
    from harness.timing import run_loop
    monkeypatch.setitem(sys.modules, "pynvml", fake_nvml)
    fake_nvml.configure([fake_nvml.ampere_a100()], root=False)
    cells = gpu_cell.CellGpus(make_cell(GPU_CELL, iterations=2), {},
                              str(tmp_path / "c.json"))
    result = {"warnings": [], "model": None, "timing": None}
    cells.open()
    cells.gate(result)
    run_loop(cells.timed(lambda: 1.0, cells.apply_clocks(result, 1)), 2, 1)
    cells.close(result)
    assert result["gpu_clocks"]["mode"] == "observe"
    assert "NOT applied" in result["gpu_clocks"]["reason"]
    assert any("NO_PERMISSION" in w for w in result["warnings"])
    assert "NO_PERMISSION" in capsys.readouterr().err
    assert fake_nvml.device_state(0)["locked"] is None


def test_cpu_cell_is_unchanged(make_cell, tmp_path):
    cell = make_cell(GPU_CELL, device="cpu", gpus=0, iterations=2, warmup=1,
                     clock_policy="observe")
    spec = {"cell": cell, "container": None}
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    proc = subprocess.run(
        [torch_python(), "-m", "harness", "run", "--spec",
         str(tmp_path / "spec.json"), "--out", str(tmp_path / "r.json")],
        cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)),
        capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    result = json.loads((tmp_path / "r.json").read_text())
    assert result["status"] == "ok"
    assert result["gpu_clocks"] == {
        "policy": "observe", "applicable": False,
        "reason": "CPU cell: GPU clocks do not apply", "gpus": []}
    assert result["environment"]["gpus"] == []
    for key in ("telemetry", "compatibility"):
        assert key not in result
    assert "mfu" not in result["model"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.json",
                                                          "spec.json"]
    assert_schema_valid(result)
