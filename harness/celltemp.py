"""A temp dir of its own for each cell a fork server runs.

A process of its own (`--isolation cell`) starts with an empty temp dir:
natively the runtime gives it one (dlrepro/run/runtimes/tempdirs.py), in a
container /tmp is the container's. What a framework caches there starts
empty in each cell; torch.compile's kernels above all (inductor's C++ and
Triton code, its FX graphs and autotuning choices, under
$TMPDIR/torchinductor_<user>), whose hits would make a later cell's
compilation, its first iterations, cheaper than its own.

A fork server's children share the server's temp dir, and PyTorch's import
in the server has already fixed its cache's place there: it sets
TORCHINDUCTOR_CACHE_DIR in the environment when it first asks for it. So
each child gets a folder of its own inside the server's (`make`, by the
server before the fork, removed by it once the child has ended), as its
TMPDIR, with the cache variables that pointed into the server's temp dir
pointed into the child's (`environment`). A cache variable that points
elsewhere is the user's choice and is kept; natively dlrepro drops them
from a cell's environment (dlrepro/run/runtimes/native.py), so that there
the framework always chooses, in the cell's temp dir.
"""
import os
import shutil
import tempfile

PREFIX = "dlrepro-cell-"
# Where frameworks keep what they compile, when the variable names no
# other place: under the temp dir (PyTorch's inductor; Triton's, which
# inductor sets to a folder of its own cache).
CACHE_VARIABLES = ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR")


def make(shared):
    """A fresh folder for one cell inside `shared`."""
    return tempfile.mkdtemp(prefix=PREFIX, dir=shared)


def without_caches(environ):
    """A copy of `environ` without the cache variables: what a cell of its
    own starts with, so that the framework caches in its temp dir."""
    return {name: value for name, value in environ.items()
            if name not in CACHE_VARIABLES}


def environment(environ, shared, folder):
    """`environ` for a cell whose temp dir is `folder` inside `shared`:
    TMPDIR is `folder`, and each cache variable under `shared` is moved to
    the same place under `folder`."""
    env = dict(environ)
    for name in CACHE_VARIABLES:
        value = env.get(name)
        if value is not None and _inside(value, shared):
            env[name] = os.path.join(
                folder, os.path.relpath(os.path.abspath(value), shared))
    env["TMPDIR"] = folder
    return env


def enter(shared, folder):
    """Make `folder` this process's temp dir (a forked child's, at its
    start): its environment as `environment` says, and Python's tempfile."""
    os.environ.update(environment(os.environ, shared, folder))
    tempfile.tempdir = folder


def remove(folder):
    """Remove a cell's folder once its process has ended."""
    shutil.rmtree(folder, ignore_errors=True)


def _inside(path, folder):
    path, folder = os.path.abspath(path), os.path.abspath(folder)
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)
