"""--isolation: whether each cell runs in a process of its own (`cell`),
cells that share every process-wide setting run one after another in one
harness worker (`group`, harness/worker.py), or each in a child forked by
one server per process-wide setting after it imported the framework
(`fork`, harness/forkserver.py: a fresh process without the import).
Where neither --isolation nor the suite names one, each job gets its
framework's default (`assign`). The
mode is recorded in run.json and (by the worker) in each result; it is no
part of a cell's identity, so job ids, specs and resume are the same in
both.

With --repeat N a group runs in N workers, one per process of its cells
(a job's `process`, 1..N), each taking the cells in its own order
(`permutation`), so that what differs between processes, and what a
cell's place in its worker does to it, is measured rather than hidden."""
import random

from harness.spec import PROCESS_FIELDS

from dlrepro.errors import UserError

MODES = ("cell", "group", "fork")
# The modes whose jobs the host feeds, one spec at a time, to a process
# started per worker key (engines/grouped.py): a group worker or a fork
# server.
SERVED = ("group", "fork")
# Where a fork server runs: natively or in one container per key, locally
# or in a Slurm array task; a container's children are signalled through
# its engine (runtimes/forkchild.py).
FORK_RUNTIMES = ("native", "docker", "podman", "charliecloud")
DEFAULT = "cell"
# run.json's word for a framework whose jobs ran under both modes.
MIXED = "mixed"
# The frameworks whose cells are grouped where nothing names a mode: those
# for which every run of benchmarks/isolation.py since the allocator fix,
# both modes side by side, found every smoke network's iteration-time
# ratio group/cell with a 95% CI containing 1
# (docs/measurements/isolation-2026-12-02: TensorFlow natively, Caffe in
# its image). PyTorch (its LSTM cells 2-4% faster in a worker with 12
# processes a mode, all 10 intervals containing 1 with 18, lstm and fcn-r
# 4-6% faster with 18 once every cell settled Python's collector), JAX
# (later cells 5% faster until that settling and its CPU steps inline;
# then three networks equal with 24 processes, but lstm32 and lstm 7-8%
# faster in a worker over the whole suite with 18), MXNet
# (fcn8 15% faster after fcn5) and CNTK (fcn5 2.5% slower, first warm-ups
# of 4-17 s in a worker) stay one process per cell.
GROUP_BY_DEFAULT = ("tensorflow", "caffe")
# The frameworks whose CPU cells fork where nothing names a mode, each with
# the runtimes where benchmarks/isolation.py, fork and cell side by side in
# 4 balanced rounds on a quiet machine, found every smoke network's ratio
# fork/cell of mean iteration times with a Bonferroni interval containing
# 1: PyTorch, JAX and MXNet natively (docs/measurements/
# fork-balanced-2026-12-05) and in their images under Docker and Podman
# (docs/measurements/fork-containers-2026-12-05; JAX and MXNet under
# Charliecloud too), CNTK in its image under Docker (docs/measurements/
# fork-cntk-image-2026-12-05), Podman and Charliecloud, and Caffe in its
# image under Docker once its server imported Caffe (docs/measurements/
# fork-freeze-2026-12-05: 0.93 of its sweep measured, as grouped) and
# Podman; PyTorch under Charliecloud once glibc's mmap was off in every
# cell (docs/measurements/fixed-costs-2026-12-06; before, its fcn-r ran 8%
# faster under fork by the heap each process had), and so Caffe (docs/
# measurements/fork-default-2026-12-06: its lean under fork there gone);
# TensorFlow natively (fixed-costs-2026-12-06: every interval containing
# 1, but wide) and in its image under Docker, Podman and Charliecloud
# (docs/measurements/fork-tensorflow-images-2026-12-06; under
# Charliecloud in two runs, whose leans went opposite ways). Elsewhere
# the default stays `cell` or GROUP_BY_DEFAULT's `group`: GPU cells (no
# GPU has run fork yet). A fork default comes before a group default.
FORK_DEFAULTS = {"pytorch": ("native", "docker", "podman", "charliecloud"),
                 "jax": ("native", "docker", "podman", "charliecloud"),
                 "mxnet": ("native", "docker", "podman", "charliecloud"),
                 "cntk": ("docker", "podman", "charliecloud"),
                 "caffe": ("docker", "podman", "charliecloud"),
                 "tensorflow": ("native", "docker", "podman",
                                "charliecloud")}
FORK_DEFAULT_DEVICES = ("cpu",)
# Where the host can feed a worker: a process it starts itself, natively
# or in one container per group (Runtime.worker_launch), locally or in one
# Slurm array task per group.
GROUP_RUNTIMES = ("native", "docker", "podman", "charliecloud")


def mode_of(flag, suite):
    """The mode --isolation (or else the suite's `isolation` key) asks for,
    None where neither names one (each framework's default: `assign`); a
    UserError in one line for any other word."""
    mode = flag if flag is not None else suite.get("isolation")
    if mode is not None and mode not in MODES:
        raise UserError(f"unknown isolation {mode!r}; valid: "
                        f"{', '.join(MODES)}")
    return mode


def check(mode, runtime, executor):
    """Refuse, before any run folder exists, a group mode this host cannot
    run yet: through `runtime` (its name) and `executor` (an Engine class,
    dlrepro.run.engines.ENGINES)."""
    if mode == "fork":
        if runtime not in FORK_RUNTIMES or not executor.runs_groups:
            raise UserError(f"--isolation fork runs with --runtime "
                            f"{' or '.join(FORK_RUNTIMES)} through an "
                            f"executor that feeds workers, not {runtime} "
                            f"with {executor.name}; use --isolation cell")
        return
    if mode != "group":
        return
    if runtime not in GROUP_RUNTIMES:
        raise UserError(f"--isolation group runs with --runtime "
                        f"{' or '.join(GROUP_RUNTIMES)} only for now, not "
                        f"{runtime}; use --isolation cell")
    if not executor.runs_groups:
        raise UserError(f"--isolation group does not run with --executor "
                        f"{executor.name} yet; use --isolation cell")


def default_for(framework, runtime, executor, device="cpu"):
    """A framework's mode where nothing names one: `fork` for
    FORK_DEFAULTS' cells where fork was measured equal to cell (their
    runtimes, FORK_DEFAULT_DEVICES), else `group` for GROUP_BY_DEFAULT's
    where a group can run (its runtime), else `cell`; `cell` wherever the
    engine feeds no workers."""
    if not executor.runs_groups:
        return "cell"
    if (device in FORK_DEFAULT_DEVICES
            and runtime in FORK_DEFAULTS.get(framework, ())):
        return "fork"
    if framework in GROUP_BY_DEFAULT and runtime in GROUP_RUNTIMES:
        return "group"
    return "cell"


def assign(jobs, mode, runtime, executor):
    """The jobs, each with its `isolation`: `mode` where one was named,
    else its framework's default (`default_for`)."""
    return [job._replace(isolation=mode or default_for(
        job.placement.framework, runtime, executor, job.placement.device))
        for job in jobs]


def summary(jobs):
    """run.json's `isolation`: the one mode of all `jobs`, else {framework:
    mode} (the defaults differ by framework, never within one)."""
    modes = {job.isolation for job in jobs}
    if len(modes) <= 1:
        return modes.pop() if modes else DEFAULT
    return {job.placement.framework: job.isolation for job in jobs}


def process_key(job):
    """What must be equal for two jobs to share a worker: their cells'
    process-wide fields (the spec keys the worker also compares, container
    and stack, follow from framework, profile and runtime)."""
    cell = job.spec
    return tuple(cell.get(field) for field in PROCESS_FIELDS)


def worker_key(job):
    """What must be equal for two jobs to run in the same worker: their
    mode, their process-wide fields and the process of its cell they are
    (--repeat)."""
    return (job.isolation,) + process_key(job) + (job.process,)


def form(jobs):
    """The workers' groups of `jobs` (in worker order, see `order`): runs
    of consecutive jobs with equal worker keys, in order."""
    return _runs(jobs, worker_key)


def order(jobs):
    """The jobs in the order they run: a job in a process of its own
    (isolation `cell`) where the plan has it; the jobs of a group (isolation
    `group`, equal process-wide fields, anywhere in the plan) all where the
    group's first job is (an --all sweep, whose plan takes the frameworks
    in turn network by network, runs framework by framework), process 1's
    jobs, then process 2's, ..., each process's jobs in plan order permuted
    by `permutation(jobs, group seed, process)`. Deterministic: a resumed
    run keeps every worker's order (and skips what is done)."""
    grouped = {id(group[0]): group for group in _gathered(
        [job for job in jobs if job.isolation in SERVED],
        lambda job: (job.isolation,) + process_key(job))}
    ordered = []
    for job in jobs:
        if job.isolation not in SERVED:
            ordered.append(job)
            continue
        group = grouped.get(id(job))
        if group is None:
            continue  # placed with its group's first job
        seed = group[0].spec.get("seed")
        for process in sorted({job.process for job in group}):
            mine = [job for job in group if job.process == process]
            ordered.extend(permutation(mine, seed, process))
    return ordered


def planned_workers(ordered):
    """run.json's `workers`: the job ids each worker is planned to take,
    in its order (`ordered` as `order` returns it; a group's jobs are
    consecutive there; a job that cannot run here is in no worker); a
    worker that dies or is stopped mid-group leaves the rest of its list to
    a fresh one."""
    return [[job.id for job in group] for group in form(
        [job for job in ordered
         if job.isolation in SERVED and not job.skip_reason])]


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
    """The mode a run was measured under as its run.json sums it up (one
    mode, or {framework: mode}; absent: cell, as every run before the
    flag was)."""
    return record.get("isolation") or DEFAULT


def summed_up(record):
    """run.json's `isolation` from its entries, each its job's own mode
    (an entry written before entries had one takes what run.json said for
    its framework, and keeps it): one mode, or {framework: mode}, MIXED
    for a framework measured under both (a run resumed under another
    --isolation). Each session's jobs alone would relabel the jobs an
    earlier session measured."""
    before = recorded(record)
    found = {}
    for entry in record["jobs"]:
        framework = entry["spec"].get("framework")
        mode = entry.setdefault("isolation", _mode_in(before, framework))
        found.setdefault(framework, set()).add(mode)
    modes = set().union(*found.values())
    if len(modes) <= 1:
        return modes.pop() if modes else DEFAULT
    return {framework: MIXED if len(m) > 1 else next(iter(m))
            for framework, m in found.items()}


def job_mode(entry, result, record):
    """The mode a job was measured under: its result's `isolation` block
    where it has one (a worker's cell; a cell measured alone again); a
    result without one had a process of its own; a job with no result:
    its run.json entry's, else its run's."""
    if result is not None:
        return (result.get("isolation") or {}).get("mode") or DEFAULT
    return entry.get("isolation") or _mode_in(
        recorded(record), entry["spec"].get("framework"))


def measured_modes(record, job_results):
    """{framework: (mode, ...)} over the jobs of a run that measured
    (ended ok), each job's own mode (job_mode)."""
    found = {}
    for entry, result in job_results:
        if result is not None and result["status"] == "ok":
            found.setdefault(entry["spec"].get("framework"), set()).add(
                job_mode(entry, result, record))
    return {framework: tuple(sorted(m)) for framework, m in found.items()}


def compare_line(base, new):
    """One line when two runs measured a framework they both measured
    (`base` and `new`: measured_modes) under different modes, else None.
    Frameworks only one run measured are not named: they are not
    compared."""
    shared = sorted(set(base) & set(new), key=str)
    differing = [f for f in shared if base[f] != new[f]]
    if not differing:
        return None
    one = [{m for f in shared for m in modes[f]} for modes in (base, new)]
    if all(len(modes) == 1 for modes in one):
        said = f"base: {one[0].pop()}, this run: {one[1].pop()}"
    else:
        said = "; ".join(f"{f}: base {_said(base[f])}, this run "
                         f"{_said(new[f])}" for f in differing)
    return (f"note: the runs were measured under different isolation modes "
            f"({said}); a difference may be the process's, not the "
            f"framework's")


def _said(modes):
    return " and ".join(modes)


def _mode_in(recorded_mode, framework):
    if isinstance(recorded_mode, dict):
        return recorded_mode.get(framework, DEFAULT)
    return recorded_mode


def process_mode(record, entry, result):
    """The mode one job's process ran under: its result's isolation block
    (a worker's cell, or one measured again alone after oom), else its
    run.json entry's own `isolation`, else the run's for its framework;
    None when none of them names a valid mode."""
    block = (result or {}).get("isolation")
    candidates = [block.get("mode") if isinstance(block, dict) else None,
                  entry.get("isolation")]
    run_mode = recorded(record)
    framework = (entry.get("spec") or {}).get("framework") \
        if isinstance(entry.get("spec"), dict) else None
    candidates.append(run_mode.get(framework) if isinstance(run_mode, dict)
                      else run_mode)
    return next((m for m in candidates if m in MODES), None)


def modes_label(modes):
    """One label for the modes of a cell's processes: `cell`, `group`,
    `cell+group` where they differ, None where none is known."""
    known = sorted({m for m in modes if m})
    return "+".join(known) or None
