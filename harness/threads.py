"""Constrain every thread pool a framework may use to the cell's count.

The variables are read when the numeric libraries load, so `apply` runs
before any backend imports its framework; backends then also call their
framework's own setting (torch.set_num_threads and friends).
"""
import os

THREAD_ENV_VARS = (
    "OMP_NUM_THREADS",          # OpenMP (PyTorch, MXNet, oneDNN)
    # A cap on every OpenMP team, also those a library sizes itself (CNTK's
    # MKL-ML forks teams of all cores whatever OMP_NUM_THREADS says).
    "OMP_THREAD_LIMIT",
    "MKL_NUM_THREADS",          # Intel MKL
    "OPENBLAS_NUM_THREADS",     # OpenBLAS (MXNet, numpy)
    "TF_NUM_INTRAOP_THREADS",   # TensorFlow
    "TF_NUM_INTEROP_THREADS",
    "MXNET_CPU_WORKER_NTHREADS",
    "MXNET_OMP_MAX_THREADS",
)
# Pools of workers that each run an OpenMP team: one worker, or N workers
# could each run an N-thread team, N * N threads for a cell that asked for N.
SINGLE_WORKER_VARS = ("MXNET_CPU_WORKER_NTHREADS",)


def apply(threads, environ=None):
    """Set every thread variable to `threads` (None leaves them alone)."""
    environ = os.environ if environ is None else environ
    if threads is None:
        return
    for name in THREAD_ENV_VARS:
        environ[name] = "1" if name in SINGLE_WORKER_VARS else str(threads)


def snapshot(environ=None):
    environ = os.environ if environ is None else environ
    return dict((name, environ.get(name)) for name in THREAD_ENV_VARS)


def count(environ=None):
    """The cell's thread count as `apply` set it, or None where unset."""
    environ = os.environ if environ is None else environ
    try:
        return max(1, int(environ.get("OMP_NUM_THREADS")))
    except (TypeError, ValueError):
        return None
