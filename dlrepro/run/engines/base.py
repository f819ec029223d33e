"""What every engine is: where and when a run's jobs run. The pipeline
prepares a run (its folder, run.json, the runtime) and hands its jobs to
an engine through one Context; the engine runs them (here, or elsewhere
and waits), keeps their run.json entries true, and says how the run
ended. An engine never imports the pipeline."""
import abc
from dataclasses import dataclass, field
from pathlib import Path

from dlrepro.errors import UserError
from dlrepro.run import nodeenv, runrecord
from dlrepro.run.events import Events
from dlrepro.run.life import JobLife
from dlrepro.run.process import Processes


@dataclass
class Context:
    """One run's jobs as the pipeline hands them to an engine."""
    jobs: list
    run_dir: Path
    record: dict                    # run.json, written by the engine
    done: dict                      # {job id: entry} finished before
    # Each job's life here (run/life.py): unrunnable, prepare, run, finish.
    life: JobLife
    events: Events = field(default_factory=Events)
    # run.json's `isolation` (dlrepro.run.groups.summary): "cell",
    # "group", or {framework: mode}; each job's own is `job.isolation`.
    isolation: object = "cell"

    def entries(self):
        """{job id: run.json entry}."""
        return {e["id"]: e for e in self.record["jobs"]}

    def save(self):
        runrecord.write_run(self.run_dir, self.record)


class Engine(abc.ABC):
    """Where and when jobs run. `name` is the --executor value and what
    run.json's `executor` records."""
    name: str = ""
    # Its jobs may still run after dlrepro exits (a batch queue): a run it
    # left is resumed by it alone, and its folder may hold files being
    # written by those jobs.
    detached: bool = False
    # It can feed a group's jobs to one worker (--isolation group).
    runs_groups: bool = False
    # Asked on Ctrl-C where jobs could be left running ("cancel them?" ->
    # bool); None: never asked. The command sets it to ask on a terminal.
    confirm = None
    # How the jobs it runs here run as processes (the life of the run's
    # jobs takes them from here); a batch engine's run on its nodes.
    processes: Processes = Processes()

    @classmethod
    def from_flags(cls, suite, runtime_options, no_wait, config, **flags):
        """The engine the command line asks for: `flags` are the options of
        a batch engine (today Slurm's, flaghelp.SLURM), `config` its TOML
        file, `no_wait` to submit and leave; UserError in one line for one
        this engine does not take."""
        given = [k for k, v in dict(flags, no_wait=no_wait,
                                    slurm_config=config).items()
                 if v not in (None, False)]
        if given:
            raise UserError(f"--{given[0].replace('_', '-')} needs "
                            f"--executor slurm")
        return cls()

    def check(self, jobs, isolation="cell"):
        """Fail (UserError) before any run folder exists when the jobs
        cannot run through this engine, in `isolation`'s processes
        (dlrepro.run.groups)."""

    @abc.abstractmethod
    def execute(self, context):
        """Run the context's jobs, keeping their run.json entries true;
        the run's status: "complete", or "submitted" when they were left
        to run on (run.json stays open). KeyboardInterrupt stops or
        leaves the jobs in flight, then propagates."""

    def stopped(self):
        """After Ctrl-C: what became of the jobs in flight."""
        return "the running job was stopped"

    @staticmethod
    def node_env(environ):
        """The NodeEnv (run/nodeenv.py) of a process this engine started
        on a node, from its environment `environ`: all the node entry
        (run/node.py) and the runtimes know of the engine."""
        return nodeenv.local()
