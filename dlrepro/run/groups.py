"""--isolation: whether each cell runs in a process of its own (`cell`, the
default) or cells that share every process-wide setting run one after
another in one harness worker (`group`, harness/worker.py). The mode is
recorded in run.json and (by the worker) in each result; it is no part of
a cell's identity, so job ids, specs and resume are the same in both."""
from harness.spec import PROCESS_FIELDS

from dlrepro.errors import UserError

MODES = ("cell", "group")
DEFAULT = "cell"
# Where the host can feed a worker: a process it starts itself, natively
# or in one container per group (Runtime.worker_launch).
GROUP_RUNTIMES = ("native", "docker", "podman", "charliecloud")
GROUP_ENGINES = ("local",)


def mode_of(flag, suite):
    """The mode --isolation (or else the suite's `isolation` key) asks for;
    a UserError in one line for any other word."""
    mode = flag if flag is not None else (suite.get("isolation") or DEFAULT)
    if mode not in MODES:
        raise UserError(f"unknown isolation {mode!r}; valid: "
                        f"{', '.join(MODES)}")
    return mode


def check(mode, runtime, executor):
    """Refuse, before any run folder exists, a group mode this host cannot
    run yet."""
    if mode != "group":
        return
    if runtime not in GROUP_RUNTIMES:
        raise UserError(f"--isolation group runs with --runtime "
                        f"{' or '.join(GROUP_RUNTIMES)} only for now, not "
                        f"{runtime}; use --isolation cell")
    if executor not in GROUP_ENGINES:
        raise UserError(f"--isolation group runs with --executor "
                        f"{' or '.join(GROUP_ENGINES)} only for now, not "
                        f"{executor}; use --isolation cell")


def process_key(job):
    """What must be equal for two jobs to share a worker: their cells'
    process-wide fields (the spec keys the worker also compares, container
    and stack, follow from framework, profile and runtime)."""
    cell = job.spec
    return tuple(cell.get(field) for field in PROCESS_FIELDS)


def form(jobs):
    """The groups of `jobs`: runs of jobs consecutive in the plan with
    equal process-wide fields, in order."""
    groups = []
    for job in jobs:
        if groups and process_key(groups[-1][-1]) == process_key(job):
            groups[-1].append(job)
        else:
            groups.append([job])
    return groups


def recorded(record):
    """The mode a run was measured under (run.json; absent: cell, as every
    run before the flag was)."""
    return record.get("isolation") or DEFAULT


def compare_line(base_record, record):
    """One line when the two runs were measured under different modes,
    else None."""
    base, new = recorded(base_record), recorded(record)
    if base == new:
        return None
    return (f"note: the runs were measured under different isolation modes "
            f"(base: {base}, this run: {new}); a difference may be the "
            f"process's, not the framework's")
