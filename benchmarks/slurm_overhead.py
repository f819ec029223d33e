"""What running through Slurm costs against running here, side by side:
the same cells as one sweep run by the local executor and by the Slurm
executor (one array, a task per cell), in rounds that alternate which goes
first, so that a machine's load drifts over both alike. Per executor: the
whole sweep's wall time, the per-cell overhead (the wall-time difference
over the cells), each job's own wall time (the local executor's, or the
Slurm task's as the task measured it) and each cell's mean iteration time,
as a ratio Slurm / local on the same cell.

    .venv/bin/python benchmarks/slurm_overhead.py --runtime docker \
        --framework mxnet --framework pytorch --rounds 3

Needs the Slurm cluster (.ci/slurm.sh) and what the runtime needs (as for
`invoke bench`; image prefix and base overrides from the environment).
Prints a table; writes slurm-overhead.json in --out.
"""
import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harness.resultfile import write_atomic  # noqa: E402

from dlrepro import matrix  # noqa: E402
from dlrepro.bench import plan, runner  # noqa: E402
from dlrepro.run import pipeline, store  # noqa: E402
from dlrepro.run.engines import slurm  # noqa: E402
from dlrepro.run.runtimes import get  # noqa: E402

EXECUTORS = ("local", "slurm")


def sweep(executor, jobs, rt, out, m):
    """(wall seconds, {cell: (job wall s, mean iteration s)}) of one sweep."""
    run = pipeline.Run(kind="bench", jobs=jobs, out=out, name="overhead",
                       command="slurm_overhead")
    started = time.perf_counter()
    done = pipeline.start(run, rt, m, executor=None if executor == "local"
                          else slurm.SlurmEngine())
    wall = time.perf_counter() - started
    _record, pairs = store.load_run(done)
    cells = {}
    for entry, result in pairs:
        if entry["status"] != "ok":
            sys.exit(f"{executor}: {entry['id']}: {entry['status']}: "
                     f"{entry['message']}")
        job_wall = ((result.get("slurm") or {}).get("wall_s")
                    if executor == "slurm" else entry["wall_s"])
        cells[entry["id"]] = (job_wall, result["timing"]["mean_s"])
    return wall, cells


def main():
    """Flags, the rounds and the printed figures in one place. Long
    because a benchmark reads best top to bottom, as one script."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--framework", action="append")
    parser.add_argument("--network", action="append")
    parser.add_argument("--suite", default="smoke")
    parser.add_argument("--runtime", default="docker")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", default="results/slurm-overhead")
    args = parser.parse_args()
    m = matrix.load()
    frameworks = args.framework or ["mxnet"]
    options = plan.options(
        m, framework=frameworks, all_frameworks=False, profile=None,
        network=args.network, batch_size=None, device=None, threads=[args.threads],
        iterations=None, warmup=None, runtime=args.runtime, seed="0",
        clock_policy=None, timeout=None)
    # The cells the Slurm executor plans (the partition's largest node).
    host = plan.Host(*slurm.largest_node(None))
    _suite, jobs = runner.make_plan(args.suite, options, m, host)
    rt = get(args.runtime, matrix=m)
    rt.check()
    out = Path(args.out)
    walls = {name: [] for name in EXECUTORS}
    per_cell = {name: {} for name in EXECUTORS}
    for round_ in range(args.rounds):
        order = EXECUTORS if round_ % 2 == 0 else EXECUTORS[::-1]
        for name in order:
            wall, cells = sweep(name, jobs, rt, out / name / f"r{round_}", m)
            walls[name].append(wall)
            for cell, figures in cells.items():
                per_cell[name].setdefault(cell, []).append(figures)
    count = len(jobs)
    med = {name: statistics.median(walls[name]) for name in EXECUTORS}
    print(f"{count} cells ({', '.join(frameworks)}, suite {args.suite}, "
          f"{args.threads} thread(s), runtime {args.runtime}), medians of "
          f"{args.rounds} alternating rounds")
    for name in EXECUTORS:
        print(f"  {name:6} sweep wall {med[name]:8.1f} s  "
              f"(rounds: {', '.join(f'{w:.1f}' for w in walls[name])})")
    overhead = (med["slurm"] - med["local"]) / count
    print(f"  slurm / local sweep wall: {med['slurm'] / med['local']:.3f}; "
          f"per-cell overhead {overhead:+.2f} s")
    rows = []
    print(f"{'cell':40} {'local job s':>11} {'slurm task s':>12} "
          f"{'iter ratio':>10}")
    for cell in sorted(per_cell["local"]):
        local = per_cell["local"][cell]
        remote = per_cell["slurm"][cell]
        row = {"cell": cell,
               "local_job_s": statistics.median(f[0] for f in local),
               "slurm_task_s": statistics.median(f[0] for f in remote),
               "iteration_ratio": statistics.median(
                   r[1] / l[1] for l, r in zip(local, remote))}
        rows.append(row)
        print(f"{cell:40} {row['local_job_s']:11.2f} "
              f"{row['slurm_task_s']:12.2f} {row['iteration_ratio']:10.3f}")
    ratios = [r["iteration_ratio"] for r in rows]
    print(f"iteration ratio slurm/local over the cells: median "
          f"{statistics.median(ratios):.3f} (range {min(ratios):.3f}-"
          f"{max(ratios):.3f})")
    write_atomic(str(out / "slurm-overhead.json"), {
        "args": vars(args), "walls_s": walls,
        "per_cell_overhead_s": overhead, "cells": rows})


if __name__ == "__main__":
    main()
