"""Framework backends behind one interface, imported lazily by name.

Each backend module provides:
  NAME                      the framework's name
  DEVICES                   the devices it can time ("cpu", "gpu")
  versions(device)          {"framework_version", "cuda", "cudnn", "nccl"},
                            read from the framework at run time
  configure(threads, device, seed)
                            thread pools, autotuning and seeds; called once
                            before anything is built
  prepare(network, batch_size, device, seed, batch=None) -> Session
                            builds the network from harness.networks and a
                            mini-batch on the device (random unless `batch`,
                            a harness.data.Batch, is given)
  effective_threads()       the intra-op thread count the framework uses
  is_out_of_memory(exc)     whether an exception means the device ran out
  math_mode(device)         optional: {"matmul", "conv"}: "fp32" or "tf32",
                            what FP32 layers may run as (picks the MFU peak)

A Session has `parameters` (as the framework counts them), `step()` (one
training iteration; returns the loss as a float once the device has
finished) and `output_shape()` (per-sample output shape of a forward pass).
"""
import importlib

from ..errors import HarnessError

BACKENDS = {
    "pytorch": "harness.backends.pytorch",
    "tensorflow": "harness.backends.tensorflow",
    "mxnet": "harness.backends.mxnet",
    "cntk": "harness.backends.cntk",
}


def load(name):
    """Import the backend for framework `name` (its framework only)."""
    try:
        module = BACKENDS[name]
    except KeyError:
        raise HarnessError("unknown framework {!r}; valid frameworks: {}".format(
            name, ", ".join(sorted(BACKENDS))))
    return importlib.import_module(module)
