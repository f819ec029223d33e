"""What `invoke bench` and `invoke converge` share around the pipeline:
the Slurm flags, the executor they ask for, one start with the live
display, and the line for a run handed to Slurm without waiting.
"""
import sys
from dataclasses import dataclass, field, make_dataclass
from typing import Optional

from dlrepro.errors import UserError
from dlrepro.run import pipeline, progress, runfolder
from dlrepro.run.engines import ENGINES
from dlrepro.run.engines.slurm.options import FLAGS as SLURM_FLAGS, Options


def _engine_fields():
    # The Slurm options are slurm.Options' fields, written once there.
    defaults = Options._field_defaults
    return ([("executor", str, field(default="local"))]
            + [(name, bool if defaults[name] is False else Optional[str],
                field(default=defaults[name]))
               for name in SLURM_FLAGS]
            + [("slurm_config", Optional[str], field(default=None)),
               ("no_wait", bool, field(default=False))])


EngineFlags = make_dataclass("EngineFlags", _engine_fields())
EngineFlags.__module__ = __name__
EngineFlags.__doc__ = ("Where the jobs run, as the flags say (flaghelp.SLURM): "
                       "--executor, the Slurm options, --slurm-config, "
                       "--no-wait.")


@dataclass
class RunFlags(EngineFlags):
    """The flags bench and converge both take, with their one default."""
    framework: tuple = ()
    network: tuple = ()
    device: Optional[str] = None
    seed: str = "0"
    runtime: str = "docker"
    # Results go under the working directory, for every task.
    out: str = "results"
    resume: bool = False
    dry_run: bool = False
    timeout: Optional[str] = None


def executor_of(flags, suite, runtime_options):
    """The executor `flags` (EngineFlags) ask for."""
    return executor_for(
        flags.executor, suite, runtime_options, flags.no_wait,
        flags.slurm_config,
        **{name: getattr(flags, name) for name in SLURM_FLAGS})


def engine_class(executor):
    """The Engine class --executor names (the registry, ENGINES, is the
    one list of engines); UserError in one line for any other word."""
    if executor not in ENGINES:
        raise UserError(f"unknown executor {executor!r}; valid executors: "
                        f"{', '.join(ENGINES)}")
    return ENGINES[executor]


def executor_for(executor, suite, runtime_options, no_wait, slurm_config,
                 **flags):
    """The engine the flags ask for."""
    return engine_class(executor).from_flags(
        suite, runtime_options, no_wait, slurm_config, **flags)


def start(run, runtime, matrix, executor=None, events=None):
    """pipeline.start with the live display (or the caller's `events`);
    the run folder. A results root too deep for the run's files is
    refused first (runfolder.check_room)."""
    runfolder.check_room(run.out, run.name, [job.id for job in run.jobs])
    if events is not None:
        return pipeline.start(run, runtime, matrix, events, executor)
    with progress.events() as live:
        if executor is not None:
            executor.confirm = asking(live)
        return pipeline.start(run, runtime, matrix, live, executor)


def asking(events):
    """Ask yes/no on a terminal, the live display stopped first; elsewhere
    the answer is no."""
    def confirm(question):
        if not sys.stdin.isatty():
            print(f"{question} not asked (no terminal): left as it is",
                  file=sys.stderr)
            return False
        live = getattr(events, "progress", None)
        if live is not None:
            live.stop()  # it owns stdout while it runs
        try:
            return input(f"\n{question} [y/N] ").strip().lower() in (
                "y", "yes")
        except (EOFError, KeyboardInterrupt):
            return False
    return confirm


def submitted_line(run_dir, record):
    """What to say of a run submitted to Slurm without waiting."""
    arrays = [a["array_job_id"] for a in record.get("slurm", {}).get(
        "arrays", [])]
    return (f"{run_dir}: submitted to Slurm as array job(s) "
            f"{', '.join(arrays)}; `invoke report --run {run_dir}` shows "
            f"it, the same command with --resume waits for it")
