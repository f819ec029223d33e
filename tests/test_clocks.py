"""GPU clock policy (harness/clocks.py) against the fake NVML of several GPU
generations: apply, verify, record, restore, refusals; restore after an
exception, SIGTERM, SIGINT and at exit, in real processes.
Why this is long: every policy against every modelled GPU generation, and
every way a process can end, each in its own small test."""
import functools
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest

import fake_nvml
import processes
import standins
import waits
from paths import ROOT
from harness import clocks, resultfile
from harness.errors import HarnessError
from harness.nvml import Nvml, device_info



@functools.lru_cache(maxsize=1)
def torch_python():
    """The PyTorch CPU environment, made from its lock on first use."""
    from dlrepro import matrix
    from dlrepro.images import envs
    m = matrix.load()
    return str(envs.ensure("pytorch", "cpu", m["pytorch"]["cpu"],
                           log=lambda _: None))


# --- policy parsing ----------------------------------------------------------

@pytest.mark.parametrize("text,name,mhz", [
    ("observe", "observe", None), ("disable-boost", "disable-boost", None),
    ("lock=1410", "lock", 1410)])
def test_parse_policy(text, name, mhz):
    policy = clocks.parse_policy(text)
    assert (policy.name, policy.mhz, policy.text) == (name, mhz, text)


@pytest.mark.parametrize("text", ["", "boost", "lock=", "lock=0", "lock=-5",
                                  "lock=1.5e3", "LOCK=1000", None, 1410])
def test_bad_policies_are_harness_errors(text):
    with pytest.raises(HarnessError, match="observe, disable-boost or lock="):
        clocks.parse_policy(text)


def test_only_changing_policies_ask_for_privileges():
    assert clocks.container_requirements("observe") == {"cap_add": [],
                                                         "env": {}}
    needs = clocks.container_requirements("lock=1200")
    assert needs["cap_add"] == ["SYS_ADMIN"]
    assert "utility" in needs["env"]["NVIDIA_DRIVER_CAPABILITIES"]
    assert clocks.needs_privileges("disable-boost")


def test_state_path(tmp_path):
    out = str(tmp_path / "cell-3.json")
    assert clocks.state_path(out) == str(tmp_path / "cell-3.clock-state.json")
    assert clocks.state_path(out, "x.clock-state.json") == \
        str(tmp_path / "x.clock-state.json")
    for bad in ("/etc/passwd", "../up.json", "a/../../b.json", ""):
        with pytest.raises(HarnessError, match="relative"):
            clocks.state_path(out, bad)


# --- in-process sessions per generation --------------------------------------

def _session(tmp_path, devices, policy, log=None, **options):
    fake_nvml.configure(devices, **options)
    nvml, reason = Nvml.open(fake_nvml)
    assert nvml is not None, reason
    driver = fake_nvml.state()["driver"]
    gpus = [(i,) + device_info(nvml, i, driver, "13.0")
            for i in range(len(devices))]
    from harness import peaks

    def base(info):
        entry = peaks.find(info["name"])
        return entry.base_mhz if entry else None
    lines = []
    session = clocks.ClockSession(nvml, clocks.parse_policy(policy), gpus,
                                  str(tmp_path / "c.clock-state.json"),
                                  datasheet_base=base,
                                  log=log or lines.append)
    session.lines = lines
    return session


GENERATIONS = [
    # id, preset, policy, missing, expected set calls, method, device fields
    ("k80-disable-boost", fake_nvml.kepler_k80, "disable-boost", (),
     [["nvmlDeviceSetAutoBoostedClocksEnabled", 0, [0]],
      ["nvmlDeviceSetDefaultAutoBoostedClocksEnabled", 0, [0, 0]],
      ["nvmlDeviceSetApplicationsClocks", 0, [2505, 562]]],
     "applications_clocks", {"app": [2505, 562], "autoboost": [0, 0]}),
    ("k80-lock-700", fake_nvml.kepler_k80, "lock=700", (),
     [["nvmlDeviceSetAutoBoostedClocksEnabled", 0, [0]],
      ["nvmlDeviceSetDefaultAutoBoostedClocksEnabled", 0, [0, 0]],
      ["nvmlDeviceSetApplicationsClocks", 0, [2505, 692]]],
     "applications_clocks", {"app": [2505, 692], "autoboost": [0, 0]}),
    ("p100-disable-boost", fake_nvml.pascal_p100, "disable-boost", (),
     [["nvmlDeviceSetApplicationsClocks", 0, [715, 1328]]],
     "applications_clocks", {"app": [715, 1328], "locked": None}),
    ("v100-disable-boost", fake_nvml.volta_v100, "disable-boost", (),
     [["nvmlDeviceSetGpuLockedClocks", 0, [1312, 1312]]],
     "locked_clocks", {"locked": [1312, 1312], "app": None}),
    ("v100-old-driver-falls-back", fake_nvml.volta_v100, "disable-boost",
     fake_nvml.OLD_DRIVER_MISSING,
     [["nvmlDeviceSetApplicationsClocks", 0, [877, 1312]]],
     "applications_clocks", {"locked": None, "app": [877, 1312]}),
    ("a100-lock-1200", fake_nvml.ampere_a100, "lock=1200", (),
     [["nvmlDeviceSetGpuLockedClocks", 0, [1200, 1200]]],
     "locked_clocks", {"locked": [1200, 1200]}),
    ("h100-base-from-datasheet", fake_nvml.hopper_h100, "disable-boost", (),
     [["nvmlDeviceSetGpuLockedClocks", 0, [1590, 1590]]],
     "locked_clocks", {"locked": [1590, 1590]}),
]


@pytest.mark.parametrize("preset,policy,missing,calls,method,fields",
                         [g[1:] for g in GENERATIONS],
                         ids=[g[0] for g in GENERATIONS])
def test_apply_verify_restore(tmp_path, preset, policy, missing, calls,
                              method, fields):
    original = preset()
    session = _session(tmp_path, [original], policy, missing=missing)
    record = session.apply()[0]
    assert fake_nvml.calls() == calls
    for key, value in fields.items():
        assert fake_nvml.device_state(0)[key] == value
    assert record["applied"]["method"] == method
    assert record["applied"]["complete"]
    assert record["refused"] is None
    assert record["verification"]["ok"] in (True, None)
    if method == "locked_clocks":
        assert "telemetry" in record["verification"]["note"]
    assert session.block()["mode"] == "applied"
    state = json.loads((tmp_path / "c.clock-state.json").read_text())
    assert state["status"] == "changed"
    assert state["gpus"][0]["uuid"] == fake_nvml.device_state(0)["uuid"]

    session.restore()
    device = fake_nvml.device_state(0)
    for key in ("app", "locked", "autoboost"):
        assert device[key] == original[key]
    restores = fake_nvml.calls()[len(calls):]
    assert len(restores) == len(calls)
    assert record["restore"]["matches_original"]
    state = json.loads((tmp_path / "c.clock-state.json").read_text())
    assert state["status"] == "restored"
    assert state["restored_by"] == "harness"
    assert session.block()["outstanding"] is False
    session.restore()  # idempotent
    assert len(fake_nvml.calls()) == 2 * len(calls)


def test_old_driver_records_the_missing_function(tmp_path):
    session = _session(tmp_path, [fake_nvml.volta_v100()], "disable-boost",
                       missing=fake_nvml.OLD_DRIVER_MISSING)
    record = session.apply()[0]
    assert record["attempts"][0] == {
        "call": "nvmlDeviceSetGpuLockedClocks", "args": [1312, 1312],
        "outcome": "FUNCTION_NOT_FOUND"}
    assert record["attempts"][1]["outcome"] == "applied"
    session.restore()


def test_python_function_missing_from_old_nvidia_ml_py(tmp_path):
    session = _session(tmp_path, [fake_nvml.ampere_a100()], "disable-boost")
    fake_nvml.hide("nvmlDeviceSetGpuLockedClocks")
    try:
        record = session.apply()[0]
        session.restore()
    finally:
        fake_nvml.unhide()
    assert record["attempts"][0]["outcome"] == "FUNCTION_NOT_FOUND"
    assert record["applied"]["method"] == "applications_clocks"
    assert fake_nvml.device_state(0)["app"] is None


REFUSALS = [
    ("gtx1080-has-no-method", fake_nvml.geforce_gtx1080, "disable-boost",
     {}, "no NVML method"),
    ("gtx980-has-no-method", fake_nvml.geforce_gtx980, "disable-boost", {},
     "no NVML method"),
    ("h200-has-no-base-clock", fake_nvml.hopper_h200, "disable-boost", {},
     "no base clock"),
    ("lock-above-maximum", fake_nvml.ampere_a100, "lock=5000", {},
     "above this GPU's maximum"),
    ("no-permission", fake_nvml.ampere_a100, "disable-boost",
     {"root": False}, "NO_PERMISSION"),
]


@pytest.mark.parametrize("preset,policy,options,reason",
                         [r[1:] for r in REFUSALS],
                         ids=[r[0] for r in REFUSALS])
def test_refusals_leave_the_gpu_alone_and_say_so(tmp_path, preset, policy,
                                                 options, reason):
    original = preset()
    session = _session(tmp_path, [original], policy, **options)
    record = session.apply()[0]
    assert fake_nvml.calls() == []
    assert fake_nvml.device_state(0)["locked"] is None
    assert fake_nvml.device_state(0)["app"] is None
    assert record["applied"] is None
    assert reason in record["refused"]
    block = session.block()
    assert block["mode"] == "observe"
    assert "NOT applied" in block["reason"]
    # loudly: a result warning and a line on stderr
    assert any(reason in w for w in session.warnings)
    assert any("WARNING" in line and reason in line for line in session.lines)
    session.restore()
    assert fake_nvml.calls() == []


def test_no_permission_names_what_is_missing(tmp_path, capsys):
    session = _session(tmp_path, [fake_nvml.volta_v100()], "lock=1000",
                       root=False, log=clocks.ClockSession.default_log)
    record = session.apply()[0]
    err = capsys.readouterr().err
    assert "harness: WARNING: clock policy lock=1000" in err
    assert "NO_PERMISSION" in err
    assert "CAP_SYS_ADMIN" in record["refused"]
    assert "root" in record["refused"]
    state = json.loads((tmp_path / "c.clock-state.json").read_text())
    assert state["status"] == "unchanged"
    assert state["gpus"][0]["changes"][0]["state"] == "refused"


def test_non_default_application_clocks_are_set_back_not_reset(tmp_path):
    p100 = fake_nvml.pascal_p100(app=[715, 1181])
    session = _session(tmp_path, [p100], "disable-boost")
    record = session.apply()[0]
    assert record["not_at_defaults"] == [
        "application clocks 1181/715 MHz, default 1328/715 MHz"]
    assert any("was not at its default clocks" in w for w in session.warnings)
    assert fake_nvml.device_state(0)["app"] == [715, 1328]
    session.restore()
    assert fake_nvml.device_state(0)["app"] == [715, 1181]
    assert fake_nvml.calls()[-1] == ["nvmlDeviceSetApplicationsClocks", 0,
                                     [715, 1181]]


def test_every_change_is_on_disk_before_its_call(tmp_path, monkeypatch):
    session = _session(tmp_path, [fake_nvml.kepler_k80()], "disable-boost")
    path = tmp_path / "c.clock-state.json"
    seen = []
    for name in ("nvmlDeviceSetAutoBoostedClocksEnabled",
                 "nvmlDeviceSetDefaultAutoBoostedClocksEnabled",
                 "nvmlDeviceSetApplicationsClocks"):
        real = getattr(fake_nvml, name)

        def checked(handle, *args, _real=real, _name=name):
            state = json.loads(path.read_text())
            last = state["gpus"][0]["changes"][-1]
            seen.append((_name, last["call"], last["state"],
                         last["undo_call"]))
            return _real(handle, *args)
        monkeypatch.setattr(fake_nvml, name, checked)
    session.apply()
    assert [s[0] for s in seen] == [s[1] for s in seen]
    assert all(s[2] == "attempting" and s[3] in clocks.UNDO_CALLS
               for s in seen)
    assert len(seen) == 3
    session.restore()


def test_no_state_file_no_change(tmp_path):
    fake_nvml.configure([fake_nvml.ampere_a100()])
    nvml, _ = Nvml.open(fake_nvml)
    gpus = [(0,) + device_info(nvml, 0)]
    lines = []
    session = clocks.ClockSession(
        nvml, clocks.parse_policy("disable-boost"), gpus,
        str(tmp_path / "missing-dir" / "c.clock-state.json"), log=lines.append)
    record = session.apply()[0]
    assert fake_nvml.calls() == []
    assert "cannot save the original clock state" in record["refused"]
    assert lines


def test_observe_reads_and_never_writes(tmp_path):
    session = _session(tmp_path, [fake_nvml.kepler_k80()], "observe")
    record = session.apply()[0]
    assert fake_nvml.calls() == []
    assert not (tmp_path / "c.clock-state.json").exists()
    assert record["original"]["autoboost"] == {"enabled": True,
                                               "default": True}
    assert record["original"]["default_applications_clocks"] == {
        "graphics_mhz": 562, "memory_mhz": 2505}
    assert record["not_at_defaults"] == []
    assert session.warnings == []
    assert session.block()["mode"] == "observe"


def test_undo_runs_only_allowed_calls(tmp_path):
    fake_nvml.configure([fake_nvml.ampere_a100()])
    nvml, _ = Nvml.open(fake_nvml)
    state = {"status": "changed", "gpus": [{"uuid": "x", "changes": [
        {"state": "applied", "undo_call": "nvmlDeviceSetPowerManagementLimit",
         "undo_args": [1]}]}]}
    clocks.undo_changes(nvml, state, lambda uuid: object(), by="host")
    assert state["status"] == "restore-failed"
    assert state["gpus"][0]["changes"][0]["restore_error"] == "REFUSED_CALL"


# --- real processes: exception, signals, exit --------------------------------

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
from harness import clocks
from harness.nvml import Nvml, device_info
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
    from harness import gpu
    from harness.timing import run_loop
    monkeypatch.setitem(sys.modules, "pynvml", fake_nvml)
    fake_nvml.configure([fake_nvml.ampere_a100()], root=False)
    cells = gpu.CellGpus(make_cell(GPU_CELL, iterations=2), {},
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
