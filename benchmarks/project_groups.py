"""What `--isolation group` would make of a sweep measured one process per
cell: its measured fraction projected from the run's own figures.

A sweep's measured fraction is its warm-up and timed iterations over its
wall time (first job start to last job end). In a group, the first cell
still pays everything a process pays before its first iteration (its fixed
cost: interpreter, import, device, model build, write and exit); each later
cell pays only its own model build and the worker's per-cell cost, `c`
seconds, and measures what it measured alone. So, for cells i = 1..n with
measured m_i and fixed f_i (wall less measured), and the gaps between jobs
g kept as they were:

    group fraction = sum(m) / (f_1 + sum(m) + (n - 1) * c + g)

Where the results carry phase times (harness.phases), c is taken per cell
as its model build plus --overhead; where they do not (runs before phase
times), it is each value of --later-cost, printed side by side, so that the
assumption is in the output. `--cells N` projects a sweep of N cells, each
measuring the run's mean m, with the run's f_1: a whole suite from the few
cells that were measured.

    .venv/bin/python benchmarks/project_groups.py RUN_DIR
        [--later-cost 0.25 --later-cost 1 --later-cost 2] [--overhead 0.2]
        [--cells 30]
"""
import argparse
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from dlrepro.bench import phases  # noqa: E402
from dlrepro.run import store  # noqa: E402


def measured_s(result):
    timing = result.get("timing") or {}
    return sum(timing.get("warmup_s") or ()) + sum(
        timing.get("per_iteration_s") or ())


def cells_of(run_dir):
    """[(window, measured s, model build s or None)] of the run's ok
    jobs, in time order."""
    _record, pairs = store.load_run(run_dir)
    found = []
    for entry, result in pairs:
        if entry.get("status") != "ok" or not result:
            continue
        window = phases.window_of(entry, result)
        spent = phases.job_spent(entry, result)
        build = spent.get("model build") if spent else None
        found.append((window, measured_s(result), build))
    return sorted(found, key=lambda cell: cell[0][0])


def fraction(measured, first_fixed, later, gaps):
    return sum(measured) / (first_fixed + sum(measured) + sum(later) + gaps)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dir")
    parser.add_argument("--later-cost", type=float, action="append")
    parser.add_argument("--overhead", type=float, default=0.2)
    parser.add_argument("--cells", type=int)
    args = parser.parse_args()
    cells = cells_of(Path(args.run_dir))
    if not cells:
        sys.exit(f"no ok job with a window in {args.run_dir}")
    windows = [w for w, _m, _b in cells]
    measured = [m for _w, m, _b in cells]
    walls = [end - start for start, end in windows]
    span = max(end for _s, end in windows) - min(s for s, _e in windows)
    gaps = max(0.0, span - sum(walls))
    first_fixed = walls[0] - measured[0]
    n = len(cells)
    print(f"{args.run_dir}: {n} ok cells, span {span:.1f} s, measured "
          f"{sum(measured):.1f} s: fraction one process per cell "
          f"{sum(measured) / span:.2f}; fixed cost per cell "
          f"{statistics.median(w - m for w, m in zip(walls, measured)):.1f} s"
          f" median, the first {first_fixed:.1f} s")
    builds = [b for _w, _m, b in cells]
    if all(b is not None for b in builds):
        costs = [("phase times: model build + %.2f s" % args.overhead,
                  [b + args.overhead for b in builds[1:]])]
    else:
        costs = [(f"assumed {c:.2f} s per later cell", [c] * (n - 1))
                 for c in (args.later_cost or (0.25, 1.0, 2.0))]
    for label, later in costs:
        print(f"  groups ({label}): fraction "
              f"{fraction(measured, first_fixed, later, gaps):.2f}")
        if args.cells:
            mean_m = statistics.mean(measured)
            mean_c = statistics.mean(later) if later else 0.0
            whole = fraction([mean_m] * args.cells, first_fixed,
                             [mean_c] * (args.cells - 1), 0.0)
            print(f"    a sweep of {args.cells} such cells: {whole:.2f} "
                  f"(one process per cell: "
                  f"{mean_m / statistics.mean(walls):.2f})")


if __name__ == "__main__":
    main()
