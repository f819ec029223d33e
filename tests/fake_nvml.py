"""A fake `pynvml` (nvidia-ml-py) for tests: the same function names,
constants and error classes as nvidia-ml-py 13.615.71, over per-device state
that behaves like the GPU generations the clock policy must handle.
Why this is long: one fake for every NVML call the harness makes, each with
the state change and the errors of the real library.

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
import copy
import json
import os
import string
import sys
import threading

# --- constants (values as in nvidia-ml-py) -----------------------------------

NVML_SUCCESS = 0
NVML_ERROR_UNINITIALIZED = 1
NVML_ERROR_INVALID_ARGUMENT = 2
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_NO_PERMISSION = 4
NVML_ERROR_ALREADY_INITIALIZED = 5
NVML_ERROR_NOT_FOUND = 6
NVML_ERROR_INSUFFICIENT_SIZE = 7
NVML_ERROR_DRIVER_NOT_LOADED = 9
NVML_ERROR_LIBRARY_NOT_FOUND = 12
NVML_ERROR_FUNCTION_NOT_FOUND = 13
NVML_ERROR_GPU_IS_LOST = 15
NVML_ERROR_UNKNOWN = 999

NVML_FEATURE_DISABLED = 0
NVML_FEATURE_ENABLED = 1

NVML_CLOCK_GRAPHICS = 0
NVML_CLOCK_SM = 1
NVML_CLOCK_MEM = 2
NVML_CLOCK_VIDEO = 3

NVML_CLOCK_ID_CURRENT = 0
NVML_CLOCK_ID_APP_CLOCK_TARGET = 1
NVML_CLOCK_ID_APP_CLOCK_DEFAULT = 2
NVML_CLOCK_ID_CUSTOMER_BOOST_MAX = 3

NVML_TEMPERATURE_GPU = 0

NVML_DEVICE_ARCH_KEPLER = 2
NVML_DEVICE_ARCH_MAXWELL = 3
NVML_DEVICE_ARCH_PASCAL = 4
NVML_DEVICE_ARCH_VOLTA = 5
NVML_DEVICE_ARCH_TURING = 6
NVML_DEVICE_ARCH_AMPERE = 7
NVML_DEVICE_ARCH_ADA = 8
NVML_DEVICE_ARCH_HOPPER = 9
NVML_DEVICE_ARCH_BLACKWELL = 10

nvmlClocksEventReasonGpuIdle = 0x1
nvmlClocksEventReasonApplicationsClocksSetting = 0x2
nvmlClocksEventReasonSwPowerCap = 0x4
nvmlClocksEventReasonHwSlowdown = 0x8
nvmlClocksEventReasonSyncBoost = 0x10
nvmlClocksEventReasonSwThermalSlowdown = 0x20
nvmlClocksEventReasonHwThermalSlowdown = 0x40
nvmlClocksEventReasonHwPowerBrakeSlowdown = 0x80
nvmlClocksThrottleReasonSwPowerCap = 0x4
nvmlClocksThrottleReasonSwThermalSlowdown = 0x20


# --- errors: the same class scheme as nvidia-ml-py ---------------------------

class NVMLError(Exception):
    _valClassMapping = dict()

    def __new__(typ, value):
        if typ == NVMLError:
            typ = NVMLError._valClassMapping.get(value, typ)
        obj = Exception.__new__(typ)
        obj.value = value
        return obj

    def __str__(self):
        return "NVML error {}".format(self.value)

    def __eq__(self, other):
        return self.value == other.value

    __hash__ = Exception.__hash__


def _make_error_classes():
    module = sys.modules[__name__]
    for name in [n for n in dir(module) if n.startswith("NVML_ERROR_")]:
        class_name = "NVMLError_" + string.capwords(
            name.replace("NVML_ERROR_", ""), "_").replace("_", "")
        value = getattr(module, name)

        def gen_new(val):
            def new(typ, *args):
                return NVMLError.__new__(typ, val)
            return new
        cls = type(class_name, (NVMLError,), {"__new__": gen_new(value)})
        cls.__module__ = __name__
        setattr(module, class_name, cls)
        NVMLError._valClassMapping[value] = cls


_make_error_classes()


# --- device presets ----------------------------------------------------------

def _clock_list(top, bottom, step, extra=()):
    return sorted(set(range(bottom, top + 1, step)) | {top} | set(extra),
                  reverse=True)


def _device(name, arch, cc, max_graphics, max_memory, default_app,
            supported, autoboost=None, app_clocks=True, locked=False,
            energy=False, memory_gib=16, power_w=250, mig=None, **extra):
    device = {
        "name": name, "arch": arch, "cc": list(cc),
        "memory_total": memory_gib * 2 ** 30,
        "max_graphics": max_graphics, "max_memory": max_memory,
        "default_app": list(default_app) if default_app else None,
        "supported": dict((str(k), v) for k, v in supported.items()),
        "app": None,                 # [mem, graphics] once set
        "autoboost": autoboost,      # [enabled, default] or None: no switch
        "app_clocks": app_clocks,    # settable application clocks
        "locked_supported": locked,
        "locked": None,              # [min, max] once set
        "energy_supported": energy,
        "mig": mig, "ecc": [1, 1],
        "power_limit_mw": power_w * 1000,
        "power_mw": int(power_w * 1000 * 0.8), "temperature": 60,
        "reasons": 0, "energy_mj": 1000000, "utilization": 97,
        "series": {},
        "pci_bus_id": "00000000:00:00.0", "uuid": None,
    }
    device.update(extra)
    return device


K80_CLOCKS = [875, 862, 849, 836, 823, 810, 797, 784, 771, 758, 745, 732, 719,
              705, 692, 679, 666, 653, 640, 627, 614, 601, 588, 575, 562]


def kepler_k80(**extra):
    return _device("Tesla K80", NVML_DEVICE_ARCH_KEPLER, (3, 7), 875, 2505,
                   (2505, 562), {2505: K80_CLOCKS, 324: [324]},
                   autoboost=[1, 1], memory_gib=12, power_w=149, **extra)


def geforce_gtx980(**extra):
    return _device("GeForce GTX 980", NVML_DEVICE_ARCH_MAXWELL, (5, 2), 1392,
                   3505, None, {}, app_clocks=False, memory_gib=4,
                   power_w=180, **extra)


def geforce_gtx1080(**extra):
    return _device("GeForce GTX 1080", NVML_DEVICE_ARCH_PASCAL, (6, 1), 1911,
                   5005, None, {}, app_clocks=False, memory_gib=8,
                   power_w=180, **extra)


def pascal_p100(**extra):
    return _device("Tesla P100-SXM2-16GB", NVML_DEVICE_ARCH_PASCAL, (6, 0),
                   1480, 715, (715, 1328),
                   {715: _clock_list(1480, 544, 13, (1328,))}, power_w=300,
                   **extra)


def volta_v100(**extra):
    return _device("Tesla V100-SXM2-16GB", NVML_DEVICE_ARCH_VOLTA, (7, 0),
                   1530, 877, (877, 1312),
                   {877: _clock_list(1530, 135, 7, (1312,))}, locked=True,
                   energy=True, power_w=300, **extra)


def ampere_a100(**extra):
    return _device("NVIDIA A100-SXM4-40GB", NVML_DEVICE_ARCH_AMPERE, (8, 0),
                   1410, 1215, (1215, 1095),
                   {1215: _clock_list(1410, 210, 15, (1095,))}, locked=True,
                   energy=True, memory_gib=40, power_w=400, mig=[0, 0],
                   **extra)


def hopper_h100(**extra):
    # The default application clock of Hopper boards is the maximum clock,
    # so "base" has to come from the datasheet table.
    return _device("NVIDIA H100 80GB HBM3", NVML_DEVICE_ARCH_HOPPER, (9, 0),
                   1980, 2619, (2619, 1980),
                   {2619: _clock_list(1980, 345, 15, (1590,))}, locked=True,
                   energy=True, memory_gib=80, power_w=700, mig=[0, 0],
                   **extra)


def hopper_h200(**extra):
    return _device("NVIDIA H200", NVML_DEVICE_ARCH_HOPPER, (9, 0), 1980, 3201,
                   (3201, 1980), {3201: _clock_list(1980, 345, 15, (1590,))},
                   locked=True, energy=True, memory_gib=141, power_w=700,
                   mig=[0, 0], **extra)


def blackwell_b200(**extra):
    return _device("NVIDIA B200", NVML_DEVICE_ARCH_BLACKWELL, (10, 0), 1965,
                   3996, (3996, 1965),
                   {3996: _clock_list(1965, 345, 15, (1500,))}, locked=True,
                   energy=True, memory_gib=180, power_w=1000, mig=[0, 0],
                   **extra)


# Functions a driver older than R418 (where locked clocks and the event-reason
# call appeared; the event-reason name arrived in R535) does not export.
OLD_DRIVER_MISSING = ("nvmlDeviceSetGpuLockedClocks",
                      "nvmlDeviceResetGpuLockedClocks",
                      "nvmlDeviceGetCurrentClocksEventReasons",
                      "nvmlDeviceGetTotalEnergyConsumption")
KEPLER_DRIVER_MISSING = ("nvmlDeviceGetCurrentClocksEventReasons",)


# --- state -------------------------------------------------------------------

_LOCK = threading.RLock()
_STATE = None
_PATH = os.environ.get("FAKE_NVML_STATE")
_HIDDEN = {}


def configure(devices, driver="580.65.06", cuda_driver=13000, root=True,
              missing=(), loaded=True, path=None):
    """Install a fresh fake machine; with `path`, keep its state in that file
    (what a subprocess given FAKE_NVML_STATE=path will see)."""
    global _STATE, _PATH
    devices = [copy.deepcopy(d) for d in devices]
    for index, device in enumerate(devices):
        device.setdefault("uuid", None)
        if not device["uuid"]:
            device["uuid"] = "GPU-{:08x}-fake-{:04d}-0000-{:012d}".format(
                0xdeadbeef, index, index)
        device["pci_bus_id"] = "00000000:{:02X}:00.0".format(index + 4)
    _STATE = {"devices": devices, "driver": driver,
              "cuda_driver": cuda_driver, "root": root,
              "missing": list(missing), "loaded": loaded,
              "initialised": 0, "calls": []}
    _PATH = path
    unhide()
    _save()
    return _STATE


def write_shim(folder):
    """A `pynvml.py` in `folder` that makes `import pynvml` load this
    module."""
    path = os.path.join(str(folder), "pynvml.py")
    with open(path, "w") as handle:
        handle.write("import sys, fake_nvml\n"
                     "sys.modules[__name__] = fake_nvml\n")
    return path


def child_env(folder, devices=None, state=None, path_extra=(), **options):
    """(environment, state file) for a subprocess whose `import pynvml`
    loads this module: a shim in `folder`/shim, then tests/ and `path_extra`
    on PYTHONPATH. With `devices`, a fresh fake machine (configure(devices,
    **options)) keeps its state in `state` (default `folder`/fake-nvml.json),
    which FAKE_NVML_STATE names; `state` alone names an existing one."""
    shim = os.path.join(str(folder), "shim")
    if not os.path.isdir(shim):
        os.makedirs(shim)
    write_shim(shim)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [shim, os.path.dirname(os.path.abspath(__file__))] +
        [str(p) for p in path_extra])
    if devices is not None:
        state = state or os.path.join(str(folder), "fake-nvml.json")
        configure(devices, path=str(state), **options)
    if state is not None:
        env["FAKE_NVML_STATE"] = str(state)
    return env, state


def use_file(path):
    """Read the state a subprocess left in `path` and keep using that file."""
    global _STATE, _PATH
    with open(path) as handle:
        _STATE = json.load(handle)
    _PATH = path
    return _STATE


def state():
    global _STATE
    with _LOCK:
        if _STATE is None:
            if _PATH and os.path.exists(_PATH):
                with open(_PATH) as handle:
                    _STATE = json.load(handle)
            else:
                raise RuntimeError("fake_nvml: call configure() first")
        return _STATE


def device_state(index):
    return state()["devices"][index]


def calls():
    """The set/reset calls made so far: [name, device index, args]."""
    return state()["calls"]


def set_series(index, key, values):
    """Queue readings for device `index`: key is one of power_mw,
    temperature, reasons, energy_mj, sm_clock, memory_clock, utilization."""
    with _LOCK:
        state()["devices"][index]["series"][key] = list(values)
        _save()


def hide(*names):
    """Simulate an older nvidia-ml-py without these functions
    (AttributeError)."""
    module = sys.modules[__name__]
    for name in names:
        if name not in _HIDDEN:
            _HIDDEN[name] = getattr(module, name)
            delattr(module, name)


def unhide():
    module = sys.modules[__name__]
    for name, fn in list(_HIDDEN.items()):
        setattr(module, name, fn)
        del _HIDDEN[name]


def _save():
    if not _PATH or _STATE is None:
        return
    tmp = "{}.{}.tmp".format(_PATH, os.getpid())
    with open(tmp, "w") as handle:
        json.dump(_STATE, handle, sort_keys=True)
    os.replace(tmp, _PATH)


def _fail(code):
    raise NVMLError(code)


def _present(name):
    if name in state()["missing"]:
        _fail(NVML_ERROR_FUNCTION_NOT_FOUND)


def _initialised():
    if not state()["initialised"]:
        _fail(NVML_ERROR_UNINITIALIZED)


class _Handle(object):
    def __init__(self, index):
        self.index = index

    def __repr__(self):
        return "<fake nvmlDevice {}>".format(self.index)


def _dev(handle):
    _initialised()
    devices = state()["devices"]
    if not isinstance(handle, _Handle) or not 0 <= handle.index < len(devices):
        _fail(NVML_ERROR_INVALID_ARGUMENT)
    return devices[handle.index]


def _reading(device, key, default):
    series = device["series"].get(key)
    if series:
        value = series.pop(0) if len(series) > 1 else series[0]
        _save()
        return value
    return default


def _setter(name, handle, feature, args):
    """Common checks of every set/reset call, in NVML's order (the device,
    whether it has `feature`, permission), then the call recorded with its
    `args`; returns the device."""
    _present(name)
    device = _dev(handle)
    if not device[feature]:  # None or False: the board lacks it
        _fail(NVML_ERROR_NOT_SUPPORTED)
    if not state()["root"]:
        _fail(NVML_ERROR_NO_PERMISSION)
    state()["calls"].append([name, handle.index, list(args)])
    return device


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


def nvmlDeviceGetMigMode(handle):
    device = _dev(handle)
    if device["mig"] is None:
        _fail(NVML_ERROR_NOT_SUPPORTED)
    return list(device["mig"])


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


def nvmlDeviceGetSupportedMemoryClocks(handle):
    device = _dev(handle)
    if not device["app_clocks"]:
        _fail(NVML_ERROR_NOT_SUPPORTED)
    return sorted((int(k) for k in device["supported"]), reverse=True)


def nvmlDeviceGetSupportedGraphicsClocks(handle, memoryClockMHz):
    device = _dev(handle)
    if not device["app_clocks"]:
        _fail(NVML_ERROR_NOT_SUPPORTED)
    clocks = device["supported"].get(str(memoryClockMHz))
    if clocks is None:
        _fail(NVML_ERROR_NOT_FOUND)
    return list(clocks)


def nvmlDeviceGetAutoBoostedClocksEnabled(handle):
    device = _dev(handle)
    if device["autoboost"] is None:
        _fail(NVML_ERROR_NOT_SUPPORTED)
    return list(device["autoboost"])


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


def nvmlDeviceSetApplicationsClocks(handle, maxMemClockMHz,
                                    maxGraphicsClockMHz):
    with _LOCK:
        device = _setter("nvmlDeviceSetApplicationsClocks", handle,
                         "app_clocks", [maxMemClockMHz, maxGraphicsClockMHz])
        allowed = device["supported"].get(str(maxMemClockMHz), [])
        if maxGraphicsClockMHz not in allowed:
            state()["calls"].pop()
            _fail(NVML_ERROR_INVALID_ARGUMENT)
        device["app"] = [maxMemClockMHz, maxGraphicsClockMHz]
        _save()


def nvmlDeviceResetApplicationsClocks(handle):
    with _LOCK:
        device = _setter("nvmlDeviceResetApplicationsClocks", handle,
                         "app_clocks", [])
        device["app"] = None
        _save()


def nvmlDeviceSetGpuLockedClocks(handle, minGpuClockMHz, maxGpuClockMHz):
    with _LOCK:
        device = _setter("nvmlDeviceSetGpuLockedClocks", handle,
                         "locked_supported", [minGpuClockMHz, maxGpuClockMHz])
        if not 0 < minGpuClockMHz <= maxGpuClockMHz <= device["max_graphics"]:
            state()["calls"].pop()
            _fail(NVML_ERROR_INVALID_ARGUMENT)
        device["locked"] = [minGpuClockMHz, maxGpuClockMHz]
        _save()


def nvmlDeviceResetGpuLockedClocks(handle):
    with _LOCK:
        device = _setter("nvmlDeviceResetGpuLockedClocks", handle,
                         "locked_supported", [])
        device["locked"] = None
        _save()
