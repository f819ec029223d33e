"""The exit finalizers (weakref.finalize, atexit=True) a fork server holds
after its framework's import, and how long a forked child takes to run
them, as a child did before dd06515:
    ROOT=$PWD .venvs/pytorch-cpu/bin/python \
        docs/measurements/fixed-costs-2026-12-06/finalizer_probe.py pytorch"""
import collections
import os
import sys
import time
import weakref

sys.path.insert(0, os.environ.get("ROOT", "."))
from harness import forkserver  # noqa: E402

framework = sys.argv[1]
forkserver.preload(framework)
held = collections.Counter(
    getattr(info.func, "__qualname__", str(info.func))
    for info in weakref.finalize._registry.values() if info.atexit)
pid = os.fork()
if pid == 0:
    start = time.perf_counter()
    weakref.finalize._exitfunc()
    print("{}: {} exit finalizers {}; a child runs them in {:.4f} s".format(
        framework, sum(held.values()), dict(held),
        time.perf_counter() - start))
    sys.stdout.flush()
    os._exit(0)
os.waitpid(pid, 0)
