"""PyTorch's fcn-r at batch 16, one thread: a fresh process against a child
forked after the import, with the harness's allocator settings of today
(mmap off) or of before (glibc's default mmap maximum, 65,536). Per
process: mean and median step time, minor page faults a step (mean, and
the fewest and most in one step), over 40 timed steps after 3 warm-up
steps. Usage: probe.py fresh|fork new|old (ROOT: the repository;
NETWORK and BATCH: another cell; FRAMEWORK: another backend, fresh
only)."""
import ctypes
import json
import os
import resource
import sys
import time

sys.path.insert(0, os.environ.get("ROOT", "."))
from harness import allocator, collector, threads  # noqa: E402

GLIBC_MMAP_MAX = 65536  # glibc's DEFAULT_MMAP_MAX


FRAMEWORK = os.environ.get("FRAMEWORK", "pytorch")
NETWORK = os.environ.get("NETWORK", "fcn-r")
BATCH = int(os.environ.get("BATCH", "16"))


def cell(steps=40, warm=3, network=NETWORK, batch=BATCH):
    import importlib
    from harness import networks
    backend = importlib.import_module(
        "harness.frameworks.{}.backend".format(FRAMEWORK))
    if FRAMEWORK == "pytorch":
        import torch
        torch.set_num_threads(1)
    session = backend.prepare(networks.get(network), batch, "cpu", 1)
    for _ in range(warm):
        session.step()
    out = []
    for _ in range(steps):
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        started = time.perf_counter()
        session.step()
        took = time.perf_counter() - started
        faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
        out.append((took, faults))
    return out


def report(mode, setting, out):
    times = sorted(t for t, _ in out)
    faults = sorted(f for _, f in out)
    print(json.dumps({
        "framework": FRAMEWORK, "network": NETWORK, "mode": mode,
        "allocator": setting,
        "mean_ms": round(1e3 * sum(times) / len(times), 2),
        "median_ms": round(1e3 * times[len(times) // 2], 2),
        "faults": round(sum(faults) / len(faults)),
        "faults_min": faults[0], "faults_max": faults[-1]}), flush=True)


def main():
    mode, setting = sys.argv[1], sys.argv[2]
    threads.apply(1)
    allocator.hold()
    if setting == "old":
        ctypes.CDLL(None).mallopt(-4, GLIBC_MMAP_MAX)  # M_MMAP_MAX
    if FRAMEWORK == "pytorch":
        import torch  # noqa: F401
        import torch._dynamo  # noqa: F401  (as the fork server preloads it)
    if mode == "fresh":
        report(mode, setting, cell())
        return
    collector.collect_and_freeze()
    pid = os.fork()
    if pid == 0:
        report(mode, setting, cell())
        os._exit(0)
    os.waitpid(pid, 0)


if __name__ == "__main__":
    main()
