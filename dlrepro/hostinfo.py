"""What this host offers: usable CPUs and visible GPUs."""
import os


def usable_cpus():
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


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
