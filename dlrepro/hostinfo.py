"""What this host offers: usable CPUs and visible GPUs."""
from harness.provenance import usable_cpus  # noqa: F401 (one definition)


def gpu_count():
    """GPUs NVML can see (0 without a driver or without nvidia-ml-py)."""
    try:
        import pynvml
        pynvml.nvmlInit()
    except Exception:  # no library, no driver: no GPUs
        return 0
    try:
        return pynvml.nvmlDeviceGetCount()
    finally:
        pynvml.nvmlShutdown()
