"""NVML through nvidia-ml-py (`import pynvml`), when present.

One wrapper so that every call fails the same way: NvmlCallError carrying
NVML's own error name (NOT_SUPPORTED, NO_PERMISSION, FUNCTION_NOT_FOUND,
...), whether the driver lacks the function (NVML_ERROR_FUNCTION_NOT_FOUND)
or the installed nvidia-ml-py is too old to have the Python function at all.
Also: which NVML devices the cell's CUDA process sees, and NVML's view of
each (the result's environment.gpus).
"""
import os

from . import cudalibs


class NvmlCallError(Exception):
    """An NVML call failed; `name` is NVML's error name without the
    NVML_ERROR_ prefix."""

    def __init__(self, call, name):
        Exception.__init__(self, "{}: {}".format(call, name))
        self.call = call
        self.name = name


def load_module():
    """The pynvml module, or None when nvidia-ml-py is not installed."""
    try:
        # nvidia-ml-py is optional in the images; imported only for GPU cells.
        import pynvml
    except ImportError:
        return None
    return pynvml


def _text(value):
    # Older nvidia-ml-py returns bytes, newer str.
    return value.decode("utf-8", "replace") if isinstance(value, bytes) \
        else value


# Sessions opened and not yet closed in this process: a fork server
# (harness.forkserver) never forks while it holds one.
_open = [0]


def sessions_open():
    """NVML sessions this process holds now."""
    return _open[0]


class Nvml(object):
    """An initialised NVML library; `open` returns (Nvml or None, reason)."""

    def __init__(self, module):
        self.module = module
        self._names = None

    @classmethod
    def open(cls, module=None):
        module = module if module is not None else load_module()
        if module is None:
            return None, "nvidia-ml-py (pynvml) is not installed"
        nvml = cls(module)
        try:
            nvml.call("nvmlInit")
        except NvmlCallError as exc:
            return None, "NVML could not start ({})".format(exc.name)
        _open[0] += 1
        return nvml, None

    def close(self):
        _open[0] = max(0, _open[0] - 1)
        try:
            self.call("nvmlShutdown")
        except NvmlCallError:
            pass

    def const(self, name, default):
        return getattr(self.module, name, default)

    def error_name(self, exc):
        if self._names is None:
            self._names = dict(
                (getattr(self.module, n), n[len("NVML_ERROR_"):])
                for n in dir(self.module) if n.startswith("NVML_ERROR_"))
        value = getattr(exc, "value", None)
        return self._names.get(value, "ERROR_{}".format(value))

    def call(self, name, *args):
        """module.name(*args), NVML errors raised as NvmlCallError."""
        fn = getattr(self.module, name, None)
        if fn is None:
            raise NvmlCallError(name, "FUNCTION_NOT_FOUND")
        error_type = getattr(self.module, "NVMLError", None) or Exception
        try:
            return fn(*args)
        except error_type as exc:
            raise NvmlCallError(name, self.error_name(exc))

    def try_call(self, name, *args):
        """(value, None) or (None, error name)."""
        try:
            return self.call(name, *args), None
        except NvmlCallError as exc:
            return None, exc.name


def visible_indices(nvml, environ=None):
    """NVML indices of the GPUs this process's CUDA sees, in CUDA's order,
    and a note when the mapping is a guess.

    CUDA_VISIBLE_DEVICES holds indices or GPU-UUID prefixes. Indices follow
    CUDA's order, which is NVML's (PCI bus) order only with
    CUDA_DEVICE_ORDER=PCI_BUS_ID, hence the note otherwise. In a container
    the runtime already exposes only the chosen GPUs to NVML.
    """
    environ = os.environ if environ is None else environ
    count, error = nvml.try_call("nvmlDeviceGetCount")
    if error is not None:
        return [], "nvmlDeviceGetCount failed ({})".format(error)
    visible = environ.get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        return list(range(count)), None
    entries = [e.strip() for e in visible.split(",") if e.strip()]
    indices = []
    uuids = None
    note = None
    for entry in entries:
        if entry.isdigit():
            index = int(entry)
            if index >= count:
                break  # CUDA ignores this entry and every one after it
            indices.append(index)
            if environ.get("CUDA_DEVICE_ORDER") != "PCI_BUS_ID" and count > 1:
                note = ("CUDA_VISIBLE_DEVICES by index without "
                        "CUDA_DEVICE_ORDER=PCI_BUS_ID: CUDA's order may "
                        "differ from NVML's")
        elif entry.startswith("GPU-"):
            if uuids is None:
                uuids = [_text(nvml.try_call(
                    "nvmlDeviceGetUUID",
                    nvml.call("nvmlDeviceGetHandleByIndex", i))[0] or "")
                    for i in range(count)]
            matches = [i for i, u in enumerate(uuids) if u.startswith(entry)]
            if len(matches) != 1:
                break
            indices.append(matches[0])
        else:
            # MIG-... or anything else: not a whole GPU that NVML can map.
            return [], ("CUDA_VISIBLE_DEVICES={} names no whole GPU that "
                        "NVML can map (MIG instance?)".format(visible))
    return indices, note


def _value(nvml, name, *args):
    value, error = nvml.try_call(name, *args)
    return value if error is None else None


def device_info(nvml, index, driver=None, cuda_driver=None):
    """NVML's view of one GPU: one entry of the result's environment.gpus."""
    handle = nvml.call("nvmlDeviceGetHandleByIndex", index)
    capability = _value(nvml, "nvmlDeviceGetCudaComputeCapability", handle)
    memory = _value(nvml, "nvmlDeviceGetMemoryInfo", handle)
    pci = _value(nvml, "nvmlDeviceGetPciInfo", handle)
    mig = _value(nvml, "nvmlDeviceGetMigMode", handle)
    ecc = _value(nvml, "nvmlDeviceGetEccMode", handle)
    limit = _value(nvml, "nvmlDeviceGetEnforcedPowerLimit", handle)
    graphics = nvml.const("NVML_CLOCK_GRAPHICS", 0)
    memory_clock = nvml.const("NVML_CLOCK_MEM", 2)
    return handle, {
        "source": "nvml",
        "index": index,
        "name": _text(_value(nvml, "nvmlDeviceGetName", handle)),
        "uuid": _text(_value(nvml, "nvmlDeviceGetUUID", handle)),
        "compute_capability": "{}.{}".format(*capability)
        if capability else None,
        "memory_total_bytes": int(memory.total) if memory is not None
        else None,
        "pci_bus_id": _text(getattr(pci, "busId", None)),
        "driver_version": driver,
        "cuda_driver_version": cuda_driver,
        "power_limit_w": limit / 1000.0 if limit is not None else None,
        "max_sm_clock_mhz": _value(nvml, "nvmlDeviceGetMaxClockInfo", handle,
                                   graphics),
        "max_memory_clock_mhz": _value(nvml, "nvmlDeviceGetMaxClockInfo",
                                       handle, memory_clock),
        "mig_enabled": bool(mig[0]) if mig is not None else None,
        "ecc_enabled": bool(ecc[0]) if ecc is not None else None,
    }


def system_versions(nvml):
    """(driver version, CUDA version the driver supports) as strings."""
    driver = _text(_value(nvml, "nvmlSystemGetDriverVersion"))
    cuda = _value(nvml, "nvmlSystemGetCudaDriverVersion")
    # NVML encodes CUDA 12.4 as 12040, as the CUDA runtime does.
    cuda = cudalibs.format_cuda(cuda) if cuda else None
    return driver, cuda
