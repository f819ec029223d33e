"""Data-parallel training for convergence runs: one module per framework
behind one interface, imported lazily by name (a container only ever
imports its own framework).

Each module provides:
  NAME                   the framework's name
  DEVICES                the devices it can train on ("cpu", "gpu")
  PROCESS_PER_WORKER     True when each worker is its own process (the
                         cell's threads are then shared out among them)
  MECHANISM              {device: how workers run and gradients combine},
                         recorded in every result
  gpu_count()            GPUs the framework sees
  train(plan, data, log) -> Curves
                         trains plan["epochs"] epochs with plan["workers"]
                         workers and the global batch fixed; `data` is a
                         harness.datasets.Loaded (modules that start worker
                         processes reload it there from plan["data"])

Every module builds its model with its backend's `build_model(network)`
and runs the shared epoch loop of harness.parallel.common, so sample order,
batch splitting, timing and evaluation are the same in every framework.
"""
import importlib

from ..errors import HarnessError

PARALLEL = {
    "pytorch": "harness.parallel.pytorch",
    "tensorflow": "harness.parallel.tensorflow",
    "mxnet": "harness.parallel.mxnet",
    "cntk": "harness.parallel.cntk",
}


def load(name):
    """Import the data-parallel module for framework `name`."""
    try:
        module = PARALLEL[name]
    except KeyError:
        raise HarnessError("unknown framework {!r}; valid frameworks: {}".format(
            name, ", ".join(sorted(PARALLEL))))
    return importlib.import_module(module)
