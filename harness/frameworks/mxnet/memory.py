"""What MXNet lets a group worker free between two cells, and what it still
holds after (the backend's release_memory)."""
from .. import backends
from .load import _mx

CPU_NOTE = ("MXNet counts no CPU memory: the process's RSS is what it holds")
GPU_NOTE = ("Context.empty_cache() returned MXNet's pooled GPU memory to the "
            "device; gpu_memory_info reads the whole device (every process "
            "on it), not this process alone")
NO_INFO_NOTE = ("Context.empty_cache() returned MXNet's pooled GPU memory to "
                "the device where this version has it; this MXNet has no "
                "gpu_memory_info to say what is in use")
# A throughput cell trains on mx.gpu(0) (the backend's one device).
GPU = 0


def _gpu_held(mx):
    free, total = mx.context.gpu_memory_info(GPU)
    return [{"index": GPU, "device_free_bytes": int(free),
             "device_total_bytes": int(total)}]


def release_memory(device, collect):
    mx = _mx()
    # Arrays the cells before left in reference cycles are dropped by the
    # worker's collection, and freed only once the engine's pending
    # operations on them have run.
    collect()
    mx.nd.waitall()
    released = ["mx.nd.waitall()"]
    if device != "gpu":
        return backends.memory_report(released, None, CPU_NOTE)
    context = mx.gpu(GPU)
    if hasattr(context, "empty_cache"):
        context.empty_cache()
        released.append("mx.gpu({}).empty_cache()".format(GPU))
    if not hasattr(mx.context, "gpu_memory_info"):
        return backends.memory_report(released, None, NO_INFO_NOTE)
    return backends.memory_report(released, {"gpus": _gpu_held(mx)},
                                  GPU_NOTE)
