"""GPU telemetry during a cell's timed iterations: a background sampler.

A daemon thread reads, at a fixed interval, each GPU's SM and memory clocks,
power, temperature, utilisation and clock-event (throttle) reasons; the
total-energy counter is read at the start and the end of the window only.
Samples are summarised (min/mean/max, the fraction of samples showing each
reason); a window that saw power capping, thermal slowdown or a hardware
slowdown is flagged, since its timings do not describe the GPU at its
nominal clocks.

Overhead: one sample is a handful of NVML calls (microseconds each; ctypes
releases the GIL while the driver answers) every DEFAULT_INTERVAL_S, so the
training loop loses well under 1% of one core. The sampler starts after the
last warm-up step returns (`start_after_warmup`), so its thread start lands
in the warm-up's time, and it is stopped after the last timed step.
"""
import threading
import time

from .nvml import NvmlCallError

DEFAULT_INTERVAL_S = 0.05

# Clock-event reason bits (nvmlClocksEventReason*, identical to the older
# nvmlClocksThrottleReason* values; board_limit and reliability exist in the
# older list only).
REASONS = (
    (0x1, "gpu_idle"),
    (0x2, "applications_clocks_setting"),
    (0x4, "sw_power_cap"),
    (0x8, "hw_slowdown"),
    (0x10, "sync_boost"),
    (0x20, "sw_thermal_slowdown"),
    (0x40, "hw_thermal_slowdown"),
    (0x80, "hw_power_brake_slowdown"),
    (0x100, "display_clock_setting"),
    (0x200, "board_limit"),
    (0x400, "reliability"),
)
# What flags a timed window, and the reasons behind each flag.
FLAGS = (
    ("power_capping", ("sw_power_cap", "hw_power_brake_slowdown")),
    ("thermal_slowdown", ("sw_thermal_slowdown", "hw_thermal_slowdown")),
    ("hw_slowdown", ("hw_slowdown",)),
)
# The newer call first; drivers before R535 only have the older name.
REASON_CALLS = ("nvmlDeviceGetCurrentClocksEventReasons",
                "nvmlDeviceGetCurrentClocksThrottleReasons")
METRICS = ("sm_clock_mhz", "memory_clock_mhz", "power_w", "temperature_c",
           "utilization_pct")


def reason_names(bits):
    return [name for bit, name in REASONS if bits & bit]


class Sampler(object):
    """Calls `read()` at t0, t0 + interval, t0 + 2 interval, ... until
    `stop()`, then once more. A sample that falls behind schedule skips the
    missed ticks (counted in `missed`) instead of bursting.

    `clock` and `wait(timeout) -> stop requested` are injectable so that
    tests can drive the schedule with a fake clock."""

    def __init__(self, read, interval_s=DEFAULT_INTERVAL_S,
                 clock=time.monotonic, wait=None):
        if interval_s <= 0:
            raise ValueError("interval_s must be positive")
        self.read = read
        self.interval_s = interval_s
        self.clock = clock
        self._stop = threading.Event()
        self.wait = wait or self._stop.wait
        self.samples = []
        self.times = []
        self.missed = 0
        self.error = None
        self.started_at = None
        self.stopped_at = None
        self._thread = None

    def _sample(self):
        now = self.clock()
        self.samples.append(self.read())
        self.times.append(now)
        return now

    def run(self):
        """The sampling loop (the thread's body; tests call it directly)."""
        try:
            self.started_at = due = self._sample()
            while True:
                due += self.interval_s
                now = self.clock()
                if now > due:
                    skipped = int((now - due) / self.interval_s) + 1
                    self.missed += skipped
                    due += skipped * self.interval_s
                if self.wait(due - now):
                    break
                self._sample()
            self.stopped_at = self._sample()
        except Exception as exc:  # never let telemetry break the cell
            self.error = "{}: {}".format(type(exc).__name__, exc)

    def start(self):
        self._thread = threading.Thread(target=self.run,
                                        name="dlrepro-telemetry")
        self._thread.daemon = True
        self._thread.start()

    def stop(self, timeout=5.0):
        """Ask the loop to end and wait for it; returns whether it ended."""
        self._stop.set()
        if self._thread is None:
            return True
        self._thread.join(timeout)
        return not self._thread.is_alive()


class NvmlReader(object):
    """One sample of every GPU of the cell: a list (one dict per GPU).

    Which call reads each metric is decided once per GPU, before timing
    starts: the first that answers (newer call first, older after, e.g. the
    event-reasons call then the throttle-reasons call of drivers before
    R535). A metric no call can read, or whose read later fails, is reported
    as unavailable with NVML's answer."""

    def __init__(self, nvml, handles):
        self.nvml = nvml
        self.handles = handles
        sm = nvml.const("NVML_CLOCK_SM", 1)
        mem = nvml.const("NVML_CLOCK_MEM", 2)
        temperature = nvml.const("NVML_TEMPERATURE_GPU", 0)
        metrics = (
            ("sm_clock_mhz", [("nvmlDeviceGetClockInfo", (sm,))], None),
            ("memory_clock_mhz", [("nvmlDeviceGetClockInfo", (mem,))], None),
            ("power_w", [("nvmlDeviceGetPowerUsage", ())],
             lambda mw: mw / 1000.0),
            # The unversioned call is deprecated for CUDA 14 drivers.
            ("temperature_c", [("nvmlDeviceGetTemperature", (temperature,)),
                               ("nvmlDeviceGetTemperatureV", (temperature,))],
             None),
            ("utilization_pct", [("nvmlDeviceGetUtilizationRates", ())],
             lambda rates: rates.gpu),
            ("reasons", [(call, ()) for call in REASON_CALLS], int),
        )
        self.unavailable = [dict() for _ in handles]
        self.reads = []
        for index, handle in enumerate(handles):
            chosen = []
            for metric, calls, convert in metrics:
                errors = []
                for call, args in calls:
                    _value, error = nvml.try_call(call, handle, *args)
                    if error is None:
                        chosen.append((metric, call, args, convert))
                        break
                    errors.append("{} {}".format(call, error))
                else:
                    self.unavailable[index][metric] = "; ".join(errors)
            self.reads.append(chosen)
        self.reason_call = [dict((m, c) for m, c, _a, _f in reads).get(
            "reasons") for reads in self.reads]

    def __call__(self):
        sample = []
        for index, handle in enumerate(self.handles):
            values = {}
            for metric, call, args, convert in self.reads[index]:
                if metric in self.unavailable[index]:
                    continue
                try:
                    value = self.nvml.call(call, handle, *args)
                except NvmlCallError as exc:
                    self.unavailable[index][metric] = "{} {}".format(call,
                                                                     exc.name)
                    continue
                values[metric] = convert(value) if convert else value
            sample.append(values)
        return sample

    def energy_mj(self):
        """The total-energy counter of each GPU (mJ), None where absent."""
        readings = []
        for index, handle in enumerate(self.handles):
            value, error = self.nvml.try_call(
                "nvmlDeviceGetTotalEnergyConsumption", handle)
            if error is not None:
                self.unavailable[index]["energy_j"] = error
            readings.append(value)
        return readings


def _stats(values):
    if not values:
        return None
    return {"min": min(values), "mean": sum(values) / float(len(values)),
            "max": max(values)}


def summarize(samples, times, interval_s, energy_start=None,
              energy_end=None, unavailable=None, reason_calls=None):
    """The result's telemetry block from a sampler's samples (each a list of
    per-GPU dicts) and the energy counters at the window's ends."""
    gpu_count = len(samples[0]) if samples else len(energy_start or [])
    window = times[-1] - times[0] if len(times) > 1 else 0.0
    gpus = []
    flags = dict((flag, False) for flag, _ in FLAGS)
    for index in range(gpu_count):
        rows = [s[index] for s in samples]
        entry = {"index": index}
        for metric in METRICS:
            entry[metric] = _stats([r[metric] for r in rows if metric in r])
        with_reasons = [r["reasons"] for r in rows if "reasons" in r]
        entry["reasons_call"] = (reason_calls or [None] * gpu_count)[index]
        entry["reasons"] = None
        if with_reasons:
            entry["reasons"] = dict(
                (name, sum(1 for bits in with_reasons if bits & bit) /
                 float(len(with_reasons)))
                for bit, name in REASONS)
        entry["flags"] = {}
        for flag, names in FLAGS:
            seen = bool(entry["reasons"]) and any(entry["reasons"][n] > 0
                                                  for n in names)
            entry["flags"][flag] = seen
            flags[flag] = flags[flag] or seen
        entry["energy_j"] = None
        entry["mean_power_from_energy_w"] = None
        start = (energy_start or [None] * gpu_count)[index]
        end = (energy_end or [None] * gpu_count)[index]
        if start is not None and end is not None:
            entry["energy_j"] = (end - start) / 1000.0
            if window > 0:
                entry["mean_power_from_energy_w"] = entry["energy_j"] / window
        entry["unavailable"] = dict((unavailable or [{}] * gpu_count)[index])
        gpus.append(entry)
    return {"source": "nvml", "interval_s": interval_s,
            "samples": len(samples), "window_s": window, "gpus": gpus,
            "flags": flags}


def warnings_for(block, names=None):
    """One warning per GPU and flag raised in the timed window."""
    lines = []
    for entry in block["gpus"]:
        label = "GPU {}{}".format(entry["index"], " ({})".format(
            names[entry["index"]]) if names else "")
        for flag, reasons in FLAGS:
            if not entry["flags"].get(flag):
                continue
            share = max(entry["reasons"][r] for r in reasons)
            lines.append("{}: {} in {:.0%} of telemetry samples of the timed "
                         "window ({}); its timings reflect reduced "
                         "clocks".format(label, flag.replace("_", " "), share,
                                         ", ".join(r for r in reasons
                                                   if entry["reasons"][r])))
    return lines


def start_after_warmup(step, warmup, start):
    """`step` wrapped so that `start()` runs right after the last warm-up
    step returns (before the loop reads its clock), i.e. when the timed
    iterations begin. With no warm-up, `start()` runs now."""
    if warmup <= 0:
        start()
        return step
    count = [0]

    def wrapped():
        loss = step()
        count[0] += 1
        if count[0] == warmup:
            start()
        return loss
    return wrapped
