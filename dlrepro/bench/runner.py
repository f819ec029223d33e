"""`invoke bench`: suite + flags -> plan -> sweep -> results folder."""
from dlrepro import hostinfo, matrix as matrix_mod
from dlrepro.bench import plan as plan_mod
from dlrepro.run import runfolder as results
from dlrepro.run import runtimes
from dlrepro.bench import suites
from dlrepro.run import sweep
from dlrepro.errors import UserError


def parse_count(value, flag, minimum=1):
    """A command-line integer, or a one-line error naming the flag."""
    try:
        number = int(str(value).strip())
    except ValueError:
        raise UserError(f"{flag} must be an integer >= {minimum}, got {value!r}")
    if number < minimum:
        raise UserError(f"{flag} must be an integer >= {minimum}, got {number}")
    return number


def parse_counts(values, flag):
    counts = []
    for value in values or ():
        for part in str(value).split(","):
            counts.append(parse_count(part, flag))
    return tuple(counts)


def select_frameworks(m, frameworks, all_frameworks):
    if all_frameworks and frameworks:
        raise UserError("give --framework or --all, not both")
    if all_frameworks:
        return tuple(matrix_mod.frameworks(m))
    if not frameworks:
        raise UserError("choose frameworks: --framework NAME (repeatable) or "
                        "--all; valid frameworks: "
                        f"{', '.join(matrix_mod.frameworks(m))}")
    names = []
    for value in frameworks:
        for name in value.split(","):
            matrix_mod.profiles(m, name)  # raises with the valid names
            names.append(name)
    return tuple(dict.fromkeys(names))


def current_host():
    return plan_mod.Host(cpus=hostinfo.usable_cpus(), gpus=hostinfo.gpu_count())


def make_plan(suite_name, options, m, host):
    suite = suites.load(suite_name)
    return suite, plan_mod.build(suite, options, m, host)


def run(suite, plan, options, m, out, resume, command, events,
        runtime_options=None):
    """Execute `plan`; returns the run folder. Resume continues the latest
    run under `out`, skipping cells done with the same definition."""
    runtime = runtimes.get(options.runtime, matrix=m, **(runtime_options or {}))
    runtime.check()
    results.ensure_writable(out)
    done = {}
    if resume:
        run_dir = results.resolve_run(out, results.LATEST)
        record = results.read_run(run_dir)
        if record["runtime"] != options.runtime:
            raise UserError(f"the latest run used runtime {record['runtime']}; "
                            f"resume it with --runtime {record['runtime']}")
        done = sweep.merge_plan(record, plan)
        record["resumed_at"].append(results.utc_now())
        events.log(f"resuming {run_dir}: {len(done)} of {len(plan)} cells "
                   f"already done")
    else:
        run_dir = results.create_run(out, suite["name"])
        record = sweep.new_record(run_dir, command, suite, options.runtime, plan)
    results.point_latest(out, run_dir)
    sweep.execute(plan, runtime, run_dir, record, m, events=events, done=done)
    return run_dir


def summary(run_dir, only_ids=None):
    """(record, [(entry, result)]) of a finished run, in plan order."""
    record, pairs = results.load_run_results(run_dir)
    if only_ids is not None:
        pairs = [p for p in pairs if p[0]["id"] in only_ids]
    return record, pairs
