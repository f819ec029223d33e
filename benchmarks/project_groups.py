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

`--suite NAME --times SOURCE...` projects the suite's own cells instead,
each from what its network's iterations took where it was measured
(SOURCE: run folders or a benchmarks/gpu_check.py summary.json; each ok
result gives its network, batch size, mean iteration and first warm-up
iteration). A cell's measured time is its warm-up and timed iterations at
the estimated mean, plus what its network's first warm-up iteration took
beyond the mean (cuDNN's autotuning, on a GPU), the least seen at any
batch size. Its mean comes two ways, both printed:

- estimated: between two measured batch sizes, along the straight line
  through them in log-log; beyond them, along the nearest such line; a
  network measured at one batch size only, at the same time per sample;
- lower bound: an iteration takes no less time at a larger batch, and no
  more time per sample than at a smaller one, so t(b) >= t(b0) for b >= b0
  and t(b) >= t(b0) b / b0 for b < b0, the largest of these over the
  measured batch sizes; the first warm-up iteration no longer than the
  others.

With --repeat N every worker takes all the cells and pays its own first
cell, so the fraction does not change with N.

`--mode fork` labels the same projection for `--isolation fork`, where the
formula is the same: the server's first cell pays the interpreter, the
import and its own build; each later cell is a forked child that pays its
model build, the server's per-cell cost and, on a GPU, a device context of
its own (the server never holds one), all of which go into c.

    .venv/bin/python benchmarks/project_groups.py RUN_DIR
        [--later-cost 0.25 --later-cost 1 --later-cost 2] [--overhead 0.2]
        [--cells 30] [--suite paper-synthetic-gpu --times SOURCE ...]
        [--mode group|fork]
"""
import argparse
import json
import math
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from dlrepro.bench import phases, suites  # noqa: E402
from dlrepro.errors import UserError  # noqa: E402
from dlrepro.run import store  # noqa: E402


def measured_s(result):
    timing = result.get("timing") or {}
    return sum(timing.get("warmup_s") or ()) + sum(
        timing.get("per_iteration_s") or ())


def ok_pairs(run_dir):
    """[(entry, result)] of a run folder's jobs that ended ok."""
    _record, pairs = store.load_run(run_dir)
    return [(entry, result) for entry, result in pairs
            if entry.get("status") == "ok" and result]


def cells_of(run_dir):
    """[(window, measured s, model build s or None)] of the run's ok
    jobs, in time order."""
    found = []
    for entry, result in ok_pairs(run_dir):
        window = phases.window_of(entry, result)
        spent = phases.job_spent(entry, result)
        build = spent.get("model build") if spent else None
        found.append((window, measured_s(result), build))
    return sorted(found, key=lambda cell: cell[0][0])


def fraction(measured, first_fixed, later, gaps):
    return sum(measured) / (first_fixed + sum(measured) + sum(later) + gaps)


def results_in(source):
    """The ok results a run folder or a gpu_check summary.json holds."""
    path = Path(source)
    if path.is_file():
        try:
            cells = json.loads(path.read_text())["cells"]
            return [c["result"] for c in cells if c.get("result")]
        except (OSError, ValueError, TypeError, KeyError, AttributeError):
            raise UserError(f"{source} is not a run folder or a "
                            f"benchmarks/gpu_check.py summary.json")
    return [result for _entry, result in ok_pairs(path)]


def iteration_points(sources):
    """{network: {batch size: (mean iteration s, first warm-up iteration
    beyond the mean, s)}}, the least of each over the results."""
    points = {}
    for source in sources:
        for result in results_in(source):
            cell, timing = result.get("cell") or {}, result.get("timing") or {}
            mean, warmups = timing.get("mean_s"), timing.get("warmup_s")
            if not (mean and warmups and cell.get("network")
                    and cell.get("batch_size")):
                continue
            at = points.setdefault(cell["network"], {})
            excess = max(0.0, warmups[0] - mean)
            old = at.get(cell["batch_size"], (mean, excess))
            at[cell["batch_size"]] = (min(old[0], mean), min(old[1], excess))
    return points


def estimated_mean(known, batch):
    """An iteration's mean at `batch` from {batch: mean}: log-log lines
    through neighbouring measured batch sizes; one point, per sample."""
    sizes = sorted(known)
    if len(sizes) == 1:
        return known[sizes[0]] * batch / sizes[0]
    upper = next((i for i, b in enumerate(sizes) if b >= batch), len(sizes))
    i = min(max(upper, 1), len(sizes) - 1)
    lo, hi = sizes[i - 1], sizes[i]
    slope = (math.log(known[hi] / known[lo]) / math.log(hi / lo))
    return known[lo] * (batch / lo) ** slope


def least_mean(known, batch):
    """The least an iteration at `batch` can take, given {batch: mean}."""
    return max(mean if batch >= size else mean * batch / size
               for size, mean in known.items())


def suite_cells(suite):
    """[(network, batch size, warm-up and timed iterations)] of a suite,
    one per cell of one framework."""
    return [(network, batch, group["warmup"] + group["iterations"])
            for group in suite["groups"] for network in group["networks"]
            for batch in group["batch_sizes"]]


def project_suite(suite, points, first_fixed, later_cost):
    """(estimated fraction, lower bound, measured s estimated, of it first
    warm-up iterations) of the suite in one worker."""
    cells = suite_cells(suite)
    missing = sorted({n for n, _b, _i in cells} - set(points))
    if missing:
        raise UserError(f"no measured iterations of {', '.join(missing)}: "
                        f"add a --times source that measured them")
    guess, least, first = [], [], 0.0
    for network, batch, steps in cells:
        known = {b: mean for b, (mean, _e) in points[network].items()}
        excess = min(e for _m, e in points[network].values())
        first += excess
        guess.append(excess + steps * estimated_mean(known, batch))
        least.append(steps * least_mean(known, batch))
    later = [later_cost] * (len(cells) - 1)
    return (fraction(guess, first_fixed, later, 0.0),
            fraction(least, first_fixed, later, 0.0), sum(guess), first)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dir")
    parser.add_argument("--later-cost", type=float, action="append")
    parser.add_argument("--overhead", type=float, default=0.2)
    parser.add_argument("--cells", type=int)
    parser.add_argument("--suite")
    parser.add_argument("--times", action="append", default=[])
    parser.add_argument("--mode", choices=("group", "fork"), default="group",
                        help="the mode the projection is labelled with")
    args = parser.parse_args()
    if bool(args.suite) != bool(args.times):
        sys.exit("--suite and --times go together")
    try:
        report(args)
    except UserError as exc:
        sys.exit(f"error: {exc}")


def report(args):
    if args.suite:
        suite = suites.load(args.suite)
        points = iteration_points(args.times)
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
        print(f"  {args.mode} ({label}): fraction "
              f"{fraction(measured, first_fixed, later, gaps):.2f}")
        mean_c = statistics.mean(later) if later else 0.0
        if args.cells:
            mean_m = statistics.mean(measured)
            whole = fraction([mean_m] * args.cells, first_fixed,
                             [mean_c] * (args.cells - 1), 0.0)
            print(f"    a sweep of {args.cells} such cells: {whole:.2f} "
                  f"(one process per cell: "
                  f"{mean_m / statistics.mean(walls):.2f})")
        if args.suite:
            guess, least, total, first = project_suite(
                suite, points, first_fixed, mean_c)
            print(f"    the suite {suite['name']} ({len(suite_cells(suite))}"
                  f" cells, {total:.1f} s of iterations estimated, "
                  f"{first:.1f} s of it first warm-up iterations beyond "
                  f"the mean): {guess:.2f}, at least {least:.2f}")


if __name__ == "__main__":
    main()
