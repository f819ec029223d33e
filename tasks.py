"""Invoke tasks: the user's entry points.

Each task reads its flags, falls back to defaults, calls the dlrepro package
and prints. dlrepro's UserError becomes a one-line message and exit status 2.
"""
import functools
import shlex
import signal
import sys

from invoke import Exit, task

from dlrepro.errors import UserError

# `invoke report | head` should end quietly, as other command-line tools do.
signal.signal(signal.SIGPIPE, signal.SIG_DFL)


def user_errors(fn):
    """Turn dlrepro's UserError into invoke's Exit (message, status 2)."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except UserError as exc:
            raise Exit(f"error: {exc}", code=2)
    return wrapper


def _print_lines(lines):
    for line in lines:
        print(line)


@task(name="list")
@user_errors
def list_(c):
    """List frameworks and their profiles, networks, and suites."""
    from harness import networks
    from dlrepro import matrix, suites
    m = matrix.load()
    print("frameworks (profiles):")
    for framework in matrix.frameworks(m):
        print(f"  {framework:<11} {', '.join(matrix.profiles(m, framework))}")
    print("networks:")
    for net in networks.NETWORKS.values():
        print(f"  {net.name:<11} {networks.parameter_count(net):>12,} params  "
              f"{net.description}")
    print("suites:")
    for name, path in suites.available().items():
        print(f"  {name:<22} {suites.load(name)['description']}")


@task(help={"framework": "framework whose native environment to make",
            "profile": "matrix profile (default: cpu)"})
@user_errors
def env(c, framework, profile="cpu"):
    """Create or refresh a framework's native virtual environment."""
    from dlrepro import envs, matrix
    m = matrix.load()
    entry = matrix.entry(m, framework, profile)
    reason = envs.unavailable_reason(entry, framework, profile)
    if reason:
        raise UserError(reason)
    print(envs.ensure(framework, profile, entry))


@task(
    iterable=["framework", "network", "batch_size", "threads"],
    help={
        "framework": "framework to run (repeatable, or comma-separated)",
        "all": "run every framework in dockerfiles/matrix.toml",
        "profile": "matrix profile (default: cpu for CPU cells, the first GPU "
                   "profile for GPU cells)",
        "suite": "suite name from benchmarks/suites or a path to a suite "
                 "file (default: smoke)",
        "network": "only these networks (repeatable); networks outside the "
                   "suite need --batch-size",
        "batch-size": "batch sizes to use instead of the suite's (repeatable)",
        "device": "cpu or gpu (overrides the suite)",
        "threads": "CPU thread counts instead of the suite's (repeatable)",
        "iterations": "timed iterations per cell (overrides the suite)",
        "warmup": "warm-up iterations per cell (overrides the suite)",
        "runtime": "docker (each framework in its image) or native (a "
                   "virtual environment per framework)",
        "out": "results root (default: results)",
        "resume": "continue the latest run under --out, skipping cells "
                  "already done with the same definition",
        "dry-run": "print the plan and exit",
        "timeout": "seconds a cell may run before it is stopped (default: "
                   "the suite's, 1800)",
        "seed": "random seed for weights and synthetic data (default 0)",
        "clock-policy": "GPU clock policy: observe (default), disable-boost "
                        "or lock=<MHz>",
        "python": "native runtime: use this interpreter for every framework "
                  "instead of making virtual environments",
    })
@user_errors
def bench(c, framework=None, all=False, profile=None, suite="smoke",
          network=None, batch_size=None, device=None, threads=None,
          iterations=None, warmup=None, runtime="docker", out="results",
          resume=False, dry_run=False, timeout=None, seed="0",
          clock_policy="observe", python=None):
    """Run benchmark cells, one process each, and write results/<run_id>/."""
    from rich.console import Console
    from dlrepro import bench as bench_mod, matrix, plan, progress, report
    m = matrix.load()
    if device not in (None, "cpu", "gpu"):
        raise UserError(f"--device must be cpu or gpu, got {device!r}")
    options = plan.Options(
        frameworks=bench_mod.select_frameworks(m, framework or (), all),
        profile=profile,
        networks=tuple(n for value in network or () for n in value.split(",")),
        batch_sizes=bench_mod.parse_counts(batch_size, "--batch-size"),
        device=device,
        threads=bench_mod.parse_counts(threads, "--threads"),
        iterations=(bench_mod.parse_count(iterations, "--iterations")
                    if iterations is not None else None),
        warmup=(bench_mod.parse_count(warmup, "--warmup", minimum=0)
                if warmup is not None else None),
        runtime=runtime,
        seed=bench_mod.parse_count(seed, "--seed", minimum=0),
        clock_policy=clock_policy,
        timeout_s=(bench_mod.parse_count(timeout, "--timeout")
                   if timeout is not None else None))
    from dlrepro import runtimes
    if runtime not in runtimes.RUNTIMES:
        raise UserError(f"unknown runtime {runtime!r}; valid runtimes: "
                        f"{', '.join(sorted(runtimes.RUNTIMES))}")
    for name in options.networks:
        from harness import networks
        if name not in networks.NETWORKS:
            raise UserError(f"unknown network {name!r}; valid networks: "
                            f"{', '.join(sorted(networks.NETWORKS))}")
    suite_data, cells = bench_mod.make_plan(suite, options, m,
                                            bench_mod.current_host())
    if dry_run:
        _print_lines(plan.format_plan(cells))
        return
    command = shlex.join(["invoke"] + sys.argv[1:])
    runtime_options = {"python": python} if python else {}
    console = Console()
    if console.is_terminal:
        with progress.LiveEvents(console) as events:
            run_dir = bench_mod.run(suite_data, cells, options, m, out, resume,
                                    command, events, runtime_options)
    else:
        run_dir = bench_mod.run(suite_data, cells, options, m, out, resume,
                                command, progress.LineEvents(),
                                runtime_options)
    record, pairs = bench_mod.summary(run_dir, {c.id for c in cells})
    _print_lines(report.format_table(report.summary_rows(pairs)))
    counts = report.status_counts(pairs)
    print(f"\n{run_dir}: " + ", ".join(f"{n} {s}" for s, n in sorted(counts.items())))


@task(help={"run": "run id, `latest` (default) or a run folder",
            "out": "results root (default: results)",
            "json": "print the rows as JSON instead of a table"})
@user_errors
def report(c, run="latest", out="results", json=False):
    """Summarise a finished (or interrupted) run as a table."""
    import json as json_mod
    from dlrepro import report as report_mod, results
    run_dir = results.resolve_run(out, run)
    record, pairs = results.load_run_results(run_dir)
    rows = report_mod.summary_rows(pairs)
    if json:
        print(json_mod.dumps([dict(zip(report_mod.COLUMNS, r)) for r in rows],
                             indent=2))
        return
    print(f"{record['run_id']}  {record['command']}  ({record['status']})")
    _print_lines(report_mod.format_table(rows))


@task(help={"run": "run id, `latest` (default) or a run folder",
            "out": "results root (default: results)"})
@user_errors
def compare(c, run="latest", out="results"):
    """Set a run's single-GPU results beside the 2016 figures (then vs now)."""
    from dlrepro import compare as compare_mod, results
    run_dir = results.resolve_run(out, run)
    _, pairs = results.load_run_results(run_dir)
    _print_lines(compare_mod.format_rows(
        compare_mod.rows(pairs, compare_mod.load_reference())))


@task(help={"k": "only tests matching this pytest expression",
            "x": "stop at the first failure"})
def test(c, k="", x=False):
    """Run the test suite (pytest)."""
    args = [sys.executable, "-m", "pytest", "tests"]
    if k:
        args += ["-k", shlex.quote(k)]
    if x:
        args.append("-x")
    c.run(" ".join(args), pty=False)


@task(help={"rounds": "alternating rounds of harness and hand-written blocks",
            "block": "iterations per block",
            "threads": "CPU threads (default: all usable)"})
@user_errors
def overhead(c, rounds=10, block=5, threads=None):
    """Measure the harness's overhead against a hand-written PyTorch loop."""
    from dlrepro import ROOT, envs, hostinfo, matrix
    m = matrix.load()
    python = envs.ensure("pytorch", "cpu", m["pytorch"]["cpu"])
    threads = threads or hostinfo.usable_cpus()
    c.run(f"{python} {ROOT / 'benchmarks' / 'harness_overhead.py'} "
          f"--rounds {int(rounds)} --block {int(block)} --threads {int(threads)}",
          env={"PYTHONPATH": str(ROOT)}, pty=False)


# --- GPU clocks (issue 5) -----------------------------------------------------

@task(help={"state": "a clock-state file the harness wrote "
                     "(<cell>.clock-state.json next to the cell's result)",
            "run": "restore every outstanding clock-state file of this run: "
                   "an id, a folder, or latest (the default)",
            "out": "results root for --run (default: results)"})
@user_errors
def gpu_restore(c, state=None, run=None, out="results"):
    """Restore GPU clocks that a killed cell left changed (needs root)."""
    from dlrepro import gpu_restore as restore_mod
    for line in restore_mod.restore(state=state, run=run, out=out):
        print(line)
