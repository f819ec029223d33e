"""The docker runtime: each cell's harness runs in its framework's image.

The repository's harness/ is mounted read-only (the image holds only the
framework), the run's folder read-write at /results, so the spec the sweep
wrote and the result the harness writes are host files. No network, CPU
cores pinned to the cell's thread count, GPUs through device requests, no
--privileged, no capabilities (--cap-drop ALL), no-new-privileges and a
pids limit; CAP_SYS_ADMIN (and DAC_OVERRIDE) only for a clock policy that
changes clocks.
The container runs as the invoking user, so result files are the user's.

Options (keyword arguments, or environment variables for `invoke bench`):
  base_overrides  {matrix base: replacement}, over DLREPRO_BASE_OVERRIDES=
                  "FROM=TO[,FROM=TO]", which `invoke build` reads alike
                  (dlrepro.images.build.substituted_base)
  build           build missing images (default True)
  shm_size        --shm-size (default 2g: data loaders and NCCL use /dev/shm)
  memory          --memory limit (default none)
  gpu_ids         "0,1": which GPUs; default the first `gpus` of the host
  registry        pull a missing image by the digest the registry lock
                  records instead of building it (dlrepro.images.pulls),
                  over DLREPRO_REGISTRY
"""
import os
import re
import shutil
import subprocess
from pathlib import Path

from harness.gpu import clocks

from dlrepro import ROOT, matrix as matrix_mod
from dlrepro.errors import UserError
from dlrepro.images import build as images, pulls
from dlrepro.images.registry import REGISTRY_ENV
from dlrepro.run.runtimes import Death, Launch, Runtime as Base, harness_args
from dlrepro.run.runtimes import forkchild, worker_argv

HARNESS_IN_CONTAINER = "/opt/dlrepro/harness"
RESULTS_IN_CONTAINER = "/results"
PYTHON_IN_CONTAINER = "/opt/venv/bin/python"
# The one base substitution setting, read as every image command reads it.
BASE_OVERRIDES_ENV = images.BASE_OVERRIDES_ENV
parse_overrides = images.parse_overrides
DEFAULT_SHM_SIZE = "2g"
STOP_GRACE_S = 10
LABEL_CELL = "org.dlrepro.cell"
# Enough for a framework's thread pools and data-parallel workers; a fork
# bomb in a job stops there instead of taking the host down.
PIDS_LIMIT = 4096


def container_name(run_dir, cell_id):
    """The job's container: named by the run folder's parent and its own
    name, not its name alone, because a multi-node job's node r > 0 runs
    in RUN/nodes (dlrepro.run.cluster), named alike in every run: two
    runs sharing a node's store (podman on one host) would otherwise both
    name node 1's container dlrepro-nodes-<job>.node1, and each launch's
    removal of a leftover container would remove the other run's live one."""
    run_dir = Path(run_dir)
    raw = f"dlrepro-{run_dir.parent.name}-{run_dir.name}-{cell_id}"
    return re.sub(r"[^A-Za-z0-9_.-]", "-", raw)[:200]


def worker_container_name(run_dir, first_id):
    """The container of a group's worker (--isolation group), named after
    the group's first job."""
    return container_name(run_dir, f"{first_id}.worker")


def cpuset(threads, available=None):
    """The host CPUs a cell with `threads` threads is pinned to: the first
    `threads` CPUs this process may use (None: no pinning)."""
    if threads is None:
        return None
    cpus = sorted(available if available is not None
                  else os.sched_getaffinity(0))
    return ",".join(str(cpu) for cpu in cpus[:threads])


def clock_requirements(placement):
    """{"cap_add": [...], "env": {...}} the job's clock policy needs; empty
    for a policy that only observes (harness.gpu.clocks decides)."""
    return clocks.container_requirements(placement.clock_policy or "observe")


def changes_clocks(placement):
    return bool(clock_requirements(placement)["cap_add"])


class Runtime(Base):
    name = "docker"

    def __init__(self, matrix=None, base_overrides=None, build=True,
                 shm_size=DEFAULT_SHM_SIZE, memory=None, gpu_ids=None,
                 docker_bin="docker", name_prefix=None, registry=None,
                 **_options):
        self.matrix = matrix if matrix is not None else matrix_mod.load()
        # DLREPRO_BASE_OVERRIDES, as `invoke build` reads it, then the
        # base_overrides option.
        self.substitution = images.substitution(mapping=base_overrides)
        self.build = build
        self.shm_size = shm_size
        self.memory = memory
        self.gpu_ids = gpu_ids
        self.docker_bin = docker_bin
        self.name_prefix = name_prefix
        self.registry = registry or os.environ.get(REGISTRY_ENV) or None
        self.client = None
        self.images = {}
        self.descriptions = {}
        # A fork server's children, by its container's name.
        self.children = {}

    # -- the Runtime interface ------------------------------------------------

    def check(self):
        if shutil.which(self.docker_bin) is None:
            raise UserError(f"the docker client ({self.docker_bin}) is not "
                            f"installed; {images.NATIVE_HINT}")
        if self.client is None:
            self.client = images.engine()

    def prepare(self, targets, log=print):
        self.check()
        source = self.image_source()
        reasons = {}
        for framework, profile in targets:
            try:
                entry = matrix_mod.entry(self.matrix, framework, profile)
                base = images.substituted_base(entry, self.substitution) \
                    or entry["base_image"]
                tag = self.ensure_image(framework, profile, base, source, log)
                self.images[(framework, profile)] = tag
                self.descriptions[(framework, profile)] = \
                    self.describe_image(tag)
                reasons[(framework, profile)] = None
            except images.BuildFailed:
                # A broken recipe is an error of its cells (the sweep records
                # it and goes on), not a limit of this machine.
                raise
            except UserError as exc:
                reasons[(framework, profile)] = str(exc)
        return reasons

    # Where engines differ in finding or building an image (podman's
    # runtime overrides these three).

    def image_source(self):
        return self.client

    def ensure_image(self, framework, profile, base_image, client, log):
        if self.registry:
            return pulls.ensure("docker", framework, profile, self.matrix,
                                self.registry, source=client,
                                base_image=base_image, log=log)
        return images.ensure(framework, profile, self.matrix,
                             base_image=base_image,
                             build_missing=self.build, client=client,
                             log=log, name_prefix=self.name_prefix)

    def describe_image(self, tag):
        return images.describe(self.client, tag)

    def describe(self, target):
        return self.descriptions[target]

    def launch(self, job, run_dir):
        run_dir = Path(run_dir).resolve()
        name = container_name(run_dir, job.id)
        tag = self.images[job.placement.target]
        return self.container_launch(name,
                                     self.run_argv(job, run_dir, tag, name),
                                     run_dir)

    def cleanup(self, job, run_dir):
        run_dir = Path(run_dir).resolve()
        if changes_clocks(job.placement):
            self._give_back(self.images[job.placement.target], run_dir,
                            job.id)
        self._remove(container_name(run_dir, job.id))

    def worker_launch(self, job, run_dir, launch):
        """The group's own container, named after its first job apart from
        that job's (whose cleanup after its cell must not remove it), with
        stdin attached for the spec paths, which are under /results."""
        run_dir = Path(run_dir).resolve()
        self._remove_left_workers(run_dir)
        name = worker_container_name(run_dir, job.id)
        argv = self.run_argv(job, run_dir, self.images[job.placement.target],
                             name)
        argv = worker_argv(argv, job, self.harness_results_dir(run_dir))
        argv[2:2] = ["--interactive"]
        launch = self.container_launch(name, argv, run_dir)._replace(
            results_dir=self.harness_results_dir(run_dir))
        if job.isolation != "fork":
            return launch
        # A fork server: its cells are children in the container's PID
        # namespace (runtimes/forkchild.py).
        self._end_children(name)
        children = self.children[name] = forkchild.Children(
            lambda: self._state(name), launch.post_mortem)
        return launch._replace(
            signal=forkchild.signal_in(self.docker_bin, name,
                                       PYTHON_IN_CONTAINER),
            host_pid=children.host_pid, post_mortem=children.post_mortem)

    def harness_results_dir(self, run_dir):
        return RESULTS_IN_CONTAINER

    def worker_cleanup(self, job, run_dir):
        name = worker_container_name(Path(run_dir).resolve(), job.id)
        self._end_children(name)
        self._remove(name)

    def client_cwd(self, run_dir):
        """Where the container's client runs: docker's writes nothing
        there."""
        return str(ROOT)

    def _end_children(self, name):
        children = self.children.pop(name, None)
        if children is not None:
            children.close()

    def container_launch(self, name, argv, run_dir):
        """The Launch of `argv`, which runs the container `name` for a job
        of `run_dir`: stopped and inspected by that name."""
        # A container of the same name left by an interrupted run.
        self._remove(name)
        return Launch(argv=argv, env=None, cwd=self.client_cwd(run_dir),
                      stop=lambda: self._stop(name),
                      kill=lambda: self._kill(name),
                      post_mortem=lambda _pid=None: self._post_mortem(name))

    # -- the command line -----------------------------------------------------

    def run_argv(self, job, run_dir, tag, name):
        placement = job.placement
        argv = [self.docker_bin, "run", "--name", name, "--init",
                "--label", f"{LABEL_CELL}={job.id}",
                "--network", "none", "--shm-size", self.shm_size,
                "--security-opt", "no-new-privileges",
                "--cap-drop", "ALL", "--pids-limit", str(PIDS_LIMIT),
                "--workdir", "/tmp",
                "--volume", f"{ROOT / 'harness'}:{HARNESS_IN_CONTAINER}:ro",
                "--volume", f"{run_dir}:{RESULTS_IN_CONTAINER}",
                "--env", "PYTHONPATH=/opt/dlrepro",
                "--env", "PYTHONUNBUFFERED=1",
                "--env", "PYTHONDONTWRITEBYTECODE=1",
                "--env", "HOME=/tmp"]
        for folder in job.mounts:
            argv += ["--volume", f"{folder}:{folder}:ro"]
        needs = clock_requirements(placement)
        if needs["cap_add"]:
            # NVML's set calls need root and CAP_SYS_ADMIN; cleanup hands
            # the result files back to the invoking user.
            argv += ["--user", "0:0"]
            # DAC_OVERRIDE: root without it cannot write into the invoking
            # user's run folder.
            for cap in sorted(set(needs["cap_add"]) | {"DAC_OVERRIDE"}):
                argv += ["--cap-add", cap]
            for name, value in sorted(needs["env"].items()):
                argv += ["--env", f"{name}={value}"]
        else:
            argv += ["--user", f"{os.getuid()}:{os.getgid()}"]
        cpus = (cpuset(placement.threads) if placement.device == "cpu"
                else None)
        if cpus:
            argv += ["--cpuset-cpus", cpus]
        if self.memory:
            argv += ["--memory", str(self.memory)]
        argv += self.engine_flags(placement)
        return argv + [tag, PYTHON_IN_CONTAINER] + harness_args(
            job, RESULTS_IN_CONTAINER)

    def engine_flags(self, placement):
        """The flags in which engines differ: GPUs and rlimits (podman's
        runtime overrides this); placement None: a helper container."""
        if placement is None or placement.device != "gpu":
            return []
        count = max(placement.gpus, 1)
        return ["--gpus", f'"device={self.gpu_ids}"' if self.gpu_ids
                else str(count),
                "--env", "NVIDIA_DRIVER_CAPABILITIES=compute,utility",
                # NVIDIA's recommendation for framework containers.
                "--ulimit", "memlock=-1", "--ulimit", "stack=67108864"]

    # -- container life ---------------------------------------------------------

    def _container(self, name):
        import docker  # the SDK; only this runtime needs it
        try:
            return self.client.containers.get(name)
        except docker.errors.NotFound:
            return None

    def _stop(self, name):
        # SIGTERM first: the harness writes a partial result, then exits.
        container = self._container(name)
        if container is not None:
            container.stop(timeout=STOP_GRACE_S)

    def _state(self, name):
        """The container's State as the engine inspects it; None: gone."""
        container = self._container(name)
        return container.attrs.get("State", {}) if container else None

    def _kill(self, name):
        # Ctrl-C again during the stop's grace: the container itself, which
        # outlives its killed client.
        import docker
        container = self._container(name)
        try:
            if container is not None:
                container.kill()
        except docker.errors.APIError:
            pass  # not running any more

    def _post_mortem(self, name):
        container = self._container(name)
        return death(container.attrs.get("State", {})
                     if container is not None else None, "the engine")

    def _remove(self, name):
        container = self._container(name)
        if container is not None:
            container.remove(force=True)

    def _remove_left_workers(self, run_dir):
        """The workers' containers of this run folder that a killed run
        left (named after a group's first job, which --resume does not run
        again); the run folder's lock keeps any other run out of it, and
        its own worker ends before the next starts."""
        prefix = container_name(run_dir, "")
        proc = subprocess.run([self.docker_bin, "ps", "--all", "--filter",
                               f"name={prefix}", "--format", "{{.Names}}"],
                              capture_output=True, text=True, check=False)
        for name in proc.stdout.split():
            if name.startswith(prefix) and name.endswith(".worker"):
                self._remove(name)

    def _give_back(self, tag, run_dir, cell_id):
        """chown what a root container wrote (the result, the clock-state
        file) to the invoking user, from inside a container: the user may
        not chown root's files on the host."""
        names = [path.name for path in run_dir.glob(f"{cell_id}.*")
                 if path.stat().st_uid != os.getuid()]
        if not names:
            return
        subprocess.run([self.docker_bin, "run", "--rm", "--network", "none",
                        "--security-opt", "no-new-privileges",
                        "--cap-drop", "ALL", "--cap-add", "CHOWN",
                        "--user", "0:0", *self.engine_flags(None),
                        "--volume", f"{run_dir}:{RESULTS_IN_CONTAINER}",
                        "--entrypoint", "chown", tag,
                        f"{os.getuid()}:{os.getgid()}"]
                       + [f"{RESULTS_IN_CONTAINER}/{name}" for name in names],
                       capture_output=True, check=False)


def death(state, engine):
    """How a container ended, from its inspected State (None: it is gone),
    as `engine` reported it."""
    if state is None:
        return Death(None, "the container vanished before it could be "
                           "inspected")
    code = state.get("ExitCode")
    if state.get("OOMKilled"):
        return Death(True, f"{engine} reports the container OOM-killed "
                           f"(exit {code})")
    if state.get("Error"):
        return Death(None, f"the container failed to start: "
                           f"{state['Error']}")
    return Death(False, f"the container exited with status {code}; "
                        f"{engine} reports no OOM kill")
