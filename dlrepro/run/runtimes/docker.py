"""The docker runtime: each cell's harness runs in its framework's image.

The repository's harness/ is mounted read-only (the image holds only the
framework), the run's folder read-write at /results, so the spec the sweep
wrote and the result the harness writes are host files. No network, CPU
cores pinned to the cell's thread count, GPUs through device requests, no
--privileged; CAP_SYS_ADMIN only for a clock policy that changes clocks.
The container runs as the invoking user, so result files are the user's.

Options (keyword arguments, or environment variables for `invoke bench`):
  base_overrides  {matrix base: replacement}; DLREPRO_BASE_OVERRIDES=
                  "FROM=TO[,FROM=TO]" (tests build FROM a debootstrap image)
  build           build missing images (default True)
  shm_size        --shm-size (default 2g: data loaders and NCCL use /dev/shm)
  memory          --memory limit (default none)
  gpu_ids         "0,1": which GPUs; default the first `gpus` of the host
"""
import os
import re
import shutil
import subprocess
from pathlib import Path

from harness import clocks

from dlrepro import ROOT, matrix as matrix_mod
from dlrepro.images import build as images
from dlrepro.errors import UserError
from dlrepro.run.runtimes import Launch

HARNESS_IN_CONTAINER = "/opt/dlrepro/harness"
RESULTS_IN_CONTAINER = "/results"
PYTHON_IN_CONTAINER = "/opt/venv/bin/python"
BASE_OVERRIDES_ENV = "DLREPRO_BASE_OVERRIDES"
DEFAULT_SHM_SIZE = "2g"
STOP_GRACE_S = 10
LABEL_CELL = "org.dlrepro.cell"


def parse_overrides(text):
    """{"FROM": "TO"} from "FROM=TO[,FROM=TO]"."""
    overrides = {}
    for item in (text or "").split(","):
        item = item.strip()
        if not item:
            continue
        if "=" not in item:
            raise UserError(f"{BASE_OVERRIDES_ENV}: {item!r} is not FROM=TO")
        old, new = item.split("=", 1)
        overrides[old.strip()] = new.strip()
    return overrides


def container_name(run_dir, cell_id):
    raw = f"dlrepro-{Path(run_dir).name}-{cell_id}"
    return re.sub(r"[^A-Za-z0-9_.-]", "-", raw)[:200]


def cpuset(threads, available=None):
    """The host CPUs a cell with `threads` threads is pinned to: the first
    `threads` CPUs this process may use (None: no pinning)."""
    if threads is None:
        return None
    cpus = sorted(available if available is not None
                  else os.sched_getaffinity(0))
    return ",".join(str(cpu) for cpu in cpus[:threads])


def clock_requirements(cell):
    """{"cap_add": [...], "env": {...}} the cell's clock policy needs; empty
    for a policy that only observes (harness.clocks decides)."""
    return clocks.container_requirements(cell.get("clock_policy") or "observe")


def changes_clocks(cell):
    return bool(clock_requirements(cell)["cap_add"])


class Runtime:
    name = "docker"

    def __init__(self, matrix=None, base_overrides=None, build=True,
                 shm_size=DEFAULT_SHM_SIZE, memory=None, gpu_ids=None,
                 docker_bin="docker", name_prefix=None, **_options):
        self.matrix = matrix if matrix is not None else matrix_mod.load()
        self.base_overrides = parse_overrides(os.environ.get(BASE_OVERRIDES_ENV))
        self.base_overrides.update(base_overrides or {})
        self.build = build
        self.shm_size = shm_size
        self.memory = memory
        self.gpu_ids = gpu_ids
        self.docker_bin = docker_bin
        self.name_prefix = name_prefix
        self.client = None
        self.images = {}
        self.descriptions = {}

    # -- the Runtime interface ------------------------------------------------

    def check(self):
        if shutil.which(self.docker_bin) is None:
            raise UserError(f"the docker client ({self.docker_bin}) is not "
                            f"installed; {images.NATIVE_HINT}")
        if self.client is None:
            self.client = images.engine()

    def prepare(self, targets, log=print):
        self.check()
        reasons = {}
        for framework, profile in targets:
            try:
                entry = matrix_mod.entry(self.matrix, framework, profile)
                tag = images.ensure(
                    framework, profile, self.matrix,
                    base_image=self.base_overrides.get(entry["base_image"]),
                    build_missing=self.build, client=self.client, log=log,
                    name_prefix=self.name_prefix)
                self.images[(framework, profile)] = tag
                self.descriptions[(framework, profile)] = images.describe(
                    self.client, tag)
                reasons[(framework, profile)] = None
            except images.BuildFailed:
                # A broken recipe is an error of its cells (the sweep records
                # it and goes on), not a limit of this machine.
                raise
            except UserError as exc:
                reasons[(framework, profile)] = str(exc)
        return reasons

    def describe(self, framework, profile):
        return self.descriptions[(framework, profile)]

    def launch(self, cell, run_dir, cell_id, subcommand="run",
               read_only=()):
        """`subcommand` is the harness's (`run`, or `converge` for
        convergence runs); `read_only` are host folders mounted at the same
        path, read-only (a convergence run's data)."""
        tag = self.images[(cell["framework"], cell["profile"])]
        run_dir = Path(run_dir).resolve()
        name = container_name(run_dir, cell_id)
        # A container of the same cell left by an interrupted run.
        self._remove(name)
        argv = self.run_argv(cell, run_dir, cell_id, tag, name, subcommand,
                             read_only)

        def cleanup():
            if changes_clocks(cell):
                self._give_back(tag, run_dir, cell_id)
            self._remove(name)

        return Launch(argv=argv, env=None, cwd=str(ROOT),
                      stop=lambda: self._stop(name),
                      post_mortem=lambda: self._post_mortem(name),
                      cleanup=cleanup)

    # -- the command line -----------------------------------------------------

    def run_argv(self, cell, run_dir, cell_id, tag, name, subcommand="run",
                 read_only=()):
        argv = [self.docker_bin, "run", "--name", name, "--init",
                "--label", f"{LABEL_CELL}={cell_id}",
                "--network", "none", "--shm-size", self.shm_size,
                "--security-opt", "no-new-privileges",
                "--workdir", "/tmp",
                "--volume", f"{ROOT / 'harness'}:{HARNESS_IN_CONTAINER}:ro",
                "--volume", f"{run_dir}:{RESULTS_IN_CONTAINER}",
                "--env", "PYTHONPATH=/opt/dlrepro",
                "--env", "PYTHONUNBUFFERED=1",
                "--env", "PYTHONDONTWRITEBYTECODE=1",
                "--env", "HOME=/tmp"]
        for folder in read_only:
            argv += ["--volume", f"{folder}:{folder}:ro"]
        needs = clock_requirements(cell)
        if needs["cap_add"]:
            # NVML's set calls need root and CAP_SYS_ADMIN; cleanup hands
            # the result files back to the invoking user.
            argv += ["--user", "0:0"]
            for cap in needs["cap_add"]:
                argv += ["--cap-add", cap]
            for name, value in sorted(needs["env"].items()):
                argv += ["--env", f"{name}={value}"]
        else:
            argv += ["--user", f"{os.getuid()}:{os.getgid()}"]
        cpus = cpuset(cell["threads"]) if cell["device"] == "cpu" else None
        if cpus:
            argv += ["--cpuset-cpus", cpus]
        if self.memory:
            argv += ["--memory", str(self.memory)]
        if cell["device"] == "gpu":
            count = max(cell["gpus"], 1)
            argv += ["--gpus", f'"device={self.gpu_ids}"' if self.gpu_ids
                     else str(count),
                     "--env", "NVIDIA_DRIVER_CAPABILITIES=compute,utility",
                     # NVIDIA's recommendation for framework containers.
                     "--ulimit", "memlock=-1", "--ulimit", "stack=67108864"]
        argv += [tag, PYTHON_IN_CONTAINER, "-s", "-m", "harness", subcommand,
                 "--spec", f"{RESULTS_IN_CONTAINER}/{cell_id}.spec.json",
                 "--out", f"{RESULTS_IN_CONTAINER}/{cell_id}.json"]
        return argv

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

    def _post_mortem(self, name):
        container = self._container(name)
        if container is None:
            return "container vanished before it could be inspected"
        state = container.attrs.get("State", {})
        code = state.get("ExitCode")
        if state.get("OOMKilled"):
            return f"container OOM-killed (exit {code})"
        if state.get("Error"):
            return f"container failed to start: {state['Error']}"
        if code == 137:
            return "container killed (exit 137: SIGKILL)"
        if code:
            return f"container exited with status {code}"
        return None

    def _remove(self, name):
        container = self._container(name)
        if container is not None:
            container.remove(force=True)

    def _give_back(self, tag, run_dir, cell_id):
        """chown what a root container wrote (the result, the clock-state
        file) to the invoking user, from inside a container: the user may
        not chown root's files on the host."""
        names = [path.name for path in run_dir.glob(f"{cell_id}.*")
                 if path.stat().st_uid != os.getuid()]
        if not names:
            return
        subprocess.run([self.docker_bin, "run", "--rm", "--network", "none",
                        "--user", "0:0", "--volume",
                        f"{run_dir}:{RESULTS_IN_CONTAINER}", "--entrypoint",
                        "chown", tag, f"{os.getuid()}:{os.getgid()}"]
                       + [f"{RESULTS_IN_CONTAINER}/{name}" for name in names],
                       capture_output=True, check=False)
