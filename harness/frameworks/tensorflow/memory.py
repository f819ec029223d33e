"""What TensorFlow lets a group worker free between two cells, and what it
still holds after (the backend's release_memory)."""
import inspect

from .. import backends
from .load import _tf

CPU_NOTE = ("TensorFlow counts no CPU memory unless asked before start "
            "(get_memory_info reads 0 there): the process's RSS is what it "
            "holds")
GPU_NOTE = ("TensorFlow never returns GPU memory to the device: its "
            "allocator keeps the most the process has held; current_bytes "
            "is what live tensors use of it")
NO_INFO_NOTE = ("TensorFlow never returns GPU memory to the device, and "
                "this version (before 2.5) cannot say how much it uses")


def _gpu_held(tf, memory_info):
    held = []
    for index in range(len(tf.config.list_logical_devices("GPU"))):
        info = memory_info("GPU:{}".format(index))
        held.append({"index": index, "current_bytes": int(info["current"]),
                     "peak_bytes": int(info["peak"])})
    return held


def _clear_session(tf):
    """Keras's global state (layer names, the graph of TensorFlow 1.x),
    which keeps every model built so far alive, dropped; the call made."""
    clear = tf.keras.backend.clear_session
    try:
        takes = inspect.signature(clear).parameters
    except (TypeError, ValueError):
        takes = {}
    if "free_memory" in takes:
        # Keras 3 would also walk every object the collector tracks: the
        # worker's one collection comes next.
        clear(free_memory=False)
        return "tf.keras.backend.clear_session(free_memory=False)"
    clear()
    return "tf.keras.backend.clear_session()"


def release_memory(device, collect):
    tf = _tf()
    released = [_clear_session(tf)]
    # What clear_session let go, in reference cycles (Keras's layers and
    # models), and what the cells before left.
    collect()
    if device != "gpu":
        return backends.memory_report(released, None, CPU_NOTE)
    memory_info = getattr(tf.config.experimental, "get_memory_info", None)
    if memory_info is None:
        return backends.memory_report(released, None, NO_INFO_NOTE)
    return backends.memory_report(released, {"gpus": _gpu_held(
        tf, memory_info)}, GPU_NOTE)
