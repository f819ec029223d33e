"""What TensorFlow lets a group worker free between two cells, and what it
still holds after (the backend's release_memory)."""
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


def release_memory(device):
    tf = _tf()
    # Keras's global state (layer names, the graph of TensorFlow 1.x) keeps
    # every model built so far alive; Keras 3 also collects the garbage.
    tf.keras.backend.clear_session()
    released = ["tf.keras.backend.clear_session()"]
    if device != "gpu":
        return backends.memory_report(released, None, CPU_NOTE)
    memory_info = getattr(tf.config.experimental, "get_memory_info", None)
    if memory_info is None:
        return backends.memory_report(released, None, NO_INFO_NOTE)
    return backends.memory_report(released, {"gpus": _gpu_held(
        tf, memory_info)}, GPU_NOTE)
