"""The podman runtime: the docker runtime's container (same image, same
read-only harness mount, same /results, no network, no capabilities,
no-new-privileges, a pids limit, the same user) run by Podman, which
clusters allow where no Docker daemon is.

What differs from docker:
  - the image comes into Podman's store as dlrepro.images.podman says
    (from the Docker engine, an `invoke save` folder, or `podman build`);
  - rootless where the invoking user is not root, with --userns keep-id so
    that the files the container writes are the user's;
  - rlimits: Podman's defaults (nofile 1048576...) exceed the hard limits
    of many sandboxes and batch nodes, and the OCI runtime then fails
    ("error setting rlimit"), so every rlimit podman would set is given
    explicitly, at the host's hard limit (read here, never assumed);
  - GPUs through CDI (`--device nvidia.com/gpu=N`; the node needs
    `nvidia-ctk cdi generate`), not --gpus;
  - the container's life through the podman command line, not an SDK.

Options (keyword arguments, or environment variables for `invoke bench`):
  archive_dir     an `invoke save` folder to load images from, over
                  DLREPRO_IMAGE_ARCHIVE
  from_docker     take images from a Docker engine when one answers
                  (default True)
  and the docker runtime's base_overrides, build, shm_size, memory, gpu_ids,
  registry.
"""
import os
import re
import resource
import shutil
import subprocess
from pathlib import Path

from dlrepro.errors import UserError
from dlrepro.images import build as images, podman as podman_images, pulls
from dlrepro.run import oomkills
from dlrepro.run.runtimes import Death, multinode, node_variables
from dlrepro.run.runtimes import docker

ARCHIVE_ENV = "DLREPRO_IMAGE_ARCHIVE"
# NVIDIA's recommendation for framework containers (as the docker runtime),
# lowered to the host's hard limit when that is smaller.
GPU_STACK_BYTES = 67108864
CLI_TIMEOUT_S = 120


def rootless():
    return os.geteuid() != 0


def hard_limit(which):
    """The host's hard limit for an rlimit, as podman's --ulimit writes it
    (-1: unlimited)."""
    hard = resource.getrlimit(which)[1]
    return -1 if hard == resource.RLIM_INFINITY else hard


def in_container(container_id):
    """Whether a memory cgroup path is the container's (libpod-<id>, with
    systemd's .scope or not; not its conmon's libpod-conmon-<id>)."""
    def test(_pid, memcg):
        return bool(container_id and memcg and
                    re.search(rf"(^|/)libpod-{re.escape(container_id)}"
                              rf"(\.scope)?(/|$)", memcg))
    return test


def read_pid_max(path="/proc/sys/kernel/pid_max"):
    try:
        with open(path) as handle:
            return int(handle.read())
    except (OSError, ValueError):
        return None


def ulimit_flags(gpu=False):
    """--ulimit flags for every rlimit podman sets by default, each at the
    host's hard limit, so that the OCI runtime never asks for more."""
    nproc = hard_limit(resource.RLIMIT_NPROC)
    pid_max = read_pid_max()
    if pid_max and (nproc == -1 or nproc > pid_max):
        # podman lowers its own (and so conmon's) nproc to pid_max when it
        # cannot raise it, and runc may not raise it back: more processes
        # than pids could not exist anyway.
        nproc = pid_max
    limits = {"nofile": hard_limit(resource.RLIMIT_NOFILE), "nproc": nproc}
    if gpu:
        limits["memlock"] = hard_limit(resource.RLIMIT_MEMLOCK)
        stack = hard_limit(resource.RLIMIT_STACK)
        limits["stack"] = GPU_STACK_BYTES if stack == -1 else min(
            stack, GPU_STACK_BYTES)
    flags = []
    for name, value in limits.items():
        flags += ["--ulimit", f"{name}={value}:{value}"]
    return flags


class Runtime(docker.Runtime):
    name = "podman"

    def __init__(self, podman_bin="podman", archive_dir=None,
                 from_docker=True, **options):
        super().__init__(docker_bin=podman_bin, **options)
        self.podman_bin = podman_bin
        self.archive_dir = archive_dir or os.environ.get(ARCHIVE_ENV) or None
        self.from_docker = from_docker
        self.store = podman_images.Store(podman_bin)
        self.kernel_logs = {}

    # -- the Runtime interface ------------------------------------------------

    def check(self):
        if shutil.which(self.podman_bin) is None:
            raise UserError(f"podman ({self.podman_bin}) is not installed "
                            f"(Debian: apt-get install podman; see "
                            f".ci/container-runtimes.sh) "
                            f"{images.NATIVE_HINT}")
        try:
            proc = subprocess.run([self.podman_bin, "version"],
                                  capture_output=True, text=True,
                                  timeout=CLI_TIMEOUT_S)
        except (OSError, subprocess.SubprocessError) as exc:
            raise UserError(f"podman does not run: {exc}")
        if proc.returncode != 0:
            raise UserError(f"podman does not run: "
                            f"{images.first_line(proc.stderr)}")

    def image_source(self):
        # The Docker engine, when there is one, to podman load from.
        return podman_images.docker_engine() if self.from_docker else None

    def ensure_image(self, framework, profile, base_image, client, log):
        if self.registry:
            return pulls.ensure("podman", framework, profile, self.matrix,
                                self.registry, source=self.store,
                                base_image=base_image, log=log)
        return podman_images.ensure(
            framework, profile, self.matrix, self.store,
            base_image=base_image, build_missing=self.build,
            archive_dir=self.archive_dir, client=client, log=log,
            name_prefix=self.name_prefix)

    def describe_image(self, tag):
        return dict(podman_images.describe(self.store, tag),
                    rootless=rootless())

    # -- the command line -----------------------------------------------------

    def run_argv(self, job, run_dir, tag, name):
        argv = super().run_argv(job, run_dir, tag, name)
        if multinode(job):
            # One node of several: the node's own network namespace (each
            # node its own; docs/multinode.md), and its engine's variables.
            at = argv.index("--network")
            argv[at + 1] = "host"
            for key, value in node_variables(self, job).items():
                argv[at:at] = ["--env", f"{key}={value}"]
        if rootless():
            # The invoking user inside is the invoking user outside: the
            # result files are theirs, as under docker.
            argv[2:2] = ["--userns", "keep-id"]
        return argv

    def engine_flags(self, placement):
        gpu = placement is not None and placement.device == "gpu"
        flags = ulimit_flags(gpu)
        if gpu:
            ids = (self.gpu_ids.split(",") if self.gpu_ids
                   else [str(i) for i in range(max(placement.gpus, 1))])
            for gpu_id in ids:
                flags += ["--device", f"nvidia.com/gpu={gpu_id.strip()}"]
            flags += ["--env", "NVIDIA_DRIVER_CAPABILITIES=compute,utility"]
        return flags

    # -- container life -------------------------------------------------------

    def _podman(self, *args, timeout=CLI_TIMEOUT_S):
        return podman_images.run(self.podman_bin, *args, timeout=timeout)

    def _stop(self, name):
        # SIGTERM first: the harness writes a partial result, then exits.
        self._podman("stop", "--time", str(docker.STOP_GRACE_S), name,
                     timeout=docker.STOP_GRACE_S + CLI_TIMEOUT_S)

    def _state(self, name):
        info = self._inspect(name)
        return info.get("State", {}) if info is not None else None

    def _kill(self, name):
        # Not running any more is no failure: podman kill then says so.
        self._podman("kill", name)

    def _inspect(self, name):
        return podman_images.inspected(self.podman_bin, "container", name,
                                       CLI_TIMEOUT_S)

    def client_cwd(self, run_dir):
        """The run folder: podman's container monitor (conmon) inherits
        podman's working directory and creates a file named `oom` there
        when the container is OOM-killed; in the repository's root it was
        litter in the user's checkout."""
        return str(run_dir)

    def container_launch(self, name, argv, run_dir):
        launch = super().container_launch(name, argv, run_dir)
        before = oomkills.machine_count()
        self._end_log(name)
        log = self.kernel_logs[name] = oomkills.KernelLog()
        return launch._replace(
            post_mortem=lambda _pid=None: self._post_mortem(name, before,
                                                            log))

    def cleanup(self, job, run_dir):
        super().cleanup(job, run_dir)
        self._end_log(docker.container_name(Path(run_dir).resolve(), job.id))

    def worker_cleanup(self, job, run_dir):
        super().worker_cleanup(job, run_dir)
        self._end_log(docker.worker_container_name(Path(run_dir).resolve(),
                                                   job.id))

    def _end_log(self, name):
        log = self.kernel_logs.pop(name, None)
        if log is not None:
            log.close()

    def _post_mortem(self, name, before, log):
        info = self._inspect(name)
        state = info.get("State", {}) if info is not None else None
        if state is None or state.get("OOMKilled"):
            return docker.death(state, "podman")
        after = oomkills.machine_count()
        if state.get("ExitCode") == 137 and before is not None \
                and after is not None and after > before:
            # Podman on cgroup v1 does not see its containers' OOM kills
            # (State.OOMKilled stays false), and the machine's count rose
            # for any process's: the kernel log names the victim's cgroup.
            oom, detail = oomkills.victim_verdict(
                log.victims(), in_container(info.get("Id")),
                "this container",
                f"the kernel's OOM killer ran meanwhile (/proc/vmstat "
                f"oom_kill {before} -> {after}); podman itself reports no "
                f"OOM kill", log.why)
            # The exit status leads: with another process's OOM kill in the
            # same moment, it is what says how this container ended.
            return Death(oom, f"the container exited with status 137; "
                              f"{detail}")
        return docker.death(state, "podman")

    def _remove(self, name):
        self._podman("rm", "--force", "--ignore", name)

    def _give_back(self, tag, run_dir, cell_id):
        """chown what a root container wrote to the invoking user (rootless,
        the files are the user's already)."""
        if not rootless():
            super()._give_back(tag, run_dir, cell_id)
