"""The podman runtime with real Podman: a real cell in the image the Docker
tests build (loaded from the Docker engine, and from an `invoke save`
folder with no engine in the way), the result on the host with the same
shape as docker's, the hardening flags, rlimits within the host's hard
limits, stop on timeout with a partial result, an out-of-memory kill told
from another process's by the kernel log, and one-line errors.
"""
import os
import resource
import signal
import subprocess
import sys

import pytest

from dlrepro import ROOT, matrix
from dlrepro.errors import UserError
from dlrepro.images import archive, build as docker_images
from dlrepro.images import podman as podman_images, wheelhouse
from dlrepro.run.runtimes import docker as docker_runtime, get
from dlrepro.run.runtimes import podman as podman_runtime

import memcgroup
import waits
from dockerenv import BASE_OVERRIDES, PREFIX
from runtimeenv import (FRAMEWORK, binary_or_skip, docker_image,
                        make_cell, make_job, run_one, run_pipeline,
                        shapes_under, start, stopped_mid_loop)

TARGET = (FRAMEWORK, "cpu")
HOG = ("chunks = []\n"
       "while True:\n"
       "    chunks.append(b'x' * (1 << 20))\n")


@pytest.fixture(scope="module")
def image():
    binary_or_skip("podman")
    return docker_image()


@pytest.fixture
def runtime(image, monkeypatch):
    monkeypatch.setenv(docker_runtime.BASE_OVERRIDES_ENV, BASE_OVERRIDES)
    rt = get("podman", name_prefix=PREFIX)
    assert rt.prepare([TARGET], log=lambda _m: None) == {TARGET: None}
    return rt


def podman(*args):
    return subprocess.run(["podman", *args], capture_output=True, text=True)


def test_a_cell_runs_in_the_docker_tests_image_and_lands_on_the_host(
        runtime, image, tmp_path):
    job = make_job(make_cell("podman"), "p1")
    run_dir, _entry, result = run_one(runtime, job, tmp_path)
    env = result["environment"]
    assert env["harness_path"] == docker_runtime.HARNESS_IN_CONTAINER
    assert env["cpus_usable"] == 1  # pinned to the cell's one thread
    container = env["container"]
    assert container["runtime"] == "podman" and container["image"] == image
    # The very image the Docker engine holds: the same ID in podman's store.
    docker_id = subprocess.run(["docker", "image", "inspect", "--format",
                                "{{.Id}}", image], capture_output=True,
                               text=True, check=True).stdout.strip()
    assert container["image_id"] == docker_id
    assert container["engine_version"] == podman("version", "--format",
                                                 "{{.Client.Version}}"
                                                 ).stdout.strip()
    assert container["rootless"] is (os.geteuid() != 0)
    assert len(result["timing"]["per_iteration_s"]) == 3
    assert (run_dir / f"{job.id}.json").stat().st_uid == os.getuid()
    # cleanup removed the container.
    assert not podman("ps", "-a", "--filter", f"name={job.id}", "--format",
                      "{{.Names}}").stdout.split()


def test_results_have_the_shape_of_docker_results(runtime, tmp_path,
                                                  monkeypatch):
    """The same cell under docker and podman: the same fields, of the same
    types, in the result and in run.json."""
    shapes = shapes_under({"docker": get("docker", name_prefix=PREFIX),
                           "podman": runtime}, tmp_path)
    assert shapes["docker"] == shapes["podman"]


def test_the_container_is_hardened_and_its_rlimits_within_the_hosts(
        tmp_path):
    rt = get("podman")  # the command line needs no image
    job = make_job(make_cell("podman", threads=2), "flags")
    argv = rt.run_argv(job, tmp_path, "img:tag", "name")
    values = {}
    for flag, value in zip(argv, argv[1:]):
        values.setdefault(flag, []).append(value)
    assert argv[:2] == ["podman", "run"]
    assert "--privileged" not in argv and "--cap-add" not in argv
    assert values["--cap-drop"] == ["ALL"]
    assert values["--network"] == ["none"]
    assert values["--pids-limit"] == [str(docker_runtime.PIDS_LIMIT)]
    assert values["--security-opt"] == ["no-new-privileges"]
    assert f"{ROOT / 'harness'}:/opt/dlrepro/harness:ro" in values["--volume"]
    assert values["--cpuset-cpus"] == [docker_runtime.cpuset(2)]
    limits = dict(item.split("=") for item in values["--ulimit"])
    for name, which in (("nofile", resource.RLIMIT_NOFILE),
                        ("nproc", resource.RLIMIT_NPROC)):
        soft, hard = (int(n) for n in limits[name].split(":"))
        host_hard = resource.getrlimit(which)[1]
        assert soft == hard and hard > 0
        assert host_hard == resource.RLIM_INFINITY or hard <= host_hard
    assert "--gpus" not in argv
    if os.geteuid() == 0:
        assert "--userns" not in argv  # rootful: --user as under docker


def test_rootless_keeps_the_users_id_and_gpus_go_through_cdi(tmp_path,
                                                             monkeypatch):
    monkeypatch.setattr(podman_runtime.os, "geteuid", lambda: 1000)
    rt = get("podman", gpu_ids="0,2")
    cell = dict(make_cell("podman"), device="gpu", profile="cuda", gpus=2)
    argv = rt.run_argv(make_job(cell, "gpu"), tmp_path, "img:tag", "name")
    assert argv[2:4] == ["--userns", "keep-id"]
    assert [argv[i + 1] for i, item in enumerate(argv)
            if item == "--device"] == ["nvidia.com/gpu=0", "nvidia.com/gpu=2"]
    assert "--gpus" not in argv
    limits = [argv[i + 1] for i, item in enumerate(argv) if item == "--ulimit"]
    assert {item.split("=")[0] for item in limits} == {
        "nofile", "nproc", "memlock", "stack"}


def test_stop_on_timeout_leaves_a_partial_result(runtime, tmp_path):
    job = make_job(make_cell("podman", iterations=10 ** 7, warmup=0), "long")
    # podman stop: SIGTERM, then SIGKILL after 10 s
    status, log, death = stopped_mid_loop(runtime, job, tmp_path)
    assert status == 143, log
    assert death.oom is False and "status 143" in death.detail


class HogRuntime(podman_runtime.Runtime):
    """The podman runtime with the harness replaced by a memory hog."""

    def run_argv(self, job, run_dir, tag, name):
        argv = super().run_argv(job, run_dir, tag, name)
        return argv[:argv.index(tag) + 1] + [
            docker_runtime.PYTHON_IN_CONTAINER, "-c", HOG]


def test_an_out_of_memory_kill_ends_as_oom(image, tmp_path, monkeypatch):
    monkeypatch.setenv(docker_runtime.BASE_OVERRIDES_ENV, BASE_OVERRIDES)
    rt = HogRuntime(name_prefix=PREFIX, memory="64m")
    job = make_job(make_cell("podman"), "oom")
    litter = ROOT / "oom"
    before = litter.exists()
    run_dir, found = run_pipeline(rt, [job], tmp_path)
    entry, result = found[job.id]
    assert entry["status"] == "oom", entry["message"]
    assert result["error"]["type"] == "OutOfMemory"
    # conmon creates a file `oom` in podman's working directory on an OOM
    # kill: the run folder's, never the user's checkout
    assert (run_dir / "oom").exists()
    assert litter.exists() == before


def test_a_container_killed_while_another_process_is_oom_killed_is_not_oom(
        runtime, tmp_path, memory_cgroup):
    """Podman on cgroup v1 reports no OOM kill, and the machine's count
    rises for any process's: a container `podman kill`ed while a hog
    elsewhere was OOM-killed was `oom`, never measured again. The kernel
    log's victim is not in the container's cgroup: killed from outside."""
    job = make_job(make_cell("podman", iterations=10 ** 7, warmup=0),
                   "oom-elsewhere")
    launch, proc, log = start(runtime, job, tmp_path)
    name = docker_runtime.container_name(tmp_path.resolve(), job.id)
    try:
        waits.wait_for(lambda: podman("container", "inspect", "--format",
                                      "{{.State.Running}}", name
                                      ).stdout.strip() == "true",
                       what=f"{name} running")
        hog = subprocess.Popen([sys.executable, "-c", memcgroup.HOG],
                               preexec_fn=memory_cgroup.enter)
        assert hog.wait(120) == -signal.SIGKILL
        assert memory_cgroup.oom_kills() == 1  # the kernel's doing
        assert podman("kill", name).returncode == 0
        assert proc.wait(timeout=60) == 137, log.read_text()
        death = launch.post_mortem()
    finally:
        runtime.cleanup(job, tmp_path)
    assert death.oom is False, death.detail
    assert memcgroup.names_victim(death.detail, hog.pid), death.detail
    assert death.detail.startswith("the container exited with status 137")
    assert death.detail.endswith("not this container")


def _podman_knows_the_base():
    """The base's ID is part of the tag, so podman must hold the same base
    the Docker engine does: a copy loaded before the stand-in was rebuilt
    would give the old tag (and find the old image)."""
    base = BASE_OVERRIDES.split(",")[0].split("=")[1]
    held = podman_images.Store().inspect(base)
    if held is None or podman_images.Image(held).id != \
            docker_images.engine().images.get(base).id:
        subprocess.run(f"docker save {base} | podman load", shell=True,
                       check=True, capture_output=True)


def test_an_invoke_save_folder_loads_without_the_docker_engine(
        image, tmp_path, monkeypatch):
    """The image leaves podman's store, then comes back from an `invoke
    save` folder (sums checked, ID checked), with no Docker engine asked."""
    folder = archive.save([image], tmp_path / "images", log=lambda _m: None)
    podman("rmi", "--force", image)
    monkeypatch.setenv(docker_runtime.BASE_OVERRIDES_ENV, BASE_OVERRIDES)
    monkeypatch.setattr(podman_images, "docker_engine", lambda: None)
    _podman_knows_the_base()
    # A damaged archive is refused before anything is loaded.
    tar = next(folder.glob("*.tar"))
    good = tar.read_bytes()
    tar.write_bytes(good[:-1] + bytes([good[-1] ^ 1]))
    rt = get("podman", name_prefix=PREFIX, archive_dir=str(folder),
             from_docker=False)
    reasons = rt.prepare([TARGET], log=lambda _m: None)
    assert "the archive is damaged" in reasons[TARGET]
    tar.write_bytes(good)
    assert rt.prepare([TARGET], log=lambda _m: None) == {TARGET: None}
    assert rt.describe(TARGET)["image"] == image


def test_podman_builds_the_rendered_recipe_without_docker(image, monkeypatch):
    """No Docker engine and no archive: `podman build` of the rendered
    Dockerfile, offline from the wheelhouse, gives the tag docker's build
    gives (the same recipe hash: podman knows the base by the same ID)."""
    prefix = "dlrepro-podman-test"
    tag = image.replace(PREFIX, prefix, 1)
    podman("rmi", "--force", tag)
    monkeypatch.setenv(docker_runtime.BASE_OVERRIDES_ENV, BASE_OVERRIDES)
    monkeypatch.setattr(podman_images, "docker_engine", lambda: None)
    _podman_knows_the_base()
    # podman builds offline from the wheelhouse, as docker does (`invoke
    # wheelhouse`); a clone whose images already existed never made it.
    wheelhouse.make("mxnet", "cpu", matrix.load()["mxnet"]["cpu"],
                    log=lambda _m: None)
    rt = get("podman", name_prefix=prefix, from_docker=False)
    logs = []
    assert rt.prepare([TARGET], log=logs.append) == {TARGET: None}
    assert any(line.startswith(f"podman: building {tag}") for line in logs)
    described = rt.describe(TARGET)
    assert described["image"] == tag
    assert described["labels"]["org.dlrepro.recipe"].startswith(
        tag.rsplit("-", 1)[1])


def test_a_missing_podman_is_one_line():
    rt = get("podman", podman_bin="/nonexistent/podman")
    with pytest.raises(UserError) as info:
        rt.check()
    assert "\n" not in str(info.value)
    assert "podman (/nonexistent/podman) is not installed" in str(info.value)


def test_invoke_bench_without_podman_exits_2_with_nothing_run(root, tmp_path):
    # A PATH with python but no podman.
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "python").symlink_to(sys.executable)
    env = dict(os.environ, PATH=str(bindir))
    proc = subprocess.run([sys.executable, "-m", "invoke", "bench",
                           "--framework", FRAMEWORK, "--network", "fcn-r",
                           "--runtime", "podman", "--out",
                           str(tmp_path / "out")], cwd=root, env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.strip().count("\n") == 0
    assert "podman (podman) is not installed" in proc.stderr
    assert not (tmp_path / "out").exists()
