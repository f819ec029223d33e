"""GPU clock policy (harness/gpu/clocks.py) against the fake NVML of several
GPU generations, in process: parsing, apply, verify, record, restore, refusals.
The same in real processes (exception, signals, exit):
test_clocks_cells.py."""
import json

import pytest

import fake_nvml
from harness.gpu import clocks
from harness.errors import HarnessError
from harness.gpu.nvml import Nvml, device_info


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
    from harness.gpu import peaks

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
