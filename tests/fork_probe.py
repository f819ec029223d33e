"""Run in a framework's venv by tests/harness/test_forkserver.py: what the fork
server (harness.forkserver) finds after importing the framework as it
does (its PRELOAD), then after the framework touched its device or its
thread pools as a cell does. Prints one JSON line:
{"threads", "preload", "frozen", "tracked", "before", "after",
"device_held"}: the thread count after the import (and settle's), the
objects the server froze and those its collector still tracks then,
fork_refusal's answer before and after, and the framework's own device
check after."""
import gc
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(
    __file__))))

from harness import forkserver, threads  # noqa: E402


def touch(framework):
    """What a cell does that a fork server must never do."""
    if framework == "pytorch":
        import torch
        # No GPU here: CUDA's own check stands in for an initialized
        # context; the OpenMP pool is real.
        torch.cuda.is_initialized = lambda: True
        torch.set_num_threads(2)
        (torch.ones(256, 256) @ torch.ones(256, 256)).sum().item()
    elif framework == "jax":
        import jax
        jax.devices()
    elif framework == "tensorflow":
        import tensorflow as tf
        (tf.constant(1.0) + 1.0).numpy()
    elif framework == "mxnet":
        import mxnet as mx
        mx.nd.ones((64, 64)).sum().asscalar()


def main(framework):
    threads.apply(2)
    loaded, frozen = forkserver.make_ready(framework)
    tracked = len(gc.get_objects())
    found = {"threads": forkserver.thread_count(), "preload": loaded,
             "frozen": frozen, "tracked": tracked,
             "before": forkserver.fork_refusal(framework)}
    touch(framework)
    found["after"] = forkserver.fork_refusal(framework)
    found["device_held"] = forkserver.device_held(framework)
    print(json.dumps(found, sort_keys=True))
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main(sys.argv[1])
