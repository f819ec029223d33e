"""What this host offers: usable CPUs and visible GPUs."""
from harness.provenance import usable_cpus  # noqa: F401 (one definition)


def gpus():
    """NVML's view of each GPU of this host (index, name,
    compute_capability, driver_version, ...); [] without a driver or
    without nvidia-ml-py. Every GPU, as a container runtime may be given
    any of them."""
    from harness.gpu import nvml as nvml_mod
    try:
        nvml, _reason = nvml_mod.Nvml.open()
    except Exception:  # a broken library is no GPU
        return []
    if nvml is None:
        return []
    try:
        driver, cuda = nvml_mod.system_versions(nvml)
        count = nvml.call("nvmlDeviceGetCount")
        return [nvml_mod.device_info(nvml, index, driver, cuda)[1]
                for index in range(count)]
    except Exception:  # NVML answered nvmlInit but not the device calls
        return []
    finally:
        nvml.close()


def gpu_count():
    """GPUs NVML can see (0 without a driver or without nvidia-ml-py)."""
    return len(gpus())
