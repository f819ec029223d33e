"""The telemetry sampler (harness/gpu/telemetry.py) against a fake clock and
the fake NVML (tests/fake_nvml.py)."""
import sys
import threading
import time

import pytest

import fake_nvml
from harness.gpu import cell as gpu_cell, telemetry
from harness.gpu.nvml import Nvml
from harness.timing import run_loop


class FakeTime(object):
    """A clock that only moves when the sampler waits (plus `cost` per
    sample, to model slow reads); stop is requested at `stop_at`."""

    def __init__(self, stop_at, cost=0.0):
        self.now = 100.0
        self.stop_at = stop_at
        self.cost = cost
        self.waits = []

    def clock(self):
        return self.now

    def wait(self, timeout):
        self.waits.append(timeout)
        self.now += max(timeout, 0.0)
        return self.now >= self.stop_at

    def read(self):
        self.now += self.cost
        return [{"at": self.now}]


def test_samples_at_a_fixed_rate_with_a_fake_clock():
    fake = FakeTime(stop_at=100.95)
    sampler = telemetry.Sampler(fake.read, 0.1, clock=fake.clock,
                                wait=fake.wait)
    sampler.run()
    # t0, t0+0.1, ... t0+0.9; the wait to t0+1.0 sees the stop; last sample.
    assert sampler.times == pytest.approx([100.0 + 0.1 * i for i in range(11)])
    assert len(sampler.samples) == 11
    assert sampler.missed == 0
    assert sampler.error is None
    assert all(w == pytest.approx(0.1) for w in fake.waits)


def test_slow_reads_skip_ticks_instead_of_drifting():
    fake = FakeTime(stop_at=101.0, cost=0.25)
    sampler = telemetry.Sampler(fake.read, 0.1, clock=fake.clock,
                                wait=fake.wait)
    sampler.run()
    # Each read takes 0.25 s: the sampler stays on the 0.1 s grid.
    grid = [(t - 100.0) / 0.1 for t in sampler.times[:-1]]
    assert all(abs(g - round(g)) < 1e-6 for g in grid)
    assert sampler.missed > 0


def test_a_failing_read_ends_sampling_without_raising():
    def read():
        raise RuntimeError("NVML went away")
    sampler = telemetry.Sampler(read, 0.01)
    sampler.start()
    assert sampler.stop()
    assert "NVML went away" in sampler.error


def test_real_thread_stops_promptly_and_cleanly():
    counter = []
    sampler = telemetry.Sampler(lambda: counter.append(1) or [{}], 0.02)
    sampler.start()
    time.sleep(0.25)
    started = time.monotonic()
    assert sampler.stop(timeout=2.0)
    assert time.monotonic() - started < 1.0
    assert not any(t.name == "dlrepro-telemetry" and t.is_alive()
                   for t in threading.enumerate())
    assert len(sampler.samples) >= 3
    assert sampler.stopped_at is not None


def test_sampler_starts_exactly_when_the_timed_iterations_begin():
    events = []
    ticks = iter(range(100))

    def step():
        events.append("step")
        return 1.0

    wrapped = telemetry.start_after_warmup(step, 3,
                                           lambda: events.append("start"))
    series = run_loop(wrapped, 4, 3, clock=lambda: float(next(ticks)))
    assert events == ["step"] * 3 + ["start"] + ["step"] * 4
    assert len(series.times) == 4 and len(series.warmup_s) == 3


def test_no_warmup_starts_before_the_first_step():
    events = []
    wrapped = telemetry.start_after_warmup(lambda: events.append("s") or 1.0,
                                           0, lambda: events.append("start"))
    wrapped()
    assert events == ["start", "s"]


def _nvml(devices, **options):
    fake_nvml.configure(devices, **options)
    nvml, reason = Nvml.open(fake_nvml)
    assert nvml is not None, reason
    return nvml


def test_reader_falls_back_to_throttle_reasons_on_an_old_driver():
    nvml = _nvml([fake_nvml.kepler_k80()],
                 missing=fake_nvml.KEPLER_DRIVER_MISSING)
    handle = nvml.call("nvmlDeviceGetHandleByIndex", 0)
    fake_nvml.set_series(0, "reasons", [0x4])
    reader = telemetry.NvmlReader(nvml, [handle])
    sample = reader()[0]
    assert reader.reason_call == ["nvmlDeviceGetCurrentClocksThrottleReasons"]
    assert sample["reasons"] == 0x4
    assert sample["power_w"] == pytest.approx(149 * 0.8)
    assert reader.energy_mj() == [None]
    assert reader.unavailable[0]["energy_j"] == "NOT_SUPPORTED"


def test_reader_without_the_python_function_uses_the_older_call():
    nvml = _nvml([fake_nvml.ampere_a100()])
    fake_nvml.hide("nvmlDeviceGetCurrentClocksEventReasons")
    try:
        reader = telemetry.NvmlReader(
            nvml, [nvml.call("nvmlDeviceGetHandleByIndex", 0)])
    finally:
        fake_nvml.unhide()
    assert reader.reason_call == ["nvmlDeviceGetCurrentClocksThrottleReasons"]
    assert "reasons" not in reader.unavailable[0]


def test_reader_reports_what_no_call_can_read():
    nvml = _nvml([fake_nvml.kepler_k80()], missing=(
        "nvmlDeviceGetCurrentClocksEventReasons",
        "nvmlDeviceGetCurrentClocksThrottleReasons"))
    fake_nvml.hide("nvmlDeviceGetTemperature")
    try:
        reader = telemetry.NvmlReader(
            nvml, [nvml.call("nvmlDeviceGetHandleByIndex", 0)])
        sample = reader()[0]
    finally:
        fake_nvml.unhide()
    assert "reasons" not in sample and "temperature_c" not in sample
    assert reader.unavailable[0]["reasons"] == (
        "nvmlDeviceGetCurrentClocksEventReasons FUNCTION_NOT_FOUND; "
        "nvmlDeviceGetCurrentClocksThrottleReasons FUNCTION_NOT_FOUND")
    assert "nvmlDeviceGetTemperatureV FUNCTION_NOT_FOUND" in \
        reader.unavailable[0]["temperature_c"]
    assert sample["sm_clock_mhz"] == 875
    block = telemetry.summarize([reader()], [0.0], 0.05,
                                unavailable=reader.unavailable,
                                reason_calls=reader.reason_call)
    assert block["gpus"][0]["reasons"] is None
    assert not any(block["flags"].values())


def test_summary_statistics_fractions_energy_and_flags():
    samples = [[{"sm_clock_mhz": 1410, "power_w": 300.0, "reasons": 0}],
               [{"sm_clock_mhz": 1200, "power_w": 400.0, "reasons": 0x4}],
               [{"sm_clock_mhz": 1305, "power_w": 350.0, "reasons": 0x4}],
               [{"sm_clock_mhz": 1305, "power_w": 350.0, "reasons": 0x1}]]
    block = telemetry.summarize(samples, [0.0, 0.1, 0.2, 0.3], 0.1,
                                energy_start=[1000], energy_end=[106000],
                                unavailable=[{"temperature_c":
                                              "NOT_SUPPORTED"}],
                                reason_calls=["nvmlDeviceGetCurrentClocks"
                                              "EventReasons"])
    entry = block["gpus"][0]
    assert block["samples"] == 4 and block["window_s"] == pytest.approx(0.3)
    assert entry["sm_clock_mhz"] == {"min": 1200, "mean": 1305.0, "max": 1410}
    assert entry["temperature_c"] is None
    assert entry["reasons"]["sw_power_cap"] == pytest.approx(0.5)
    assert entry["reasons"]["gpu_idle"] == pytest.approx(0.25)
    assert entry["reasons"]["hw_thermal_slowdown"] == 0
    assert entry["energy_j"] == pytest.approx(105.0)
    assert entry["mean_power_from_energy_w"] == pytest.approx(350.0)
    assert block["flags"] == {"power_capping": True, "thermal_slowdown": False,
                              "hw_slowdown": False}
    warnings = telemetry.warnings_for(block, ["NVIDIA A100-SXM4-40GB"])
    assert len(warnings) == 1
    assert "power capping in 50%" in warnings[0]
    assert "A100" in warnings[0]


def test_clean_window_has_no_flags_and_no_warnings():
    samples = [[{"sm_clock_mhz": 1980, "reasons": 0}]] * 3
    block = telemetry.summarize(samples, [0, 1, 2], 1.0)
    assert not any(block["flags"].values())
    assert telemetry.warnings_for(block) == []


def test_reason_names():
    assert telemetry.reason_names(0x4 | 0x40) == ["sw_power_cap",
                                                   "hw_thermal_slowdown"]


@pytest.fixture
def as_pynvml(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", fake_nvml)


GPU_CELL = {"profile": "cuda", "network": "fcn5", "device": "gpu", "gpus": 1,
            "threads": None, "iterations": 5}


def test_cell_telemetry_covers_the_timed_window_and_flags_thermal(make_cell,
        tmp_path, as_pynvml):
    fake_nvml.configure([fake_nvml.hopper_h200()])
    # Thermal slowdown shows up in the samples taken while timing.
    fake_nvml.set_series(0, "reasons", [0, 0x20, 0x20, 0])
    fake_nvml.set_series(0, "energy_mj", [5000000, 5012000])
    cells = gpu_cell.CellGpus(make_cell(GPU_CELL), {},
                              str(tmp_path / "c.json"),
                              log=lambda line: None, interval_s=0.01)
    result = {"warnings": [], "model": None, "timing": None}
    cells.open()
    cells.gate(result)
    warmup = cells.apply_clocks(result, 2)
    step = cells.timed(lambda: time.sleep(0.02) or 1.0, warmup)
    run_loop(step, 5, warmup)
    cells.close(result)
    block = result["telemetry"]
    assert block["samples"] >= 3
    assert block["flags"]["thermal_slowdown"]
    assert block["gpus"][0]["energy_j"] == pytest.approx(12.0)
    assert block["gpus"][0]["reasons_call"] == \
        "nvmlDeviceGetCurrentClocksEventReasons"
    assert any("thermal slowdown" in w for w in result["warnings"])
    # observe: nothing was set, and the clocks were still recorded
    assert fake_nvml.calls() == []
    assert result["gpu_clocks"]["mode"] == "observe"
    assert result["gpu_clocks"]["gpus"][0]["original"]["max_clocks"] == \
        {"graphics_mhz": 1980, "memory_mhz": 3201}
