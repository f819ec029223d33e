"""The charliecloud runtime: each cell's harness runs by `ch-run` in its
framework's image converted to a directory (dlrepro.images.charliecloud),
unprivileged, in user namespaces, with no daemon: what HPC centres allow.

Isolation as close to the docker runtime as Charliecloud gets:
  - the harness read-only at /opt/dlrepro/harness and data folders
    read-only at their own paths: ch-run 0.31 binds read-write only, so the
    command first enters a user and mount namespace of its own (`unshare
    --user --map-root-user --mount --net`), bind-mounts each of them
    read-only onto its mount point inside the image folder (private to that
    namespace: the shared image is untouched), then runs ch-run, whose
    recursive bind of the image keeps them read-only;
  - no network: that namespace has only a loopback device;
  - the run folder read-write at /results; a private /tmp (--private-tmp);
  - the image's environment (/ch/environment) and ours, never the caller's:
    ch-run passes its own environment through, so it starts with a minimal one;
  - CPUs pinned to the cell's thread count with taskset;
  - the invoking user's own uid inside; no capabilities reach the host.
What Charliecloud cannot do (no cgroups): a memory limit, a pids limit. An
out-of-memory kill is told from another SIGKILL by the kernel's OOM count,
as natively. Clock-changing GPU policies need root: refused here.

GPUs: `ch-fromhost --nvidia IMAGE` copies the host's NVIDIA libraries
into the image folder; prepare does it once per image and node driver,
only for GPU targets, and records it beside the image.

An image that is not converted yet is a one-line error before the run
starts, naming the command that converts it (`invoke ch-convert`):
conversion takes a minute and gigabytes per image and needs Docker or
Podman, which compute nodes lack; it is done once, on a host that has one,
into the shared images folder, not by each job.

Options (keyword arguments, or environment variables for `invoke bench`):
  images_dir   the converted images, over DLREPRO_CH_IMAGES (default
               build/charliecloud)
  base_overrides, gpu_ids, registry as for docker (registry: `ch-image
               pull` of the locked digest, dlrepro.images.pulls).
"""
import hashlib
import os
import shutil
import subprocess
from pathlib import Path

from harness.gpu import clocks

from dlrepro import ROOT, matrix as matrix_mod
from dlrepro.errors import UserError
from dlrepro.images import build as images, charliecloud as ch_images
from dlrepro.images import podman as podman_images, pulls, registry
from dlrepro.images.registry import REGISTRY_ENV
from dlrepro.run import oomkills
from dlrepro.run.runtimes import Death, Launch, Runtime as Base, harness_args
from dlrepro.run.runtimes import multinode, node_variables
from dlrepro.run.runtimes import docker

HARNESS_IN_CONTAINER = docker.HARNESS_IN_CONTAINER
RESULTS_IN_CONTAINER = docker.RESULTS_IN_CONTAINER
PYTHON_IN_CONTAINER = docker.PYTHON_IN_CONTAINER
# Inside `unshare --user --map-root-user --mount --net`: brings the new
# network namespace's loopback up (data-parallel workers rendezvous on it;
# a new namespace's lo is down), binds each SRC read-only onto DST (pairs
# up to "--"), then runs the rest.
READ_ONLY_BINDS = ('set -e; ip link set lo up; while [ "$1" != -- ]; do '
                   'mount --bind "$1" "$2"; mount -o remount,bind,ro "$2"; '
                   'shift 2; done; shift; exec "$@"')
ENVIRONMENT = {"PYTHONPATH": "/opt/dlrepro", "PYTHONUNBUFFERED": "1",
               "PYTHONDONTWRITEBYTECODE": "1", "HOME": "/tmp"}
NVIDIA_MARK = "nvidia-from-host"


def user_name():
    return os.environ.get("USER") or ch_images._user()


class Runtime(Base):
    name = "charliecloud"

    def __init__(self, matrix=None, base_overrides=None, images_dir=None,
                 gpu_ids=None, ch_run="ch-run", name_prefix=None,
                 registry=None, **_options):
        self.matrix = matrix if matrix is not None else matrix_mod.load()
        self.substitution = images.substitution(mapping=base_overrides)
        self.images_dir = ch_images.images_dir(images_dir)
        self.gpu_ids = gpu_ids
        self.ch_run = ch_run
        self.name_prefix = name_prefix
        self.registry = registry or os.environ.get(REGISTRY_ENV) or None
        self.records = {}
        self.watches = oomkills.Watches()

    # -- the Runtime interface ------------------------------------------------

    def check(self):
        for binary, package in ((self.ch_run, "charliecloud-runtime"),
                                ("unshare", "util-linux"),
                                ("ip", "iproute2"),
                                ("taskset", "util-linux")):
            if shutil.which(binary) is None:
                raise UserError(f"{binary} is not installed (Debian: "
                                f"{package}; see .ci/container-runtimes.sh) "
                                f"{images.NATIVE_HINT}")

    def ready(self, jobs):
        for job in jobs:
            policy = job.placement.clock_policy or "observe"
            if clocks.container_requirements(policy)["cap_add"]:
                raise UserError(f"clock policy {policy} changes GPU clocks, "
                                f"which needs root: not under charliecloud "
                                f"(use observe)")
        for framework, profile in sorted({job.placement.target
                                          for job in jobs}):
            self._record(framework, profile)

    def prepare(self, targets, log=print):
        reasons = {}
        for framework, profile in targets:
            record = self._record(framework, profile)
            if matrix_mod.entry(self.matrix, framework,
                                profile)["device"] == "gpu":
                self._inject_nvidia(record, log)
            self.records[(framework, profile)] = record
            reasons[(framework, profile)] = None
        return reasons

    def describe(self, target):
        record = self.records[target]
        return {
            "runtime": "charliecloud",
            "image": record["tag"],
            "image_id": record["image_id"],
            "repo_digest": None,
            "pullable": record.get("reference") or registry.pullable(
                recipe=record["labels"].get(images.LABEL_RECIPE)),
            "labels": record["labels"],
            "engine_version": ch_images.ch_version(self.ch_run),
            "image_path": record["path"],
            "converted_from": record["source"],
            "converted_at": record["converted_at"],
        }

    def launch(self, job, run_dir):
        placement = job.placement
        record = self.records[placement.target]
        image = Path(record["path"])
        binds = [(str(ROOT / "harness"), str(image / HARNESS_IN_CONTAINER[1:]))]
        data_binds = []
        for folder in job.mounts:
            folder = str(Path(folder).resolve())
            # Made read-only onto itself out here, then bound by ch-run
            # (a bind keeps its source's read-only flag), so that a folder
            # under /tmp shows above ch-run's private /tmp.
            binds.append((folder, folder))
            data_binds += ["--bind", f"{folder}:{folder}"]
            if not folder.startswith("/tmp/"):
                # ch-run cannot make a mount point in the read-only image;
                # the image folder is the converting user's.
                (image / folder.lstrip("/")).mkdir(parents=True,
                                                   exist_ok=True)
        if multinode(job):
            # One node of several: stay in the node's network namespace
            # (ch-run makes none), so the nodes reach each other.
            argv = ["unshare", "--user", "--map-root-user", "--mount",
                    "sh", "-c", READ_ONLY_BINDS.replace(
                        "ip link set lo up; ", ""), "sh"]
        else:
            argv = ["unshare", "--user", "--map-root-user", "--mount",
                    "--net", "sh", "-c", READ_ONLY_BINDS, "sh"]
        for source, point in binds:
            argv += [source, point]
        argv.append("--")
        cpus = (docker.cpuset(placement.threads)
                if placement.device == "cpu" else None)
        if cpus:
            argv += ["taskset", "--cpu-list", cpus]
        argv += [self.ch_run, "--private-tmp", "--cd", "/tmp",
                 "--bind", f"{Path(run_dir).resolve()}:{RESULTS_IN_CONTAINER}",
                 *data_binds,
                 # The image's own environment (its PATH, LANG...), then ours.
                 "--set-env"]
        argv += [f"--set-env={name}={value}"
                 for name, value in sorted(ENVIRONMENT.items())]
        if placement.device == "gpu" and self.gpu_ids:
            argv.append(f"--set-env=CUDA_VISIBLE_DEVICES={self.gpu_ids}")
        argv += [f"--set-env={key}={value}"
                 for key, value in node_variables(self, job).items()]
        argv += [str(image), "--", PYTHON_IN_CONTAINER]
        argv += harness_args(job, RESULTS_IN_CONTAINER)
        # ch-run passes its environment into the container: only what it
        # needs itself.
        env = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:"
                       "/sbin:/bin",
               "USER": user_name(), "LANG": "C.UTF-8"}
        watch = self.watches.start(job.id)
        return Launch(argv=argv, env=env, cwd=str(ROOT),
                      post_mortem=lambda pid=None: Death(*watch.verdict(pid)))

    def cleanup(self, job, run_dir):
        self.watches.end(job.id)

    def harness_results_dir(self, run_dir):
        return RESULTS_IN_CONTAINER

    # -- images ---------------------------------------------------------------

    def _tag(self, framework, profile, entry):
        """The tag `invoke build` gives the image, from the Docker engine
        or Podman's store (which know the base's ID); None with neither."""
        base_image = (images.substituted_base(entry, self.substitution)
                      or entry["base_image"])
        client = podman_images.docker_engine()
        if client is None and shutil.which("podman"):
            client = podman_images.Store()
        if client is None:
            return None
        return images.plan(framework, profile, self.matrix,
                           base_image=base_image, client=client,
                           name_prefix=self.name_prefix).tag

    def _record(self, framework, profile):
        entry = matrix_mod.entry(self.matrix, framework, profile)
        if self.registry:
            # ch-image pull of the locked digest, converted once.
            return pulls.ensure(
                "charliecloud", framework, profile, self.matrix,
                self.registry, source=_base_source(),
                base_image=images.substituted_base(entry, self.substitution)
                or entry["base_image"], folder=self.images_dir)
        command = ch_images.convert_command(
            framework, profile, os.environ.get(ch_images.IMAGES_ENV))
        tag = self._tag(framework, profile, entry)
        if tag is not None:
            record = ch_images.converted(tag, self.images_dir)
            if record is None:
                raise UserError(f"image {tag} is not converted for "
                                f"charliecloud in {self.images_dir}; run "
                                f"`{command}`")
            return record
        # A node without Docker or Podman cannot compute the base's part
        # of the tag: the newest conversion made from this lock file.
        lock = matrix_mod.lock_path(framework, profile)
        found = ch_images.converted_for(
            framework, profile, hashlib.sha256(
                lock.read_bytes()).hexdigest(), self.images_dir)
        if not found:
            raise UserError(f"no image of {framework}/{profile} is converted "
                            f"for charliecloud in {self.images_dir}; run "
                            f"`{command}` where Docker or Podman runs")
        return found[0]

    def _inject_nvidia(self, record, log):
        """ch-fromhost --nvidia, once per image and host driver."""
        image = Path(record["path"])
        driver = _driver_version()
        mark = image / "ch" / NVIDIA_MARK
        if mark.exists() and mark.read_text().strip() == driver:
            return
        log(f"ch-fromhost --nvidia {image}")
        env = dict(os.environ, USER=user_name())
        proc = subprocess.run(["ch-fromhost", "--nvidia", str(image)],
                              capture_output=True, text=True, env=env)
        if proc.returncode != 0:
            lines = (proc.stderr or proc.stdout).strip().splitlines()
            raise UserError(f"ch-fromhost --nvidia {image} failed: "
                            f"{lines[-1] if lines else 'no output'}")
        mark.write_text(driver + "\n")


def _base_source():
    """What reads the base's image ID here (the Docker engine, else
    Podman's store), or None."""
    client = podman_images.docker_engine()
    if client is None and shutil.which("podman"):
        client = podman_images.Store()
    return client


def _driver_version():
    try:
        return Path("/proc/driver/nvidia/version").read_text().splitlines()[0]
    except (OSError, IndexError):
        return "unknown"
