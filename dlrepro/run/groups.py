"""--isolation: whether each cell runs in a process of its own (`cell`, the
default) or cells that share every process-wide setting run one after
another in one harness worker (`group`, harness/worker.py). The mode is
recorded in run.json and (by the worker) in each result; it is no part of
a cell's identity, so job ids, specs and resume are the same in both.

With --repeat N a group runs in N workers, one per process of its cells
(a job's `process`, 1..N), each taking the cells in its own order
(`permutation`), so that what differs between processes, and what a
cell's place in its worker does to it, is measured rather than hidden."""
import random

from harness.spec import PROCESS_FIELDS

from dlrepro.errors import UserError

MODES = ("cell", "group")
DEFAULT = "cell"
# Where the host can feed a worker: a process it starts itself, natively
# or in one container per group (Runtime.worker_launch), locally or in one
# Slurm array task per group.
GROUP_RUNTIMES = ("native", "docker", "podman", "charliecloud")
GROUP_ENGINES = ("local", "slurm")


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


def worker_key(job):
    """What must be equal for two jobs to run in the same worker: their
    process-wide fields and the process of its cell they are (--repeat)."""
    return process_key(job) + (job.process,)


def form(jobs):
    """The workers' groups of `jobs` (in worker order, see `order`): runs
    of consecutive jobs with equal worker keys, in order."""
    return _runs(jobs, worker_key)


def order(jobs):
    """The jobs in the order their workers take them: for each group of
    jobs with equal process-wide fields anywhere in the plan (in the order
    each group first appears: an --all sweep, whose plan takes the
    frameworks in turn network by network, runs framework by framework),
    process 1's jobs, then process 2's, ..., each process's jobs in plan
    order permuted by `permutation(jobs, group seed, process)`.
    Deterministic: a resumed run keeps every worker's order (and skips
    what is done)."""
    ordered = []
    for group in _gathered(jobs, process_key):
        seed = group[0].spec.get("seed")
        for process in sorted({job.process for job in group}):
            mine = [job for job in group if job.process == process]
            ordered.extend(permutation(mine, seed, process))
    return ordered


def planned_workers(ordered):
    """run.json's `workers`: the job ids each worker is planned to take,
    in its order (`ordered` as `order` returns it); a worker that dies or
    is stopped mid-group leaves the rest of its list to a fresh one."""
    return [[job.id for job in group] for group in form(ordered)]


def permutation(items, seed, process):
    """The order in which process `process` of a group takes its `items`
    (given in plan order): process 1 in plan order, process 2 in reverse
    (the first and the last cells change places), process 3
    and later in a shuffle drawn from random.Random(f"{seed}:{process}")
    with the cells' seed, the same on every run; from three cells on, a
    shuffle equal to process 1's or 2's order is drawn again from the same
    generator, so that it tells something they do not."""
    plan = list(items)
    if process == 1:
        return plan
    if process == 2:
        return plan[::-1]
    rng = random.Random(f"{seed}:{process}")
    shuffled = plan[:]
    while True:
        rng.shuffle(shuffled)
        if len(plan) < 3 or shuffled not in (plan, plan[::-1]):
            return shuffled


def _gathered(jobs, key):
    """`jobs` gathered by `key(job)`, each list in plan order, the lists
    in the order their keys first appear."""
    found = {}
    for job in jobs:
        found.setdefault(key(job), []).append(job)
    return list(found.values())


def _runs(jobs, key):
    """`jobs` cut into runs of consecutive jobs with equal `key(job)`."""
    runs = []
    for job in jobs:
        if runs and key(runs[-1][-1]) == key(job):
            runs[-1].append(job)
        else:
            runs.append([job])
    return runs


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
