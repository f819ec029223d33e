"""`invoke bench --isolation cell` against `--isolation group`, on the real
command line, natively with PyTorch on the smoke suite, in alternating
rounds (round 1: cell then group; round 2: group then cell; ...), so that
a machine's load drifts over both modes alike.

Prints per round each mode's wall time (of the whole `invoke bench`) and
the ratio group/cell, and per mode the measured fraction (warm-up and timed
iterations over the sweep's wall time, as the bench summary's "where the
time went" computes it) and the median fixed cost per ok job.

    .venv/bin/python benchmarks/isolation.py [--rounds 2] [--threads 1]
        [--framework pytorch] [--runtime native]
        [--out results/isolation-bench]
"""
import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from dlrepro.bench import phases  # noqa: E402
from dlrepro.run import store  # noqa: E402

INVOKE = str(ROOT / ".venv" / "bin" / "invoke")
MODES = ("cell", "group")


def bench(mode, args):
    """Run the sweep in `mode`; (wall s of the command, its run folder)."""
    out = Path(args.out) / mode
    command = [INVOKE, "bench", "--framework", args.framework, "--suite",
               "smoke", "--runtime", args.runtime, "--threads",
               str(args.threads), "--isolation", mode, "--out", str(out)]
    started = time.perf_counter()
    subprocess.run(command, cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - started, (out / "latest").resolve()


def sweep_of(run_dir):
    """The run's one framework's Sweep (dlrepro.bench.phases)."""
    record, pairs = store.load_run(run_dir)
    found = phases.sweeps(pairs, record.get("resumed_at") or ())
    return found[0]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--framework", default="pytorch")
    parser.add_argument("--runtime", default="native")  # cntk, caffe: docker
    parser.add_argument("--out", default=str(ROOT / "results" /
                                             "isolation-bench"))
    args = parser.parse_args()
    fractions = {mode: [] for mode in MODES}
    fixed = {mode: [] for mode in MODES}
    for round_ in range(1, args.rounds + 1):
        order = MODES if round_ % 2 else MODES[::-1]
        walls = {}
        for mode in order:
            walls[mode], run_dir = bench(mode, args)
            sweep = sweep_of(run_dir)
            fractions[mode].append(sweep.measured_s / sweep.wall_s)
            fixed[mode].extend(sweep.fixed_s)
            print(f"round {round_} {mode:5s}: {walls[mode]:7.1f} s wall, "
                  f"{sweep.jobs} jobs, measured "
                  f"{sweep.measured_s / sweep.wall_s:.2f} of the sweep's "
                  f"{sweep.wall_s:.1f} s  ({run_dir})", flush=True)
        print(f"round {round_} wall ratio group/cell: "
              f"{walls['group'] / walls['cell']:.2f}", flush=True)
    for mode in MODES:
        print(f"{mode:5s}: measured fraction "
              + ", ".join(f"{f:.2f}" for f in fractions[mode])
              + f"; fixed cost per ok job {statistics.median(fixed[mode]):.2f}"
              f" s median")


if __name__ == "__main__":
    main()
