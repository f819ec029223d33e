"""The charliecloud runtime with real Charliecloud: the Docker tests' image
converted by `invoke ch-convert` (once per image ID), a real cell by ch-run
with the result on the host in docker's shape, the harness read-only, no
network, CPUs pinned, the caller's environment kept out, stop with a
partial result, an image found by its lock on a node with neither Docker
nor Podman, and one-line errors (exit 2, no run folder) for an image not
converted and a missing ch-run.
"""
import json
import os
import subprocess

import pytest

from dlrepro import ROOT, matrix
from dlrepro.errors import UserError
from dlrepro.images import podman as podman_images
from dlrepro.run.runtimes import charliecloud as ch_runtime
from dlrepro.run.runtimes import docker as docker_runtime, get

from dockerenv import BASE_OVERRIDES, PREFIX
from runtimeenv import (FRAMEWORK, IMAGES, INVOKE, cli_env, make_cell,
                        make_job, run_one, shapes_under, stopped_mid_loop)

TARGET = (FRAMEWORK, "cpu")


@pytest.fixture
def runtime(converted, monkeypatch):
    monkeypatch.setenv(docker_runtime.BASE_OVERRIDES_ENV, BASE_OVERRIDES)
    rt = get("charliecloud", name_prefix=PREFIX, images_dir=IMAGES)
    rt.check()
    assert rt.prepare([TARGET], log=lambda _m: None) == {TARGET: None}
    return rt


def test_a_cell_runs_by_ch_run_and_lands_on_the_host(runtime, converted,
                                                     tmp_path, monkeypatch):
    # The caller's environment stays out of the container.
    monkeypatch.setenv("PYTHONPATH", "/nonexistent/leak")
    job = make_job(make_cell("charliecloud"), "c1")
    run_dir, _entry, result = run_one(runtime, job, tmp_path)
    env = result["environment"]
    assert env["harness_path"] == ch_runtime.HARNESS_IN_CONTAINER
    assert env["python_executable"] == ch_runtime.PYTHON_IN_CONTAINER
    assert env["cpus_usable"] == 1  # taskset to the cell's one thread
    container = env["container"]
    assert container["runtime"] == "charliecloud"
    assert container["image"] == converted["tag"]
    assert container["image_id"] == converted["image_id"]
    assert container["labels"]["org.dlrepro.framework"] == FRAMEWORK
    assert container["engine_version"] == "0.31"
    assert len(result["timing"]["per_iteration_s"]) == 3
    assert (run_dir / f"{job.id}.json").stat().st_uid == os.getuid()


def test_results_have_the_shape_of_docker_results(runtime, tmp_path):
    shapes = shapes_under({"docker": get("docker", name_prefix=PREFIX),
                           "charliecloud": runtime}, tmp_path)
    assert shapes["docker"] == shapes["charliecloud"]


PROBE = """
import json, os, socket, sys
found = {"uid": os.getuid(), "env": sorted(os.environ),
         "cpus": len(os.sched_getaffinity(0))}
try:
    open("/opt/dlrepro/harness/written-by-a-job", "w")
    found["harness"] = "writable"
except OSError as exc:
    found["harness"] = exc.strerror
with open("/proc/net/dev") as handle:
    found["interfaces"] = sorted(line.split(":")[0].strip()
                                 for line in handle if ":" in line)
try:
    socket.create_connection(("1.1.1.1", 53), timeout=3)
    found["network"] = "reached"
except OSError as exc:
    found["network"] = exc.strerror
try:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    socket.create_connection(server.getsockname(), timeout=3)
    found["loopback"] = "up"
except OSError as exc:
    found["loopback"] = exc.strerror
with open("/results/probe.json", "w") as out:
    json.dump(found, out)
"""


def test_the_harness_is_read_only_and_there_is_no_network_but_loopback(runtime, tmp_path):
    job = make_job(make_cell("charliecloud", threads=1), "probe")
    launch = runtime.launch(job, tmp_path)
    argv = launch.argv[:len(launch.argv) - launch.argv[::-1].index("--")]
    proc = subprocess.run(argv + [ch_runtime.PYTHON_IN_CONTAINER, "-c",
                                  PROBE], env=launch.env, cwd=launch.cwd,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    found = json.loads((tmp_path / "probe.json").read_text())
    assert found["harness"] == "Read-only file system"
    assert not (ROOT / "harness" / "written-by-a-job").exists()
    assert found["interfaces"] == ["lo"]
    assert found["network"] != "reached"
    # ... but a loopback, as docker's --network none has (workers meet there).
    assert found["loopback"] == "up"
    assert found["cpus"] == 1
    assert "PYTHONPATH" in found["env"] and "VIRTUAL_ENV" not in found["env"]


def test_a_signal_leaves_a_partial_result(runtime, tmp_path):
    """The executor's stop for a runtime without an engine: SIGTERM to the
    process it started, which is the harness itself (every wrapper execs)."""
    job = make_job(make_cell("charliecloud", iterations=10 ** 7, warmup=0),
                   "long")
    status, log, death = stopped_mid_loop(runtime, job, tmp_path)
    assert death is None  # no launch.stop: SIGTERM it was
    assert status != 0, log


def test_a_node_without_docker_or_podman_finds_the_image_by_its_lock(
        converted, monkeypatch):
    monkeypatch.setenv(docker_runtime.BASE_OVERRIDES_ENV, BASE_OVERRIDES)
    monkeypatch.setattr(podman_images, "docker_engine", lambda: None)
    monkeypatch.setattr(ch_runtime.shutil, "which",
                        lambda name: None if name == "podman" else name)
    rt = get("charliecloud", name_prefix=PREFIX, images_dir=IMAGES)
    assert rt.prepare([TARGET], log=lambda _m: None) == {TARGET: None}
    assert rt.describe(TARGET)["image_id"] == converted["image_id"]


def test_an_image_not_converted_exits_2_naming_the_command(root, tmp_path,
                                                           converted):
    empty = tmp_path / "no-images"
    proc = subprocess.run(INVOKE + ["bench", "--framework", FRAMEWORK,
                                    "--network", "fcn-r", "--runtime",
                                    "charliecloud", "--out",
                                    str(tmp_path / "out")],
                          cwd=root, env=cli_env(DLREPRO_CH_IMAGES=str(empty)),
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.strip().count("\n") == 0
    assert "is not converted for charliecloud" in proc.stderr
    assert (f"run `DLREPRO_CH_IMAGES={empty} invoke ch-convert --framework "
            f"{FRAMEWORK} --profile cpu`") in proc.stderr
    assert not (tmp_path / "out").exists()


def test_a_clock_changing_policy_is_refused_before_anything_runs(converted):
    rt = get("charliecloud", name_prefix=PREFIX, images_dir=IMAGES)
    cell = dict(make_cell("charliecloud"), device="gpu", profile="cuda",
                gpus=1, clock_policy="disable-boost")
    with pytest.raises(UserError, match="needs root: not under charliecloud"):
        rt.ready([make_job(cell, "clocks")])


def test_a_missing_ch_run_is_one_line():
    rt = get("charliecloud", ch_run="/nonexistent/ch-run")
    with pytest.raises(UserError) as info:
        rt.check()
    assert "\n" not in str(info.value)
    assert str(info.value).startswith("/nonexistent/ch-run is not installed")


def test_convergence_runs_with_the_data_mounted_and_workers_on_loopback(
        runtime, tmp_path, monkeypatch):
    """`invoke converge --runtime charliecloud`'s path: MXNet trains on
    generated MNIST files mounted read-only (under /tmp, above ch-run's
    private /tmp), 1 and 2 data-parallel workers that meet on the network
    namespace's loopback; the same global batches give the same curve."""
    from dlrepro.converge import datasets as dd
    from dlrepro.converge import plan as conv_plan
    from dlrepro.converge import runner as conv
    monkeypatch.setenv("DLREPRO_IMAGE_PREFIX", PREFIX)
    data_dir = tmp_path / "data"
    checksums = dd.generate("mnist", data_dir, 512, 128, seed=3)
    m = matrix.load()
    jobs = conv_plan.plan([FRAMEWORK], ["fcn-r"], [1, 2], global_batch=64,
                          epochs=1, seed=1, threads=2, data_dir=data_dir,
                          checksums=checksums, runtime="charliecloud",
                          timeout=900, matrix=m)
    conv_plan.check_data(jobs, log=lambda _m: None)
    run_dir, found = conv.run(jobs, tmp_path / "out", runtime, "test",
                              matrix=m)
    one, two = (found[f"{FRAMEWORK}-fcn-r-w{n}"] for n in (1, 2))
    for result in (one, two):
        assert result["status"] == "ok", result["error"]
        assert result["environment"]["container"]["runtime"] == "charliecloud"
    a, b = one["convergence"]["curve"]["loss"], two["convergence"]["curve"]["loss"]
    assert len(a) == len(b) == 8
    assert max(abs(x - y) / abs(x) for x, y in zip(a, b)) < 1e-3
