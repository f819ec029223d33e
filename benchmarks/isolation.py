"""`invoke bench --isolation cell` against `--isolation fork` and
`--isolation group`, on the real command line, on the smoke suite, per
framework, in alternating rounds (round 1: cell, fork, group; round 2:
group, fork, cell; round 3 from fork, ...), so that a machine's load
drifts over every mode alike: where every mode takes every place equally
often (2 or 4 rounds for two modes, 6 for three); it warns otherwise.

Prints, per round and framework, each mode's wall time (of the whole
`invoke bench`), measured fraction and what the rest of the machine took
of its CPUs while the cells were timed (other processes, in CPUs, and the
hypervisor's steal) and what the cells' processes met (minor page faults
a timed iteration, involuntary context switches a second); then per
framework over all rounds:

- the measured fraction (warm-up and timed iterations over the framework's
  sweep, as `invoke report`'s "where the time went" computes it), where
  the rest went over all rounds, and the fraction the model builds alone
  would leave (iterations over iterations and builds: the ceiling no
  saving on processes can pass);
- the fixed cost per ok cell (its wall time less its iterations), in fork
  and group mode only for the cells after the first of their worker (the
  first pays the server's or worker's start), and that cost beyond the
  cell's own model build;
- the wall ratio fork/cell and group/cell (median over rounds);
- per cell, the ratio of mean iteration times fork/cell and group/cell
  with its 95% CI
  between processes (Student's t, as `invoke compare` computes it), over
  rounds x --repeat processes a mode; then how those intervals read as a
  family: of n cells 0.05 n miss 1 by chance alone, so Bonferroni's
  intervals (each at 1 - 0.05/n) say which differences the family shows,
  and which are bounded within 3%;
- where a cell stood in its worker: with --repeat 2 or more, worker 1 takes
  the cells in plan order and worker 2 in reverse (`groups.permutation`),
  so every cell is measured early and late alike and a place-in-the-worker
  effect shows instead of passing for a mode effect. Per cell, the ratio
  group/cell of its early (first half of the worker) and late runs, and per
  framework the geometric mean of that ratio by place.

    .venv/bin/python benchmarks/isolation.py [--rounds 3] [--repeat 2]
        [--threads 1] [--framework pytorch ...] [--network NAME ...]
        [--mode fork ...] [--runtime native]
        [--out results/isolation-bench]

CNTK and Caffe run in their images: `--runtime docker --framework cntk
--framework caffe` (images built by `invoke build`).
"""
import argparse
import math
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from dlrepro.bench import aggregate, phases, versus  # noqa: E402
from dlrepro.run import store  # noqa: E402

INVOKE = str(ROOT / ".venv" / "bin" / "invoke")
MODES = ("cell", "fork", "group")
# The modes count as measuring alike where a difference is ruled out beyond
# 3% (the goal this benchmark was written to check).
EQUIVALENT = 0.03
NATIVE = ("pytorch", "tensorflow", "mxnet", "jax")


def bench(framework, mode, round_, args):
    """Run the framework's smoke sweep in `mode`; (wall s of the command,
    its run folder)."""
    out = Path(args.out) / framework / mode / f"round{round_}"
    command = [INVOKE, "bench", "--framework", framework, "--suite", "smoke",
               "--runtime", args.runtime, "--threads", str(args.threads),
               "--isolation", mode, "--repeat", str(args.repeat),
               "--out", str(out)] + [
                   a for n in args.network or () for a in ("--network", n)] + (
                   ["--warmup", str(args.warmup)] if args.warmup else [])
    started = time.perf_counter()
    subprocess.run(command, cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - started, (out / "latest").resolve()


def position(result):
    """A result's place in its worker (1 for a process of its own)."""
    return ((result or {}).get("isolation") or {}).get("position", 1)


def after_first(result):
    """Whether a result's cell ran after another in the same worker."""
    return position(result) > 1


def fixed_costs(pairs, mode):
    """([fixed s], [fixed s beyond the model build]) of the ok cells that
    count: every one in cell mode, those after the first in group mode."""
    fixed, beyond = [], []
    for entry, result in pairs:
        if entry.get("status") != "ok":
            continue
        if mode != "cell" and not after_first(result):
            continue
        spent = phases.job_spent(entry, result)
        if spent is None:
            continue
        rest = sum(spent.values()) - sum(spent.get(n, 0.0)
                                         for n in phases.MEASURED)
        fixed.append(rest)
        beyond.append(rest - spent.get("model build", 0.0))
    return fixed, beyond


def host_load(pairs):
    """(CPUs other processes used, share of the machine's CPU time stolen,
    the cells' minor page faults a timed iteration, their involuntary
    context switches a second) over the timed iterations of `pairs'`
    results, all windows together (harness.hostcpu's timing.host_cpu and
    timing.process_counts): whether a mode's lean came with a busier
    machine or with faults its processes' history made. nan where no
    result has the blocks."""
    window = others = steal = capacity = 0.0
    iterations = faults = switches = switch_window = 0
    for _entry, result in pairs:
        timing = (result or {}).get("timing") or {}
        block, counts = timing.get("host_cpu"), timing.get("process_counts")
        if block:
            window += block["window_s"]
            capacity += block["window_s"] * block["cpus"]
            others += block["others_cpu_s"]
            steal += block["steal_s"]
        if block and counts:
            iterations += timing["completed_iterations"]
            faults += counts["minor_faults"]
            switches += counts["involuntary_switches"]
            switch_window += block["window_s"]
    nan = float("nan")
    return (others / window if window else nan,
            steal / capacity if capacity else nan,
            faults / iterations if iterations else nan,
            switches / switch_window if switch_window else nan)


def load_text(pairs):
    others, steal, faults, switches = host_load(pairs)
    return (f"others {others:.2f} CPUs, steal {steal:.1%}, "
            f"{faults:.0f} faults/iter, {switches:.0f} preempted/s")


class Tally:
    """One framework's figures over the rounds, per mode."""

    def __init__(self, modes=MODES):
        self.modes = modes
        self.fraction = {m: [] for m in modes}
        self.fixed = {m: [] for m in modes}
        self.beyond = {m: [] for m in modes}
        self.walls = {m: [] for m in modes}
        self.pairs = {m: [] for m in modes}
        self.spent = {m: {} for m in modes}  # stretch -> s, all rounds
        self.own_s = {m: 0.0 for m in modes}

    def add(self, mode, wall, run_dir):
        record, pairs = store.load_run(run_dir)
        sweep = phases.sweeps(pairs, record.get("resumed_at") or ())[0]
        self.walls[mode].append(wall)
        self.fraction[mode].append(sweep.fraction)
        for name, seconds in sweep.spent.items():
            self.spent[mode][name] = self.spent[mode].get(name, 0.0) + seconds
        self.own_s[mode] += sweep.own_s
        fixed, beyond = fixed_costs(pairs, mode)
        self.fixed[mode] += fixed
        self.beyond[mode] += beyond
        self.pairs[mode] += pairs
        return sweep.fraction, pairs

    def stats(self, mode):
        """{cell key: CellStats} of the cells measured ok in `mode`."""
        return {aggregate.cell_key(cell): aggregate.cell_stats(cell, results)
                for cell, results in aggregate.group(self.pairs[mode])}

    def ratios(self, mode, central=0.95):
        """[(cell, ratio, (low, high), basis)] of mean iteration time
        mode/cell, per cell measured ok in both modes, with its `central`
        interval."""
        grouped = self.stats(mode)
        rows = []
        for key, base in self.stats("cell").items():
            new = grouped.get(key)
            if new is not None:
                ratio, ci = versus.ratio_ci(base, new, central)
                basis = (aggregate.BETWEEN if min(base.processes,
                                                  new.processes) >= 2
                         else aggregate.WITHIN)
                rows.append((base.cell, ratio, ci, basis))
        return rows

    def places(self, mode):
        """({cell key: {"early": [ratio], "late": [ratio]}}, {place:
        [ratio]}) of each ok `mode` result's mean iteration time over
        its cell's mean in cell mode; early is the first half of a worker
        (of the cells of the framework's sweep), late the rest."""
        base = {key: stats.mean_s
                for key, stats in self.stats("cell").items()}
        size = len(base)
        by_cell, by_place = {}, {}
        for entry, result in self.pairs[mode]:
            key = aggregate.cell_key(entry["spec"])
            if entry.get("status") != "ok" or key not in base:
                continue
            ratio = (aggregate.mean(result["timing"]["per_iteration_s"])
                     / base[key])
            place = position(result)
            half = "early" if place <= (size + 1) // 2 else "late"
            by_cell.setdefault(key, {"early": [], "late": []})[half].append(
                ratio)
            by_place.setdefault(place, []).append(ratio)
        return by_cell, by_place


def geomean(values):
    if not values:
        return float("nan")
    return math.exp(math.fsum(math.log(v) for v in values) / len(values))


def median(values):
    return statistics.median(values) if values else float("nan")


def rest_line(spent, own_s):
    """Where the unmeasured part of a mode's sweeps went, as shares of
    their wall time, and the fraction its model builds alone would leave:
    the most any saving on processes could reach."""
    measured = sum(spent.get(n, 0.0) for n in phases.MEASURED)
    built = spent.get("model build", 0.0)
    rest = sorted(((s, n) for n, s in spent.items()
                   if n not in phases.MEASURED and s >= 0.005 * own_s),
                  reverse=True)
    return ("       rest: " + ", ".join(
        f"{n} {s / own_s:.0%}" for s, n in rest)
        + f"; with only the model builds unmeasured: "
        f"{measured / (measured + built):.2f}")


def family_lines(tally, rows, mode):
    """How the framework's 95% intervals read as a family. Each misses 1
    one time in 20 where the modes do not differ at all, so of n cells
    0.05 n are expected to, and all n contain 1 with probability 0.95**n
    (0.60 for the smoke suite's 10). Bonferroni's intervals, each at
    1 - 0.05/n, all contain their true ratios with probability at least
    0.95: one that excludes 1 is a difference the family shows, and one
    inside [1 - EQUIVALENT, 1 + EQUIVALENT] bounds the difference within
    that margin. `rows`: tally.ratios(), the 95% intervals."""
    n = len(rows)
    if not n:
        return []
    missed = [cell["network"] for cell, _r, (low, high), _b in rows
              if not low <= 1 <= high]
    central = 1 - 0.05 / n
    family = tally.ratios(mode, central)
    apart = [(cell["network"], low, high)
             for cell, _r, (low, high), _b in family if not low <= 1 <= high]
    within = sum(1 - EQUIVALENT <= low and high <= 1 + EQUIVALENT
                 for _c, _r, (low, high), _b in family)
    return [
        f"95% intervals containing 1: {n - len(missed)} of {n}"
        + (f" (not: {', '.join(missed)})" if missed else "")
        + f"; with no difference at all {0.05 * n:.1f} would miss it and "
        f"all {n} contain it with probability {0.95 ** n:.2f}",
        f"family-wise (Bonferroni, each at {central:.2%}): "
        + (", ".join(f"{name} [{low:.3f}, {high:.3f}]"
                     for name, low, high in apart) + " exclude 1"
           if apart else f"all {n} contain 1")
        + f"; {within} of {n} lie within {1 - EQUIVALENT:.2f}-"
        f"{1 + EQUIVALENT:.2f}"]


def report(framework, tally):
    print(f"\n== {framework}")
    for mode in tally.modes:
        print(f"{mode:5s}: measured fraction "
              + ", ".join(f"{f:.2f}" for f in tally.fraction[mode])
              + f"; fixed cost per cell {median(tally.fixed[mode]):.2f} s "
              f"median ({len(tally.fixed[mode])} cells"
              + (", after the first of a worker" if mode != "cell" else "")
              + f"), beyond its model build "
              f"{median(tally.beyond[mode]):.2f} s; while timed: "
              + load_text(tally.pairs[mode]))
        if tally.own_s[mode] > 0:
            print(rest_line(tally.spent[mode], tally.own_s[mode]))
    for mode in tally.modes:
        if mode != "cell" and "cell" in tally.modes:
            versus_cell(tally, mode)


def versus_cell(tally, mode):
    """`mode` against cell: wall ratios, every cell's iteration-time ratio
    with its interval, the family, the place in the worker."""
    walls = [g / c for c, g in zip(tally.walls["cell"], tally.walls[mode])]
    print(f"wall ratio {mode}/cell: " + ", ".join(f"{w:.2f}" for w in walls)
          + f" (median {median(walls):.2f})")
    by_cell, by_place = tally.places(mode)
    rows = tally.ratios(mode)
    for cell, ratio, (low, high), basis in rows:
        inside = "contains 1" if low <= 1 <= high else "EXCLUDES 1"
        halves = by_cell.get(aggregate.cell_key(cell), {})
        print(f"  {cell['network']:<12} batch {cell['batch_size']:>4}: "
              f"iteration time {mode}/cell {ratio:.3f} "
              f"[{low:.3f}, {high:.3f}] {inside} ({basis}); early "
              f"{geomean(halves.get('early')):.3f}, late "
              f"{geomean(halves.get('late')):.3f}")
    for line in family_lines(tally, rows, mode):
        print(line)
    print(f"by place in the worker (geometric mean of {mode}/cell over its "
          "cells): " + ", ".join(
              f"{place}: {geomean(ratios):.3f}"
              for place, ratios in sorted(by_place.items())))


def round_order(modes, round_):
    """The modes in the order round `round_` runs them: each mode first,
    in the middle and last in turn, forwards and backwards."""
    turn = (round_ - 1) // 2 % len(modes)
    order = modes[turn:] + modes[:turn]
    return order if round_ % 2 else order[::-1]


def order_balance(orders):
    """A warning where the rounds do not put every mode in every place
    equally often, else None. A quiet machine still drifts within a round
    (each later sweep a little slower), so with two modes and three rounds
    (cell first once, fork first twice) the drift passes for a difference
    between the modes: 2 or 4 rounds balance two modes, 6 balance three."""
    places = {}
    for order in orders:
        for place, mode in enumerate(order):
            places.setdefault(mode, [0] * len(order))[place] += 1
    counts = {tuple(c) for c in places.values()}
    if len(counts) <= 1:
        return None
    said = "; ".join(f"{mode} {'/'.join(map(str, c))}"
                     for mode, c in places.items())
    return (f"warning: these rounds are unbalanced (rounds in each place, "
            f"first to last: {said}): a drift within a round reads as a "
            f"difference between the modes")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--repeat", type=int, default=2,
                        help="processes a mode per round (group: workers, "
                        "each in its own order)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--framework", action="append")
    parser.add_argument("--network", action="append",
                        help="only these of the suite's networks "
                        "(repeatable; one network: each worker has one "
                        "cell, so a difference between the modes is the "
                        "worker's own, not its earlier cells')")
    parser.add_argument("--mode", action="append", choices=MODES,
                        help="only these modes (repeatable; cell always)")
    parser.add_argument("--runtime", default="native")
    parser.add_argument("--warmup", type=int,
                        help="warm-up iterations per cell instead of the "
                        "suite's (does the difference between the modes "
                        "go with a longer warm-up?)")
    parser.add_argument("--out", default=str(ROOT / "results" /
                                             "isolation-bench"))
    args = parser.parse_args()
    frameworks = args.framework or list(NATIVE)
    modes = tuple(m for m in MODES if m == "cell" or not args.mode
                  or m in args.mode)
    tallies = {f: Tally(modes) for f in frameworks}
    orders = [round_order(modes, r) for r in range(1, args.rounds + 1)]
    balance = order_balance(orders)
    if balance:
        print(balance, flush=True)
    for round_, order in enumerate(orders, 1):
        for framework in frameworks:
            for mode in order:
                wall, run_dir = bench(framework, mode, round_, args)
                fraction, pairs = tallies[framework].add(mode, wall,
                                                         run_dir)
                print(f"round {round_} {framework:<10} {mode:5s}: "
                      f"{wall:7.1f} s wall, measured {fraction:.2f}, "
                      f"{load_text(pairs)}  ({run_dir})", flush=True)
    for framework in frameworks:
        report(framework, tallies[framework])


if __name__ == "__main__":
    main()
