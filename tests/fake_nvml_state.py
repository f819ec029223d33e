"""The fake NVML's machine: nvidia-ml-py's constants and error classes, the
GPU presets, and the per-device state (in memory or in the JSON file a
subprocess shares) with the helpers the fake calls check it through.
tests/fake_nvml.py is the module tests inject as `pynvml`; it re-exports
everything public here, so tests use `fake_nvml.configure`,
`fake_nvml.kepler_k80` and so on, never this module.
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
        cls.__module__ = "fake_nvml"
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
    """A `pynvml.py` in `folder` that makes `import pynvml` load
    fake_nvml."""
    path = os.path.join(str(folder), "pynvml.py")
    with open(path, "w") as handle:
        handle.write("import sys, fake_nvml\n"
                     "sys.modules[__name__] = fake_nvml\n")
    return path


def child_env(folder, devices=None, state=None, path_extra=(), **options):
    """(environment, state file) for a subprocess whose `import pynvml`
    loads fake_nvml: a shim in `folder`/shim, then tests/ and `path_extra`
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
    module = _pynvml()
    for name in names:
        if name not in _HIDDEN:
            _HIDDEN[name] = getattr(module, name)
            delattr(module, name)


def _pynvml():
    """The module tests inject as `pynvml`, whose functions hide() removes;
    imported late because it imports this one."""
    import fake_nvml
    return fake_nvml


def unhide():
    module = _pynvml()
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
