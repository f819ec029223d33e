"""Run in a framework's CPU venv: its backend's release_memory("gpu",
collect) with the framework's GPU calls and the worker's collection
replaced by fakes that record their calls (no GPU here;
tests/harness/test_release_memory.py), and the report printed as JSON with the
fakes' calls.

    python tests/release_gpu_probe.py FRAMEWORK
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(
    __file__))))

from harness import frameworks  # noqa: E402

CALLS = []


def fake_pytorch():
    import torch
    torch.cuda.device_count = lambda: 2
    torch.cuda.empty_cache = lambda: CALLS.append("empty_cache")
    torch.cuda.memory_allocated = lambda index: 1000 + index
    torch.cuda.memory_reserved = lambda index: 3000 + index


def fake_tensorflow():
    import tensorflow as tf
    listing = tf.config.list_logical_devices
    tf.config.list_logical_devices = lambda kind=None: (
        ["gpu0"] if kind == "GPU" else listing(kind))

    def memory_info(name):
        CALLS.append(name)
        return {"current": 5, "peak": 7}
    tf.config.experimental.get_memory_info = memory_info


def fake_jax():
    import jax
    devices = jax.devices

    class Gpu(object):
        def memory_stats(self):
            return {"bytes_in_use": 11, "peak_bytes_in_use": 13,
                    "bytes_limit": 17, "num_allocs": 3}
    jax.devices = lambda backend=None: (
        [Gpu(), Gpu()] if backend == "gpu" else devices(backend))


def fake_mxnet():
    import mxnet as mx
    mx.Context.empty_cache = lambda self: CALLS.append(str(self))
    mx.context.gpu_memory_info = lambda index: (100 + index, 200)


def main(framework):
    globals()["fake_" + framework]()
    # The worker's collection, recorded: where it comes among the calls.
    report = frameworks.load(framework).release_memory(
        "gpu", lambda: CALLS.append("collect"))
    print(json.dumps({"report": report, "calls": CALLS}))


if __name__ == "__main__":
    main(sys.argv[1])
