"""`invoke bench`: suite + flags -> jobs -> the job pipeline -> a run
folder, and its table. tasks.py parses the flags into BenchFlags and calls
`bench`; tests call it too."""
from dataclasses import dataclass
from typing import Optional

from dlrepro import hostinfo, matrix as matrix_mod
from dlrepro.bench import aggregate, phases, plan as plan_mod, report, suites
from dlrepro.errors import NoUsableResult
from dlrepro.run import command, groups, pipeline, runtimes, store


@dataclass
class BenchFlags(command.RunFlags):
    """`invoke bench`'s flags as given (None: the suite's), with the
    task's defaults."""
    all: bool = False
    profile: Optional[str] = None
    suite: str = "smoke"
    batch_size: tuple = ()
    threads: tuple = ()
    iterations: Optional[str] = None
    warmup: Optional[str] = None
    clock_policy: Optional[str] = None
    python: Optional[str] = None
    registry: Optional[str] = None
    repeat: Optional[str] = None
    precision: Optional[str] = None
    compile: Optional[str] = None
    isolation: Optional[str] = None


def bench(flags, command_line="", echo=print):
    """Plan the cells `flags` ask for, run them (or, with --dry-run, print
    the plan), print the table; the run folder (None on a dry run).
    NoUsableResult when no cell ended ok."""
    m = matrix_mod.load()
    options = plan_mod.options(
        m, framework=flags.framework, all_frameworks=flags.all,
        profile=flags.profile, network=flags.network,
        batch_size=flags.batch_size, device=flags.device,
        threads=flags.threads, iterations=flags.iterations,
        warmup=flags.warmup, runtime=flags.runtime, seed=flags.seed,
        clock_policy=flags.clock_policy, timeout=flags.timeout,
        repeat=flags.repeat, precision=flags.precision,
        compile=flags.compile)
    suite, jobs = make_plan(flags.suite, options, m, host_for(flags))
    runtime_options = {"python": flags.python} if flags.python else {}
    if flags.registry:
        runtime_options["registry"] = flags.registry
    executor = command.executor_of(flags, suite, runtime_options)
    isolation = groups.mode_of(flags.isolation, suite)
    engine = command.engine_class(flags.executor)
    groups.check(isolation, flags.runtime, engine)
    jobs = groups.assign(jobs, isolation, flags.runtime, engine)
    if flags.dry_run:
        # The order the jobs will run in: a group's workers take theirs in
        # groups.order, not the plan's.
        _echo_lines(echo, plan_mod.format_plan(groups.order(jobs)))
        return None
    runtime = runtimes.get(flags.runtime, matrix=m, **runtime_options)
    run_dir = command.start(run_of(suite, jobs, flags.out, command_line,
                                   flags.resume), runtime, m,
                            executor)
    record, job_results = summary(run_dir, [j.spec for j in jobs])
    if record["status"] == "submitted":
        echo(command.submitted_line(run_dir, record))
        return run_dir
    _echo_lines(echo, result_lines(run_dir, record, job_results))
    check_usable(run_dir, job_results)
    return run_dir


def _echo_lines(echo, lines):
    for line in lines:
        echo(line)


def host_for(flags):
    """What the cells may ask for: this host, or with --executor slurm the
    partition's largest node (the cells run there, not here)."""
    if flags.executor != "slurm":
        return current_host()
    from dlrepro.run.engines.slurm import client
    return plan_mod.Host(*client.largest_node(flags.partition), gpus_unseen=(
        "the cells run on Slurm's nodes, whose GPUs are not seen from "
        "here; --profile names one"))


def current_host():
    gpus = tuple(hostinfo.gpus())
    return plan_mod.Host(cpus=hostinfo.usable_cpus(), gpus=len(gpus),
                         gpu_devices=gpus)


def make_plan(suite_name, options, m, host):
    suite = suites.load(suite_name)
    return suite, plan_mod.build(suite, options, m, host)


def run_of(suite, jobs, out, command, resume=False):
    """The pipeline's Run for a bench plan (its jobs' isolation assigned:
    dlrepro.run.groups.assign; run.json records it)."""
    return pipeline.Run(kind="bench", jobs=jobs, out=out, name=suite["name"],
                        command=command, resume=resume,
                        suite={"name": suite["name"], "path": suite["path"],
                               "description": suite["description"]})


def summary(run_dir, only_cells=None):
    """(record, [(entry, result)]) of a run, in plan order; with
    `only_cells` (specs), every process of those cells the run holds: a
    resume with a smaller --repeat counts the processes before it, as
    `report` does."""
    record, job_results = store.load_run(run_dir)
    if only_cells is not None:
        keys = {aggregate.cell_key(spec) for spec in only_cells}
        job_results = [j for j in job_results
                       if aggregate.cell_key(j.entry["spec"]) in keys]
    return record, job_results


def result_lines(run_dir, record, job_results):
    """The table of a finished run, side by side, where the time went, and
    its status counts."""
    counts = report.status_counts(job_results)
    return (report.format_table(report.summary_rows(job_results))
            + report.side_by_side_lines(job_results)
            + phases.summary_lines(job_results, record)
            + [f"\n{run_dir}: " + ", ".join(f"{n} {s}" for s, n
                                             in sorted(counts.items()))])


def check_usable(run_dir, job_results):
    """NoUsableResult when no job of the run ended ok."""
    if not any(entry["status"] == "ok" for entry, _result in job_results):
        raise NoUsableResult(f"no job ended ok: {run_dir} holds no usable "
                             f"result")
