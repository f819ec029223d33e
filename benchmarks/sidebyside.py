"""The harness's step against a framework's own training loop, timed side
by side: the alternation and the table shared by the idiomatic-loop
benchmarks (MXNet, CNTK), and the options and table of the block-alternating
ones (harness_overhead, idiomatic_tensorflow). Python 3.6 and the standard
library, since the CNTK image runs it.

Blocks of iterations alternate in one process, the order flipping every
round (ABBA), so that drifting load on the machine hits both sides alike.
"""
import argparse
import importlib
import json
import os
import statistics
import time

from harness import networks, provenance, threads as thread_env, timing

# The cases: fcn5 (batch 64), alexnet-r (128), resnet-56 (16).
CASES = (("fcn5", 64), ("alexnet-r", 128), ("resnet-56", 16))
GOAL = 0.05
SIDES = ("harness", "idiomatic")


def plain_loop(step, iterations, primer=1, clock=time.perf_counter,
               cpu_clock=time.process_time):
    """(seconds per iteration, process CPU seconds of them all), timed the
    simplest way after `primer` untimed iterations."""
    for _ in range(primer):
        step()
    times = []
    cpu_start = cpu_clock()
    previous = clock()
    for _ in range(iterations):
        step()
        now = clock()
        times.append(now - previous)
        previous = now
    return times, cpu_clock() - cpu_start


def alternate(harness_step, idiomatic_step, rounds, iterations, settle=None):
    """Rounds of `iterations` timed iterations of each side, each block
    after one untimed iteration (and `settle()`, e.g. waiting for an
    asynchronous engine to go idle). Returns the raw seconds per iteration
    of each side, the per-round ratios of the means (harness / idiomatic)
    and process CPU seconds per iteration (all threads)."""
    sides = dict((side, []) for side in SIDES)
    cpu = dict((side, 0.0) for side in SIDES)
    per_round = []
    for index in range(rounds):
        means = {}
        for side in SIDES if index % 2 == 0 else SIDES[::-1]:
            if settle is not None:
                settle()
            if side == "harness":
                series = timing.run_loop(harness_step, iterations, 1)
                times, cpu_s = series.times, series.cpu_s
            else:
                times, cpu_s = plain_loop(idiomatic_step, iterations, primer=1)
            sides[side].extend(times)
            cpu[side] += cpu_s
            means[side] = sum(times) / len(times)
        per_round.append(means["harness"] / means["idiomatic"])
    harness_mean = sum(sides["harness"]) / len(sides["harness"])
    idiomatic_mean = sum(sides["idiomatic"]) / len(sides["idiomatic"])
    count = rounds * iterations
    return {"harness_mean_s": harness_mean,
            "idiomatic_mean_s": idiomatic_mean,
            "ratio": harness_mean / idiomatic_mean,
            "round_ratios": per_round,
            "harness_cpu_s": cpu["harness"] / count,
            "idiomatic_cpu_s": cpu["idiomatic"] / count,
            "cpu_ratio": cpu["harness"] / cpu["idiomatic"],
            "harness_s": sides["harness"], "idiomatic_s": sides["idiomatic"]}


def measure(backend, make_idiomatic, name, batch_size, rounds, iterations,
            warmup, seed, settle=None):
    """One case: the backend's session and `make_idiomatic(backend,
    network, batch_size, seed)`'s step on the same network, `warmup`
    untimed iterations of each, then alternate()."""
    network = networks.get(name)
    session = backend.prepare(network, batch_size, "cpu", seed)
    plain = make_idiomatic(backend, network, batch_size, seed)
    for _ in range(warmup):
        session.step()
        plain()
    case = alternate(session.step, plain, rounds, iterations, settle)
    case.update(network=name, batch_size=batch_size)
    return case


def table_lines(title, cases):
    """The title, a header and one row per case of alternate() (with its
    `network` and `batch_size`)."""
    lines = [title,
             "{:<10} {:>5} {:>11} {:>13} {:>6} {:>13} {:>10}  {}".format(
                 "network", "batch", "harness ms", "idiomatic ms", "ratio",
                 "round ratios", "CPU ratio", "within 5%")]
    for case in cases:
        lines.append(
            "{:<10} {:>5} {:>11.2f} {:>13.2f} {:>6.3f} {:>13} {:>10.3f}  {}"
            .format(case["network"], case["batch_size"],
                    case["harness_mean_s"] * 1e3,
                    case["idiomatic_mean_s"] * 1e3, case["ratio"],
                    "{:.2f}..{:.2f}".format(min(case["round_ratios"]),
                                            max(case["round_ratios"])),
                    case["cpu_ratio"],
                    "yes" if abs(case["ratio"] - 1) <= GOAL else "no"))
    return lines


def format_table(report, label, loop, notes):
    """Lines of the table for a report from main(): `label` names the
    framework and `loop` its idiomatic loop; the `notes` lines follow."""
    return table_lines(
        "{} {} on CPU, {} thread(s): harness vs {} ({} rounds x {} "
        "iterations each)".format(label, report["framework_version"],
                                  report["threads"], loop, report["rounds"],
                                  report["iterations"]),
        report["cases"]) + list(notes)


def main(argv, description, framework, measure, title, notes):
    """The command line of an idiomatic-loop benchmark: parse, constrain the
    threads before the framework loads, `measure(backend, network, batch,
    rounds, iterations, warmup, seed)` each case, print the table (or
    JSON); `title` is format_table()'s (label, loop), `notes` its notes."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--threads", type=int,
                        default=provenance.usable_cpus(),
                        help="threads for {} (default: usable CPUs)".format(
                            framework))
    parser.add_argument("--rounds", type=int, default=4,
                        help="alternating rounds per network (default 4)")
    parser.add_argument("--iterations", type=int, default=8,
                        help="timed iterations per side and round (default 8)")
    parser.add_argument("--warmup", type=int, default=3,
                        help="untimed iterations per side first (default 3)")
    parser.add_argument("--network", action="append",
                        choices=[name for name, _ in CASES],
                        help="only this network (repeatable)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true",
                        help="print the figures as JSON instead of a table")
    args = parser.parse_args(argv)
    check_counts(parser, args)
    backend = load_backend(framework, args.threads, args.seed)
    cases = [measure(backend, name, batch, args.rounds, args.iterations,
                     args.warmup, args.seed)
             for name, batch in CASES
             if not args.network or name in args.network]
    show(report_of(framework, backend, args, cases), args.json,
         lambda report: format_table(report, title[0], title[1], notes))
    return 0


def check_counts(parser, args):
    """A parser error unless --threads, --rounds and --iterations are 1 or
    more."""
    for option in ("threads", "rounds", "iterations"):
        if getattr(args, option) < 1:
            parser.error("--{} must be >= 1".format(option))


def load_backend(framework, threads, seed=0):
    """`framework`'s backend, configured for `threads` CPU threads: loaded
    after the thread variables are set, since its thread pools read them at
    import."""
    thread_env.apply(threads)
    backend = importlib.import_module("harness.frameworks." + framework
                                      + ".backend")
    backend.configure(threads, "cpu", seed)
    return backend


def report_of(framework, backend, args, cases):
    """What an idiomatic-loop benchmark reports: the framework, its version
    and threads, the options, this CPU, and `cases`."""
    return {"framework": framework,
            "framework_version": backend.versions("cpu")["framework_version"],
            "threads": args.threads,
            "effective_threads": backend.effective_threads(),
            "rounds": args.rounds, "iterations": args.iterations,
            "warmup": args.warmup, "cpu_model": provenance.cpu_model(),
            "cases": cases}


def show(report, as_json, table):
    """`report` as JSON, or as the lines `table(report)`."""
    if as_json:
        print(json.dumps(report, indent=2, sort_keys=True))
    else:
        print("\n".join(table(report)))


# --- benchmarks that alternate blocks of iterations --------------------------

def block_parser(description, rounds):
    """The options of a block-alternating benchmark: --rounds (default
    `rounds`), --block, --warmup, --threads and --json."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--rounds", type=int, default=rounds)
    parser.add_argument("--block", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--json", action="store_true")
    return parser


def block_args(description, rounds, cases):
    """block_parser's options and --networks, a subset of the names in
    `cases` ((name, batch), ...), parsed; args.cases holds the chosen."""
    parser = block_parser(description, rounds)
    names = [n for n, _ in cases]
    parser.add_argument("--networks", default=",".join(names),
                        help="subset of {}".format(", ".join(names)))
    args = parser.parse_args()
    chosen = args.networks.split(",")
    unknown = sorted(set(chosen) - set(names))
    if unknown:
        parser.error("unknown networks {}; choose from {}".format(
            ", ".join(unknown), ", ".join(names)))
    args.cases = [(n, b) for n, b in cases if n in chosen]
    return args


def block_run(description, framework, measure, cases, rounds=6):
    """A block-alternating benchmark's options parsed (block_args), its
    backend loaded, and `measure(backend, name, batch, rounds, block,
    warmup)` of each chosen case: (args, backend, rows)."""
    args = block_args(description, rounds, cases)
    backend = load_backend(framework, args.threads)
    return args, backend, [
        measure(backend, name, batch, args.rounds, args.block, args.warmup)
        for name, batch in args.cases]


def with_medians(case, other, harness_s, other_s):
    """`case` with the median seconds of each side and their ratio, which
    the odd iteration that background load stretches moves less than the
    means."""
    case.update({
        "harness_median_s": statistics.median(harness_s),
        other + "_median_s": statistics.median(other_s),
        "ratio_of_medians": (statistics.median(harness_s)
                             / statistics.median(other_s)),
    })
    return case


def block_case(name, batch, rounds, block, other, harness_s, other_s,
               ratios):
    """One case of a block-alternating benchmark: the mean seconds of each
    side (the other side named `other`), the ratio of the means and the
    per-round `ratios`."""
    harness_mean = statistics.mean(harness_s)
    other_mean = statistics.mean(other_s)
    return {"network": name, "batch_size": batch, "rounds": rounds,
            "block": block, "harness_mean_s": harness_mean,
            other + "_mean_s": other_mean,
            "ratio_of_means": harness_mean / other_mean,
            "median_round_ratio": statistics.median(ratios),
            "round_ratios": ratios}


def show_rows(as_json, report, heading, columns):
    """A block-alternating benchmark's output: `report` (its cases under
    "rows") as JSON, or `heading` and the table of the rows' `columns`
    (rows_table)."""
    if as_json:
        print(json.dumps(report, indent=2, sort_keys=True))
    else:
        print(heading)
        print("\n".join(rows_table(report["rows"], columns)))


def rows_table(rows, columns):
    """Lines of a table with one row per case: network and batch size, then
    `columns`, ((heading, key, decimals), ...), each as wide as its
    heading."""
    lines = ["{:<10} {:>5}".format("network", "batch")
             + "".join("  " + heading for heading, _, _ in columns)]
    for r in rows:
        lines.append("{:<10} {:>5}".format(r["network"], r["batch_size"])
                     + "".join("  {:>{}.{}f}".format(r[key], len(heading),
                                                     decimals)
                               for heading, key, decimals in columns))
    return lines
