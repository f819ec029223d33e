"""From a suite and the command line to the jobs of a bench run.

Pure functions: nothing here touches a runtime, a file or the clock, so a
dry run prints exactly what a real run would do.
"""
import itertools
from typing import NamedTuple, Optional

from harness.errors import HarnessError
from harness.spec import CELL_FIELDS, check_batch

from dlrepro import matrix as matrix_mod
from dlrepro.bench import gpuprofile
from dlrepro.errors import UserError
from dlrepro.run.job import Job, Placement

# Every process of every cell is planned before the first runs: a mistyped
# count (--repeat 1000000) would fill memory instead of failing. pyperf
# runs 20 processes by default; this is ample room above that.
MAX_REPEAT = 1000


class Options(NamedTuple):
    """What the user asked for on the command line (None: the suite's)."""
    frameworks: tuple
    profile: Optional[str] = None
    networks: tuple = ()
    batch_sizes: tuple = ()
    device: Optional[str] = None
    threads: tuple = ()
    iterations: Optional[int] = None
    warmup: Optional[int] = None
    runtime: str = "docker"
    seed: int = 0
    # None: the suite's (observe unless the suite names another).
    clock_policy: Optional[str] = None
    timeout_s: Optional[int] = None
    repeat: Optional[int] = None
    # None: the suite's (default: the framework's default precision and
    # compile mode).
    precision: Optional[str] = None
    compile: Optional[str] = None


class Host(NamedTuple):
    cpus: int
    gpus: int
    # NVML's view of each GPU (dlrepro.hostinfo.gpus): what a GPU cell's
    # profile is chosen for when --profile names none.
    gpu_devices: tuple = ()
    # Why the GPUs are not looked at (the cells run elsewhere), if so.
    gpus_unseen: Optional[str] = None


def cell_id(cell):
    """A readable, unique file name for a cell."""
    parts = [cell["framework"], cell["profile"], cell["network"],
             cell["device"], f"b{cell['batch_size']}"]
    if cell["device"] == "gpu":
        parts.append(f"g{cell['gpus']}")
    if cell["threads"] is not None:
        parts.append(f"t{cell['threads']}")
    # Cells differing only in precision or compile mode are other cells.
    if cell.get("precision", "default") != "default":
        parts.append(cell["precision"])
    if cell.get("compile") is not None:
        parts.append(f"c{cell['compile']}")
    return "-".join(parts)


def _profile(m, framework, device, requested, host, choices):
    """(profile, the GPU profile Choice or None) of a cell."""
    if requested is None and device == "gpu":
        if framework not in choices:
            choices[framework] = gpuprofile.choose(
                m, framework, host.gpu_devices, host.gpus_unseen)
        return choices[framework].profile, choices[framework]
    if requested is None:
        return matrix_mod.default_profile(m, framework, device), None
    entry = matrix_mod.entry(m, framework, requested)
    if entry["device"] != device:
        raise UserError(f"profile {framework}/{requested} is for "
                        f"{entry['device']} cells, not {device}")
    return requested, None


def build(suite, options, m, host):
    """Every cell of `suite` narrowed and overridden by `options`."""
    planned = {}
    choices = {}
    for group in _groups(suite, options):
        for cell, choice in _cells(group, options, m, host, choices):
            _check_cell(cell)
            repeat = options.repeat or group.get("repeat", 1)
            skip = _skip_reason(cell, host)
            if skip is None and choice is not None and not choice.admitted:
                skip = choice.reason
            for process in range(1, repeat + 1):
                item = job_for(cell, options.timeout_s or group["timeout_s"],
                               skip, process, choice)
                previous = planned.get(item.id)
                if previous is not None and previous.spec != cell:
                    raise UserError(f"suite {suite['name']} defines cell "
                                    f"{item.id} twice with different settings")
                planned[item.id] = item
    if not planned:
        raise UserError(f"nothing to run: suite {suite['name']} has no cells "
                        f"for the frameworks and networks given")
    return list(planned.values())


def _groups(suite, options):
    """The suite's groups narrowed to --network; networks the suite lacks
    form a group of their own, with the first group's settings."""
    groups = list(suite["groups"])
    if not options.networks:
        return groups
    present = {n for g in groups for n in g["networks"]}
    missing = [n for n in options.networks if n not in present]
    if missing and not options.batch_sizes:
        raise UserError(f"network(s) {', '.join(missing)} are not in suite "
                        f"{suite['name']}; give --batch-size for them")
    groups = [dict(g, networks=[n for n in g["networks"]
                                if n in options.networks]) for g in groups]
    if missing:
        groups.append(dict(suite["groups"][0], networks=missing))
    return groups


def _cells(group, options, m, host, choices):
    """(cell, profile choice) for every combination a group holds."""
    device = options.device or group["device"]
    frameworks = [f for f in options.frameworks
                  if group["frameworks"] is None or f in group["frameworks"]]
    batch_sizes = options.batch_sizes or group["batch_sizes"]
    if device == "cpu":
        thread_counts = options.threads or group["threads"] or [host.cpus]
        gpu_counts = [0]
    else:
        thread_counts = [None]
        gpu_counts = group["gpus"]
    for framework, network, batch, threads, gpus in itertools.product(
            frameworks, group["networks"], batch_sizes, thread_counts,
            gpu_counts):
        profile, choice = _profile(m, framework, device, options.profile,
                                   host, choices)
        cell = {
            "framework": framework,
            "profile": profile,
            "network": network,
            "dataset": "synthetic",
            "batch_size": batch,
            "global_batch_size": batch * max(gpus, 1),
            "device": device,
            "gpus": gpus,
            "threads": threads,
            "iterations": options.iterations or group["iterations"],
            "warmup": (options.warmup if options.warmup is not None
                       else group["warmup"]),
            "runtime": options.runtime,
            "seed": options.seed,
            "clock_policy": (options.clock_policy
                             or group.get("clock_policy", "observe")),
            "precision": (options.precision
                          or group.get("precision", "default")),
            "compile": options.compile or group.get("compile"),
        }
        assert tuple(cell) == CELL_FIELDS
        yield cell, choice


def _check_cell(cell):
    """UserError for a cell no framework can run as asked."""
    try:
        check_batch(cell["batch_size"], cell["framework"], cell["network"])
    except HarnessError as exc:
        raise UserError(str(exc))
    if cell["compile"] not in (None, "none") and cell["warmup"] < 1:
        raise UserError(f"--compile {cell['compile']} compiles in the "
                        f"first iteration: give --warmup 1 or more")


def job_for(cell, timeout_s, skip_reason=None, process=1, choice=None):
    """The job of one process of a cell: the first keeps the cell's id, so
    a run resumed with a larger --repeat adds processes to it. `choice`:
    how its GPU profile was chosen (recorded in its result)."""
    suffix = f"-p{process}" if process > 1 else ""
    return Job(id=cell_id(cell) + suffix, kind="bench", spec=cell,
               timeout_s=timeout_s,
               placement=Placement(cell["framework"], cell["profile"],
                                   cell["device"], cell["threads"],
                                   cell["gpus"], cell["clock_policy"]),
               skip_reason=skip_reason,
               profile_choice=choice.as_record() if choice else None,
               process=process)


def _skip_reason(cell, host):
    if cell["device"] == "cpu" and cell["threads"] > host.cpus:
        return (f"needs {cell['threads']} CPU threads; this host has "
                f"{host.cpus} usable CPUs")
    if cell["device"] == "gpu" and max(cell["gpus"], 1) > host.gpus:
        return (f"needs {max(cell['gpus'], 1)} GPU(s); this host has "
                f"{host.gpus}")
    return None


def format_plan(plan):
    """Lines describing a plan, for --dry-run: its GPU profiles chosen and
    why, then every cell."""
    choices = {}
    for item in plan:
        if item.profile_choice is not None:
            choices.setdefault(item.spec["framework"], item.profile_choice)
    lines = []
    if choices:
        lines.append("GPU profiles (--profile names another):")
        lines += gpuprofile.format_records(choices)
    lines.append(f"{len(plan)} cells:")
    for item in plan:
        c = item.spec
        note = f"  [unsupported: {item.skip_reason}]" if item.skip_reason else ""
        lines.append(f"  {item.id:<48} iterations={c['iterations']} "
                     f"warmup={c['warmup']} runtime={c['runtime']} "
                     f"isolation={item.isolation}{note}")
    return lines


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


def _checked(flag, check, value):
    """`check(value)` unless the flag is not given; its HarnessError as a
    one-line error naming `flag`."""
    if value is None:
        return
    try:
        check(value)
    except HarnessError as exc:
        raise UserError(f"{flag}: {exc}")


def options(m, *, framework, all_frameworks, profile, network, batch_size,
            device, threads, iterations, warmup, runtime, seed, clock_policy,
            timeout, repeat=None, precision=None, compile=None):
    """Options from `invoke bench`'s flags, each checked with a one-line
    error naming its flag."""
    from harness import networks, spec
    from harness.gpu import clocks
    from dlrepro import parse
    from dlrepro.run.runtimes import RUNTIMES
    if device not in (None, "cpu", "gpu"):
        raise UserError(f"--device must be cpu or gpu, got {device!r}")
    for flag, check, value in (("--clock-policy", clocks.parse_policy,
                                 clock_policy),
                                ("--precision", spec.check_precision,
                                 precision),
                                ("--compile", spec.check_compile, compile)):
        _checked(flag, check, value)
    if runtime not in RUNTIMES:
        raise UserError(f"unknown runtime {runtime!r}; valid runtimes: "
                        f"{', '.join(sorted(RUNTIMES))}")
    names = tuple(n for value in network or () for n in value.split(","))
    for name in names:
        # A name, or a transformer's NAME@STEPS (a sequence above its
        # context refused here): the harness's own check and words.
        try:
            networks.get(name)
        except HarnessError as exc:
            raise UserError(str(exc)) from None
    return Options(
        frameworks=select_frameworks(m, framework or (), all_frameworks),
        profile=profile, networks=names,
        batch_sizes=parse.counts(batch_size, "--batch-size"),
        device=device, threads=parse.counts(threads, "--threads"),
        iterations=parse.optional_count(iterations, "--iterations"),
        warmup=parse.optional_count(warmup, "--warmup", minimum=0),
        runtime=runtime,
        seed=parse.count(seed, "--seed", minimum=0, maximum=spec.MAX_SEED),
        clock_policy=clock_policy,
        timeout_s=parse.optional_count(timeout, "--timeout"),
        repeat=parse.optional_count(repeat, "--repeat",
                                     maximum=MAX_REPEAT),
        precision=precision, compile=compile)
