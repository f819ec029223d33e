"""What JAX lets a group worker free between two cells, and what it still
holds after (the backend's release_memory).

jax.clear_caches() is not called: a cell's jitted step is its own function
(step.make_train_step), whose compiled code JAX drops with it, so the
caches hold only what every cell shares (the small operations that build
and initialise a model); clearing them made each later cell compile those
again, 5 s more a cell on a loaded 2-core CPU (fcn5, JAX 0.10.2), for
memory that JAX's preallocated pool would not give back anyway."""
from .. import backends
from .load import _jax

CPU_NOTE = ("live_arrays are the arrays JAX still references; XLA's CPU "
            "allocator counts nothing: the process's RSS is what it holds; "
            "JAX's compilation caches are kept (what the cells share)")
GPU_NOTE = ("JAX preallocates most of the GPU's memory when its backend "
            "starts (XLA_PYTHON_CLIENT_PREALLOCATE) and keeps it until the "
            "process ends; bytes_in_use is what live buffers use of it")
# What a device's memory_stats() says, where it says it.
STATS = ("bytes_in_use", "peak_bytes_in_use", "bytes_reserved",
         "bytes_limit")


def _live(jax):
    arrays = jax.live_arrays() if hasattr(jax, "live_arrays") else None
    if arrays is None:
        return {"live_arrays": None, "live_bytes": None}
    return {"live_arrays": len(arrays),
            "live_bytes": int(sum(a.nbytes for a in arrays))}


def _device_stats(jax):
    held = []
    for index, device in enumerate(jax.devices("gpu")):
        stats = getattr(device, "memory_stats", lambda: None)() or {}
        held.append(dict([("index", index)] + [
            (name, int(stats[name])) for name in STATS if name in stats]))
    return held


def release_memory(device, collect):
    jax = _jax()
    # An array the cells before left in a reference cycle stays live until
    # the worker's collection.
    collect()
    released = []
    held = _live(jax)
    if device != "gpu":
        return backends.memory_report(released, held, CPU_NOTE)
    held["gpus"] = _device_stats(jax)
    return backends.memory_report(released, held, GPU_NOTE)
