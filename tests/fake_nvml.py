"""A fake `pynvml` (nvidia-ml-py) for tests: the same function names,
constants and error classes as nvidia-ml-py 13.615.71, over per-device state
that behaves like the GPU generations the clock policy must handle.
This module holds the calls (one fake for every NVML call the harness makes,
each with the state change and the errors of the real library);
fake_nvml_state.py holds the constants, error classes, device presets and
state they work on, all re-exported here.

There is no GPU on the test machines, so this stands in for NVML and nothing
else. Tests inject it as `pynvml`:

- in-process: `monkeypatch.setitem(sys.modules, "pynvml", fake_nvml)`;
- in a subprocess (signals, SIGKILL): a directory holding a one-line
  `pynvml.py` shim (see `write_shim`) on PYTHONPATH, with the state in a JSON
  file named by FAKE_NVML_STATE so that the test can read what the
  subprocess left behind; `child_env` makes both.

Generations (presets below):
- Kepler/Maxwell Tesla (K80): autoboost switch and its default, application
  clocks; no locked clocks, no energy counter. Its last driver (470) lacks the
  clock-event-reasons call (configure(missing=KEPLER_DRIVER_MISSING)), so the
  older throttle-reasons call must be used.
- GeForce (GTX 980, GTX 1080): no autoboost switch, no application clocks,
  no locked clocks: nothing can disable boost through NVML.
- Pascal Tesla (P100): no autoboost switch (NOT_SUPPORTED), application clocks.
- Volta and newer (V100, A100, H100, H200, B200): locked clocks and application
  clocks, energy counter. configure(missing=OLD_DRIVER_MISSING): a driver
  (410) from before nvmlDeviceSetGpuLockedClocks and the event-reasons call.
- `configure(root=False)`: every set/reset call answers NO_PERMISSION.
- `configure(loaded=False)`: nvmlInit fails as on a host without a driver.
- `hide(name)`: an old nvidia-ml-py that lacks the Python function itself.

Readings (clocks, power, temperature, reasons, energy, utilization) are the
device's static values unless a test queues a series with `set_series`;
each read then takes the next value and the last one sticks.
"""
from fake_nvml_state import *  # noqa: F401,F403 (the public API)
from fake_nvml_state import (
    NVMLError, _Handle, _LOCK, _dev, _fail, _initialised, _present,
    _reading, _save, _setter, state)


# --- system ------------------------------------------------------------------

def nvmlInit():
    with _LOCK:
        if not state()["loaded"]:
            _fail(NVML_ERROR_LIBRARY_NOT_FOUND)
        state()["initialised"] += 1
        _save()


def nvmlInitWithFlags(flags):
    nvmlInit()


def nvmlShutdown():
    with _LOCK:
        _initialised()
        state()["initialised"] -= 1
        _save()


def nvmlSystemGetDriverVersion():
    _initialised()
    return state()["driver"]


def nvmlSystemGetCudaDriverVersion():
    _initialised()
    return state()["cuda_driver"]


def nvmlSystemGetCudaDriverVersion_v2():
    return nvmlSystemGetCudaDriverVersion()


def nvmlDeviceGetCount():
    _initialised()
    return len(state()["devices"])


def nvmlDeviceGetHandleByIndex(index):
    _initialised()
    if not 0 <= index < len(state()["devices"]):
        _fail(NVML_ERROR_INVALID_ARGUMENT)
    return _Handle(index)


def nvmlDeviceGetHandleByUUID(uuid):
    _initialised()
    if isinstance(uuid, bytes):
        uuid = uuid.decode()
    for index, device in enumerate(state()["devices"]):
        if device["uuid"] == uuid:
            return _Handle(index)
    _fail(NVML_ERROR_NOT_FOUND)


# --- device queries ----------------------------------------------------------

def nvmlDeviceGetName(handle):
    return _dev(handle)["name"]


def nvmlDeviceGetUUID(handle):
    return _dev(handle)["uuid"]


class _PciInfo(object):
    def __init__(self, bus_id):
        self.busId = bus_id


def nvmlDeviceGetPciInfo(handle):
    return _PciInfo(_dev(handle)["pci_bus_id"])


def nvmlDeviceGetArchitecture(handle):
    return _dev(handle)["arch"]


def nvmlDeviceGetCudaComputeCapability(handle):
    return tuple(_dev(handle)["cc"])


class _Memory(object):
    def __init__(self, total):
        self.total = total
        self.used = total // 100
        self.free = total - self.used


def nvmlDeviceGetMemoryInfo(handle, version=None):
    return _Memory(_dev(handle)["memory_total"])


def _supported(handle, key):
    """The device's pair `key` as NVML returns it (a list); NOT_SUPPORTED
    where the test gave the device none."""
    value = _dev(handle)[key]
    if value is None:
        _fail(NVML_ERROR_NOT_SUPPORTED)
    return list(value)


def nvmlDeviceGetMigMode(handle):
    return _supported(handle, "mig")


def nvmlDeviceGetEccMode(handle):
    return list(_dev(handle)["ecc"])


def nvmlDeviceGetPowerManagementLimit(handle):
    return _dev(handle)["power_limit_mw"]


def nvmlDeviceGetEnforcedPowerLimit(handle):
    return _dev(handle)["power_limit_mw"]


def _effective_graphics(device):
    if device["locked"]:
        return device["locked"][1]
    if device["app"]:
        return device["app"][1]
    if device["autoboost"] is not None and not device["autoboost"][0]:
        return device["default_app"][1]
    return device["max_graphics"]


def nvmlDeviceGetClockInfo(handle, type):
    with _LOCK:
        device = _dev(handle)
        if type in (NVML_CLOCK_GRAPHICS, NVML_CLOCK_SM):
            return _reading(device, "sm_clock", _effective_graphics(device))
        if type == NVML_CLOCK_MEM:
            memory = device["app"][0] if device["app"] \
                else device["max_memory"]
            return _reading(device, "memory_clock", memory)
        _fail(NVML_ERROR_INVALID_ARGUMENT)


def nvmlDeviceGetMaxClockInfo(handle, type):
    device = _dev(handle)
    if type in (NVML_CLOCK_GRAPHICS, NVML_CLOCK_SM):
        return device["max_graphics"]
    if type == NVML_CLOCK_MEM:
        return device["max_memory"]
    _fail(NVML_ERROR_INVALID_ARGUMENT)


def _app_pair(device, which):
    if not device["app_clocks"] or device["default_app"] is None:
        _fail(NVML_ERROR_NOT_SUPPORTED)
    pair = device["default_app"] if which == "default" else (
        device["app"] or device["default_app"])
    return pair


def _app_value(device, type, which):
    memory, graphics = _app_pair(device, which)
    if type in (NVML_CLOCK_GRAPHICS, NVML_CLOCK_SM):
        return graphics
    if type == NVML_CLOCK_MEM:
        return memory
    _fail(NVML_ERROR_INVALID_ARGUMENT)


def nvmlDeviceGetApplicationsClock(handle, type):
    return _app_value(_dev(handle), type, "current")


def nvmlDeviceGetDefaultApplicationsClock(handle, type):
    return _app_value(_dev(handle), type, "default")


def nvmlDeviceGetClock(handle, type, id):
    device = _dev(handle)
    if id == NVML_CLOCK_ID_CURRENT:
        return nvmlDeviceGetClockInfo(handle, type)
    if id == NVML_CLOCK_ID_APP_CLOCK_TARGET:
        return _app_value(device, type, "current")
    if id == NVML_CLOCK_ID_APP_CLOCK_DEFAULT:
        return _app_value(device, type, "default")
    if id == NVML_CLOCK_ID_CUSTOMER_BOOST_MAX:
        return nvmlDeviceGetMaxClockInfo(handle, type)
    _fail(NVML_ERROR_INVALID_ARGUMENT)


def _supported_clocks(handle):
    """{memory MHz: [graphics MHz]} of a device with application clocks."""
    device = _dev(handle)
    if not device["app_clocks"]:
        _fail(NVML_ERROR_NOT_SUPPORTED)
    return device["supported"]


def nvmlDeviceGetSupportedMemoryClocks(handle):
    return sorted((int(k) for k in _supported_clocks(handle)), reverse=True)


def nvmlDeviceGetSupportedGraphicsClocks(handle, memoryClockMHz):
    supported = _supported_clocks(handle)
    if str(memoryClockMHz) not in supported:
        _fail(NVML_ERROR_NOT_FOUND)
    return list(supported[str(memoryClockMHz)])


def nvmlDeviceGetAutoBoostedClocksEnabled(handle):
    return _supported(handle, "autoboost")


def nvmlDeviceGetPowerUsage(handle):
    with _LOCK:
        device = _dev(handle)
        return _reading(device, "power_mw", device["power_mw"])


def nvmlDeviceGetTemperature(handle, sensor):
    with _LOCK:
        device = _dev(handle)
        return _reading(device, "temperature", device["temperature"])


def nvmlDeviceGetTotalEnergyConsumption(handle):
    with _LOCK:
        _present("nvmlDeviceGetTotalEnergyConsumption")
        device = _dev(handle)
        if not device["energy_supported"]:
            _fail(NVML_ERROR_NOT_SUPPORTED)
        return _reading(device, "energy_mj", device["energy_mj"])


def _reasons(name, handle):
    with _LOCK:
        _present(name)
        device = _dev(handle)
        return _reading(device, "reasons", device["reasons"])


def nvmlDeviceGetCurrentClocksEventReasons(handle):
    return _reasons("nvmlDeviceGetCurrentClocksEventReasons", handle)


def nvmlDeviceGetCurrentClocksThrottleReasons(handle):
    return _reasons("nvmlDeviceGetCurrentClocksThrottleReasons", handle)


class _Utilization(object):
    def __init__(self, gpu, memory):
        self.gpu = gpu
        self.memory = memory


def nvmlDeviceGetUtilizationRates(handle):
    with _LOCK:
        device = _dev(handle)
        return _Utilization(_reading(device, "utilization",
                                     device["utilization"]), 50)


# --- set and reset calls -----------------------------------------------------

def nvmlDeviceSetAutoBoostedClocksEnabled(handle, enabled):
    with _LOCK:
        device = _setter("nvmlDeviceSetAutoBoostedClocksEnabled", handle,
                         "autoboost", [enabled])
        device["autoboost"][0] = int(enabled)
        _save()


def nvmlDeviceSetDefaultAutoBoostedClocksEnabled(handle, enabled, flags):
    with _LOCK:
        device = _setter("nvmlDeviceSetDefaultAutoBoostedClocksEnabled",
                         handle, "autoboost", [enabled, flags])
        device["autoboost"][1] = int(enabled)
        _save()


def _clocks_call(name, handle, feature, args, key, valid=None):
    """A clock set (`args`: the clocks, which `valid(device)` checks) or
    reset (no `args`) call: the device's `key` becomes the clocks, or None;
    a call refused as invalid is not recorded as made."""
    with _LOCK:
        device = _setter(name, handle, feature, args)
        if valid is not None and not valid(device):
            state()["calls"].pop()
            _fail(NVML_ERROR_INVALID_ARGUMENT)
        device[key] = list(args) or None
        _save()


def nvmlDeviceSetApplicationsClocks(handle, maxMemClockMHz,
                                    maxGraphicsClockMHz):
    _clocks_call("nvmlDeviceSetApplicationsClocks", handle, "app_clocks",
                 [maxMemClockMHz, maxGraphicsClockMHz], "app",
                 lambda device: maxGraphicsClockMHz in device["supported"]
                 .get(str(maxMemClockMHz), []))


def nvmlDeviceResetApplicationsClocks(handle):
    _clocks_call("nvmlDeviceResetApplicationsClocks", handle, "app_clocks",
                 [], "app")


def nvmlDeviceSetGpuLockedClocks(handle, minGpuClockMHz, maxGpuClockMHz):
    _clocks_call("nvmlDeviceSetGpuLockedClocks", handle, "locked_supported",
                 [minGpuClockMHz, maxGpuClockMHz], "locked",
                 lambda device: 0 < minGpuClockMHz <= maxGpuClockMHz
                 <= device["max_graphics"])


def nvmlDeviceResetGpuLockedClocks(handle):
    _clocks_call("nvmlDeviceResetGpuLockedClocks", handle,
                 "locked_supported", [], "locked")
