"""How far PyTorch's smoke suite, as a whole `invoke bench` in its default
mode (fork natively), is from issue 41's goal of 0.80 measured, and how
far it could come without its model builds or without the import of
torch._dynamo:

    .venv/bin/python docs/measurements/pytorch-smoke-floor-2026-12-06/floor.py \
        --rounds 3 --out /tmp/floor

Each round runs the suite with 2 threads a cell (the suite's default on a
2-core machine), then with 1, timing the whole command from outside; then
it times `import torch` and `import torch._dynamo` in PyTorch's
environment, fresh interpreters, 3 times.
"""
import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))

from dlrepro.bench import phases  # noqa: E402
from dlrepro.run import store  # noqa: E402

PYTORCH = ROOT / ".venvs" / "pytorch-cpu" / "bin" / "python"
IMPORTS = ("import time; t = time.perf_counter(); import torch; "
           "u = time.perf_counter(); import torch._dynamo; "
           "print(u - t, time.perf_counter() - u)")


def bench(out, threads):
    """(whole command's seconds, its run folder)."""
    started = time.perf_counter()
    subprocess.run([str(ROOT / ".venv" / "bin" / "invoke"), "bench",
                    "--framework", "pytorch", "--suite", "smoke",
                    "--runtime", "native", "--threads", str(threads),
                    "--out", str(out)], cwd=ROOT, check=True,
                   stdout=subprocess.DEVNULL)
    return time.perf_counter() - started, (Path(out) / "latest").resolve()


def row(whole, run_dir, dynamo_s):
    record, jobs = store.load_run(run_dir)
    [sweep] = phases.sweeps(jobs, record.get("resumed_at") or ())
    spent = sweep.spent
    measured = sum(spent.get(name, 0.0) for name in phases.MEASURED)
    builds = spent.get("model build", 0.0)
    server = spent.get("fork server: interpreter and import", 0.0)
    return ("{:6.1f} {:7.1f} {:8.1f} {:6.1f} {:6.1f} {:6.2f} {:6.2f} "
            "{:11.2f} {:13.2f}".format(
                whole, sweep.wall_s, measured, server, builds,
                measured / whole, measured / sweep.wall_s,
                measured / (whole - builds),
                measured / (whole - builds - dynamo_s)))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", default="/tmp/floor")
    args = parser.parse_args()
    splits = [[float(v) for v in subprocess.run(
        [str(PYTORCH), "-c", IMPORTS], capture_output=True, text=True,
        check=True).stdout.split()] for _ in range(3)]
    for torch_s, dynamo_s in splits:
        print("import torch {:.2f} s, then torch._dynamo {:.2f} s".format(
            torch_s, dynamo_s))
    dynamo_s = sorted(s[1] for s in splits)[1]
    print("\nthreads whole  segment measured server builds whole  segment"
          "  no builds  nor dynamo")
    for index in range(args.rounds):
        for threads in (2, 1):
            out = os.path.join(args.out, "r{}-t{}".format(index, threads))
            whole, run_dir = bench(out, threads)
            print("{:7d} {}".format(threads, row(whole, run_dir, dynamo_s)),
                  flush=True)
    print("\nwhole: the command, s; segment: first job's start to last "
          "job's end; server: the fork server's interpreter and import; "
          "fractions are measured (warm-up and timed) over the whole "
          "command, over the segment, and over the whole command less the "
          "builds, and less the builds and torch._dynamo's import "
          "(median of the three above)")


if __name__ == "__main__":
    main()
