"""PyTorch's smoke suite as a whole `invoke bench` under each isolation
mode, in alternating rounds, and the ceiling of its measured fraction:

    .venv/bin/python docs/measurements/pytorch-smoke-ceiling-2026-12-07/ceiling.py \
        --rounds 2 --out /tmp/ceiling

Each round runs the suite under fork, group and cell (the next round in
the reverse order), timing the whole command from outside and reading its
run folder's phases (what `invoke report` prints as "where the time
went"). Per run: the measured fraction (warm-up and timed over the whole
command), and two ceilings that keep the work measured as it is: the
fraction if nothing but the one import of torch and torch._dynamo and the
model builds took time besides the iterations, and if nothing but the
import did.
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
IMPORT = ("import time; t = time.perf_counter(); import torch, "
          "torch._dynamo; print(time.perf_counter() - t)")
MODES = ("fork", "group", "cell")


def bench(out, mode, root=ROOT):
    """(whole command's seconds, its run folder): the suite run by the
    checkout at `root`."""
    started = time.perf_counter()
    subprocess.run([str(root / ".venv" / "bin" / "invoke"), "bench",
                    "--framework", "pytorch", "--suite", "smoke",
                    "--runtime", "native", "--isolation", mode,
                    "--out", str(out)], cwd=root, check=True,
                   stdout=subprocess.DEVNULL)
    return time.perf_counter() - started, (Path(out) / "latest").resolve()


def sweep_of(run_dir):
    """The run's one sweep (dlrepro.bench.phases.Sweep)."""
    record, jobs = store.load_run(run_dir)
    [sweep] = phases.sweeps(jobs, record.get("resumed_at") or ())
    return sweep


def row(mode, whole, run_dir, import_s):
    sweep = sweep_of(run_dir)
    spent = sweep.spent
    measured = sweep.measured_s
    builds = spent.get("model build", 0.0)
    imports = sum(spent.get(name, 0.0) for name in (
        "fork server: interpreter and import", "interpreter", "import"))
    return ("{:5s} {:6.1f} {:8.1f} {:7.1f} {:6.1f} {:6.2f} {:14.2f} "
            "{:11.2f}".format(
                mode, whole, measured, imports, builds, measured / whole,
                measured / (measured + import_s + builds),
                measured / (measured + import_s)))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--out", default="/tmp/ceiling")
    args = parser.parse_args()
    imports = sorted(float(subprocess.run(
        [str(PYTORCH), "-c", IMPORT], capture_output=True, text=True,
        check=True).stdout) for _ in range(3))
    import_s = imports[1]
    print("import torch, torch._dynamo in a fresh interpreter: "
          + ", ".join("{:.2f} s".format(s) for s in imports)
          + "; the median, {:.2f} s, in the ceilings".format(import_s))
    print("\nmode   whole measured imports builds  whole"
          "  import+builds  import only")
    for index in range(args.rounds):
        order = MODES if index % 2 == 0 else MODES[::-1]
        for mode in order:
            out = os.path.join(args.out, "r{}-{}".format(index, mode))
            whole, run_dir = bench(out, mode)
            print(row(mode, whole, run_dir, import_s), flush=True)
    print("\nwhole: the command, s; measured: warm-up and timed, s; "
          "imports: interpreters and imports, all processes, s; "
          "builds: model builds, s; fractions: measured over the whole "
          "command, and over measured plus one import and the builds, "
          "and plus one import alone")


if __name__ == "__main__":
    main()
