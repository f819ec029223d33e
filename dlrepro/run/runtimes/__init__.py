"""What a job's harness process runs in: a native virtual environment or a
container. The executor (where and when a job runs: one process at a time
on this host today, a Slurm job array tomorrow) only ever talks to the
Runtime interface below, so a new runtime is one module and one line in
RUNTIMES.
"""
import abc
import importlib
from typing import Callable, NamedTuple, Optional

from dlrepro.errors import UserError
from dlrepro.run import paths
from dlrepro.run.nodeenv import LOCAL

RUNTIMES = {
    "native": "dlrepro.run.runtimes.native",
    "docker": "dlrepro.run.runtimes.docker",
    "podman": "dlrepro.run.runtimes.podman",
    "charliecloud": "dlrepro.run.runtimes.charliecloud",
}


class Death(NamedTuple):
    """What a runtime can tell about a process that ended without a
    result: whether the kernel's OOM killer did it (None: cannot tell),
    and a one-line detail for the message."""
    oom: Optional[bool]
    detail: Optional[str] = None


class Launch(NamedTuple):
    argv: list
    env: Optional[dict] = None
    cwd: Optional[str] = None
    # Called on timeout or interrupt instead of signalling the client
    # process (a container must be stopped through its engine). None:
    # SIGTERM the child, then SIGKILL after a grace period.
    stop: Optional[Callable[[], None]] = None
    # Called when the process must end now (its grace is over, or Ctrl-C
    # came again) before its client process is killed: a container is
    # killed through its engine, which the client's death does not do.
    # None: SIGKILL to the process's group is all.
    kill: Optional[Callable[[], None]] = None
    # Called with the process's pid after it exited without a result
    # file: a Death.
    post_mortem: Optional[Callable[[Optional[int]], Death]] = None
    # A group's worker only (Runtime.worker_launch): the run folder as the
    # worker sees it, which the spec paths fed on its stdin are under.
    results_dir: Optional[str] = None
    # A fork server's worker only, where its children's pids are not this
    # host's (a container's PID namespace): signal(pid, signum) sends a
    # signal to one of them, host_pid(pid) finds its pid here while it
    # runs (None: gone). None: the pids are this host's (os.kill).
    signal: Optional[Callable[[int, int], None]] = None
    host_pid: Optional[Callable[[int], Optional[int]]] = None


class Runtime(abc.ABC):
    name = None
    # The node this runtime launches on (dlrepro.run.nodeenv), as its
    # engine filled it: what a job on several nodes needs from the engine
    # comes from here, never from the engine's own variables.
    node = LOCAL

    @abc.abstractmethod
    def check(self):
        """Raise UserError when this runtime cannot work here at all (no
        engine, no usable interpreter)."""

    def ready(self, jobs):
        """Raise UserError when one of `jobs` can never run here as asked
        (an image not converted for this runtime, a clock policy it cannot
        apply): called before a run folder is made, so nothing runs."""

    @abc.abstractmethod
    def prepare(self, targets, log=print):
        """Make each (framework, profile) ready (environment, image).
        Returns {target: None, or why it cannot run here}; raises UserError
        when making one failed."""

    @abc.abstractmethod
    def describe(self, target):
        """What results record as `container` for a prepared target (None
        natively)."""

    @abc.abstractmethod
    def launch(self, job, run_dir):
        """A Launch that starts the harness for `job`, whose spec is
        run_dir/<id>.spec.json and whose result must land at
        run_dir/<id>.json."""

    def cleanup(self, job, run_dir):
        """After the job's process has ended, whatever happened."""

    def harness_results_dir(self, run_dir):
        """The run folder as the harness sees it (a container mounts it
        elsewhere)."""
        return str(run_dir)

    def worker_launch(self, job, run_dir, launch):
        """A Launch that starts `python -m harness worker` for the group
        whose first job is `job` (`launch`: that job's own Launch), reading
        spec paths on its stdin. Here: the job's process with the worker's
        arguments; its post_mortem None, because each cell's own launch
        tells how the process died (by its pid)."""
        seen = self.harness_results_dir(run_dir)
        return launch._replace(argv=worker_argv(launch.argv, job, seen),
                               post_mortem=None, results_dir=seen)

    def worker_cleanup(self, job, run_dir):
        """After the worker of the group whose first job is `job` has
        ended, whatever happened (and after its last cell's post-mortem)."""


def get(name, node=LOCAL, **options):
    """The runtime `name`, launching on `node` (a NodeEnv)."""
    try:
        module = RUNTIMES[name]
    except KeyError:
        raise UserError(f"unknown runtime {name!r}; valid runtimes: "
                        f"{', '.join(sorted(RUNTIMES))}")
    runtime = importlib.import_module(module).Runtime(**options)
    runtime.node = node
    return runtime


def multinode(job):
    """A job whose harness runs on one node of several: it needs the node's
    network (not `--network none`) and its engine's variables
    (node_variables)."""
    return job.nodes > 1


def node_variables(runtime, job):
    """The engine's variables for the harness of `job` (name -> value,
    sorted): frameworks find the other nodes by them. A job on one node
    is given none."""
    if not multinode(job):
        return {}
    return dict(sorted(runtime.node.variables.items()))


WORKER_ARGS = ["-s", "-m", "harness", "worker"]


def harness_args(job, results_dir):
    """The harness's command line after the interpreter, for a job whose
    files are in `results_dir` as the harness sees it."""
    seen = paths.seen_in(results_dir, job.id)
    return ["-s", "-m", "harness", job.harness_command,
            "--spec", seen["spec"], "--out", seen["result"]]


def worker_argv(argv, job, results_dir):
    """A job's command line `argv` with its harness's arguments (as
    harness_args(job, results_dir) writes them, last) replaced by the
    worker's: the runtime chose the interpreter, the environment and the
    container."""
    tail = harness_args(job, results_dir)
    if argv[-len(tail):] != tail:
        raise RuntimeError(f"the runtime's command line does not end in "
                           f"the harness's arguments: {argv}")
    fork = ["--fork"] if job.isolation == "fork" else []
    return argv[:-len(tail)] + WORKER_ARGS + fork
