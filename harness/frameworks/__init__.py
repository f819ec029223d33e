"""One package per framework, loaded by name; importing this package (or a
framework's package) loads no framework, so a container or venv only ever
imports its own.

harness/frameworks/<name>/backend.py: model translation and single-process
training, for throughput cells. It provides:
  NAME                      the framework's name
  DEVICES                   the devices it can time ("cpu", "gpu")
  versions(device)          {"framework_version", "cuda", "cudnn", "nccl"},
                            read from the framework at run time
  configure(threads, device, seed)
                            thread pools, autotuning and seeds; called once
                            before anything is built; the first call that
                            imports the framework
  prepare(network, batch_size, device, seed, batch=None) -> Session
                            builds the network from harness.networks and a
                            mini-batch on the device (random unless `batch`,
                            a harness.data.Batch, is given); the weights and
                            the batch depend on `seed` alone, so two calls
                            with one seed in one process train identically
  build_model(network, ...) the model alone, initialised as described (the
                            data-parallel module trains it)
  effective_threads()       the intra-op thread count the framework uses
  gpu_count()               GPUs the framework sees
  is_out_of_memory(exc)     whether an exception means the DEVICE (the GPU)
                            ran out of memory: status `oom`. A failed host
                            allocation (Python's MemoryError, PyTorch's
                            DefaultCPUAllocator, TensorFlow's cpu allocator,
                            std::bad_alloc) is status `error`: the machine
                            ran short, which says nothing about whether the
                            cell fits the device it measures. Decided from
                            the exception's text (harness.errors.
                            device_out_of_memory) without importing the
                            framework, which may be what failed to import.
  math_mode(device)         optional: {"matmul", "conv"}: "fp32" or "tf32",
                            what FP32 layers may run as (picks the MFU peak)

A Session has `parameters` (as the framework counts them), `step()` (one
training iteration; returns the loss as a float once the device has
finished) and `output_shape()` (per-sample output shape of a forward pass).

harness/frameworks/<name>/parallel.py: data-parallel training for
convergence runs. It provides:
  NAME                   the framework's name
  DEVICES                the devices it can train on ("cpu", "gpu")
  PROCESS_PER_WORKER     True when each worker is its own process (the
                         cell's threads are then shared out among them)
  MECHANISM              {device: how workers run and gradients combine},
                         recorded in every result
  gpu_count()            GPUs the framework sees (NAME, DEVICES and this
                         are the backend's)
  train(plan, data, log) -> Curves
                         trains plan["epochs"] epochs with plan["workers"]
                         workers and the global batch fixed; `data` is a
                         harness.datasets.Loaded (modules that start worker
                         processes reload it there from plan["data"])

Every parallel module builds its model with its backend's `build_model`
and runs the shared epoch loop of harness.frameworks.dataparallel, so
sample order, batch splitting, timing and evaluation are the same in every
framework; what the backends share is in harness.frameworks.backends.
"""
import importlib

from ..errors import HarnessError
from ..spec import FRAMEWORKS

# Defined in harness.spec, which validates cells and must not import this
# package (the host imports harness.spec).
NAMES = FRAMEWORKS
PARTS = ("backend", "parallel")


def load(name, part="backend"):
    """Import framework `name`'s `part` module (it loads the framework
    itself only when first used)."""
    if name not in NAMES:
        raise HarnessError("unknown framework {!r}; valid frameworks: {}".format(
            name, ", ".join(NAMES)))
    if part not in PARTS:
        raise HarnessError("unknown part {!r} of a framework; valid parts: "
                           "{}".format(part, ", ".join(PARTS)))
    return importlib.import_module("{}.{}.{}".format(__name__, name, part))
