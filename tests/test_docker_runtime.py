"""The docker runtime: real harness cells in the CPU images, the JSON on the
host (schema-valid, written by the mounted harness, owned by the invoking
user), the container's isolation flags, stop on timeout with a partial
result, out-of-memory kills, and one-line errors for an unreachable engine.

Cells are started the way the sweep starts them: runtime.launch(...) gives
the command line, which runs as a subprocess whose output goes to a log.
"""
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import jsonschema
import pytest

from dlrepro import ROOT, matrix
from dlrepro.errors import UserError
from dlrepro.run.runtimes import docker as docker_runtime, get
from harness import resultfile
from harness.provenance import harness_digest

from dockerenv import (BASE_OVERRIDES, PREFIX, PYTHON_SLIM,  # noqa: F401
                       cntk_image, cpu_images, docker_client, test_base)

SCHEMA = json.loads(Path(resultfile.SCHEMA_PATH).read_text())


def make_cell(framework, network="fcn-r", batch=16, iterations=3, threads=1,
              device="cpu", gpus=0, clock_policy="observe", warmup=1):
    return {"framework": framework, "profile": "cpu" if device == "cpu" else "cuda",
            "network": network, "dataset": "synthetic", "batch_size": batch,
            "global_batch_size": batch * max(gpus, 1), "device": device,
            "gpus": gpus, "threads": threads, "iterations": iterations,
            "warmup": warmup, "runtime": "docker", "seed": 0,
            "clock_policy": clock_policy}


@pytest.fixture
def runtime(cpu_images, monkeypatch):
    # How `invoke bench --runtime docker` is told to build FROM the test bases.
    monkeypatch.setenv(docker_runtime.BASE_OVERRIDES_ENV, BASE_OVERRIDES)
    rt = get("docker", name_prefix=PREFIX)
    rt.check()
    return rt


def start(rt, cell, run_dir, cell_id):
    """Write the spec and start the cell as the sweep does; returns
    (launch, process, log path)."""
    spec = {"cell": cell, "container": rt.describe(cell["framework"],
                                                    cell["profile"])}
    (run_dir / f"{cell_id}.spec.json").write_text(json.dumps(spec))
    launch = rt.launch(cell, run_dir, cell_id)
    log = run_dir / f"{cell_id}.log"
    with open(log, "w") as out:
        proc = subprocess.Popen(launch.argv, cwd=launch.cwd, env=launch.env,
                                stdout=out, stderr=subprocess.STDOUT)
    return launch, proc, log


@pytest.mark.parametrize("framework", ["pytorch", "tensorflow", "mxnet",
                                       "cntk"])
def test_a_cell_runs_in_its_image_and_lands_on_the_host(
        runtime, cpu_images, docker_client, tmp_path, framework, monkeypatch,
        request):
    # CNTK's image is built FROM the Ubuntu 18.04 stand-in, the others FROM
    # the Debian one.
    tag = (request.getfixturevalue("cntk_image") if framework == "cntk"
           else cpu_images[framework])
    reasons = runtime.prepare([(framework, "cpu")], log=lambda _m: None)
    assert reasons == {(framework, "cpu"): None}
    owner = os.getuid()
    if owner == 0:
        # As root any owner would pass: run as another user to prove that
        # the container writes as whoever the runtime names.
        owner = 4321
        monkeypatch.setattr(docker_runtime.os, "getuid", lambda: owner)
        monkeypatch.setattr(docker_runtime.os, "getgid", lambda: owner)
        tmp_path.chmod(0o777)
    cell = make_cell(framework)
    launch, proc, log = start(runtime, cell, tmp_path, "c1")
    try:
        assert proc.wait(timeout=300) == 0, log.read_text()
        assert launch.post_mortem() is None
    finally:
        launch.cleanup()
    result_path = tmp_path / "c1.json"
    result = resultfile.load(result_path)
    jsonschema.validate(result, SCHEMA)
    assert result_path.stat().st_uid == owner
    env = result["environment"]
    # The harness that ran is the repository's, mounted read-only.
    assert env["harness_digest"] == harness_digest()
    assert env["harness_path"] == docker_runtime.HARNESS_IN_CONTAINER
    assert env["python_executable"] == docker_runtime.PYTHON_IN_CONTAINER
    container = env["container"]
    assert container["image"] == tag
    assert container["image_id"] == docker_client.images.get(tag).id
    assert container["labels"]["org.dlrepro.framework"] == framework
    assert result["cell"] == cell
    assert env["cpus_usable"] == 1  # pinned to the cell's one thread
    backend = ROOT / "harness" / "backends" / f"{framework}.py"
    if backend.exists():
        assert result["status"] == "ok", result["error"]
        version = matrix.load()[framework]["cpu"]["framework_version"]
        assert env["framework_version"].startswith(version)
        assert len(result["timing"]["per_iteration_s"]) == cell["iterations"]
    else:
        # This branch has no backend for it yet: the harness says so.
        assert result["status"] == "unsupported"
        assert f"harness.backends.{framework}" in result["error"]["message"]
    assert not docker_client.containers.list(
        all=True, filters={"label": f"{docker_runtime.LABEL_CELL}=c1"})


def test_stop_on_timeout_leaves_a_partial_result(runtime, tmp_path):
    runtime.prepare([("pytorch", "cpu")], log=lambda _m: None)
    # Far more iterations than fit in the wait below (fcn-r at batch 16 takes
    # milliseconds per iteration): the cell is always stopped mid-loop.
    cell = make_cell("pytorch", network="fcn-r", iterations=10 ** 7, warmup=0)
    launch, proc, log = start(runtime, cell, tmp_path, "long")
    try:
        time.sleep(20)
        assert proc.poll() is None, log.read_text()
        launch.stop()  # docker stop: SIGTERM, then SIGKILL after 10 s
        assert proc.wait(timeout=60) == 143, log.read_text()
        assert launch.post_mortem() == "container exited with status 143"
    finally:
        launch.cleanup()
    result = resultfile.load(tmp_path / "long.json")
    assert result["error"]["type"] == "Terminated"
    assert 0 < len(result["timing"]["per_iteration_s"]) < cell["iterations"]


def test_out_of_memory_is_reported(runtime, tmp_path):
    runtime.prepare([("pytorch", "cpu")], log=lambda _m: None)
    runtime.memory = "160m"
    cell = make_cell("pytorch", network="fcn5", batch=64, iterations=5)
    launch, proc, log = start(runtime, cell, tmp_path, "oom")
    try:
        proc.wait(timeout=300)
        reason = launch.post_mortem()
    finally:
        launch.cleanup()
    assert reason == "container OOM-killed (exit 137)", log.read_text()
    assert not (tmp_path / "oom.json").exists()


def test_isolation_flags(runtime, tmp_path):
    cell = make_cell("pytorch", threads=2)
    argv = runtime.run_argv(cell, tmp_path, "c", "img:tag", "name")
    joined = " ".join(argv)
    assert "--privileged" not in argv and "--cap-add" not in argv
    assert argv[argv.index("--network") + 1] == "none"
    assert argv[argv.index("--user") + 1] == f"{os.getuid()}:{os.getgid()}"
    assert f"{ROOT / 'harness'}:/opt/dlrepro/harness:ro" in argv
    assert f"{tmp_path}:/results" in argv
    assert argv[argv.index("--cpuset-cpus") + 1] == docker_runtime.cpuset(2)
    assert "--gpus" not in argv and "--shm-size 2g" in joined
    assert argv[-6:] == ["harness", "run", "--spec", "/results/c.spec.json",
                         "--out", "/results/c.json"]
    gpu = runtime.run_argv(make_cell("pytorch", device="gpu", gpus=2, threads=None),
                           tmp_path, "g", "img:tag", "name")
    assert gpu[gpu.index("--gpus") + 1] == "2" and "--cpuset-cpus" not in gpu
    clocks = runtime.run_argv(make_cell("pytorch", device="gpu", gpus=1, threads=None,
                                        clock_policy="lock=1500"),
                              tmp_path, "g", "img:tag", "name")
    assert clocks[clocks.index("--cap-add") + 1] == "SYS_ADMIN"
    assert clocks[clocks.index("--user") + 1] == "0:0"
    assert "NVIDIA_DRIVER_CAPABILITIES=compute,utility" in clocks
    observe = runtime.run_argv(make_cell("pytorch", device="gpu", gpus=1,
                                         threads=None), tmp_path, "g", "i", "n")
    assert "--cap-add" not in observe


def test_cpuset_takes_the_first_usable_cpus():
    assert docker_runtime.cpuset(2, {3, 1, 2}) == "1,2"
    assert docker_runtime.cpuset(None, {0, 1}) is None


def test_missing_image_is_a_reason_not_a_crash(docker_client, monkeypatch):
    monkeypatch.setenv(docker_runtime.BASE_OVERRIDES_ENV,
                       f"{PYTHON_SLIM}={PREFIX}/no-such-base:0")
    rt = get("docker", name_prefix=PREFIX)
    reasons = rt.prepare([("mxnet", "cpu")], log=lambda _m: None)
    reason = reasons[("mxnet", "cpu")]
    assert "is missing" in reason and "invoke load" in reason


def test_unreachable_engine_is_one_line_with_the_native_hint(monkeypatch):
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    rt = get("docker")
    with pytest.raises(UserError) as info:
        rt.check()
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith("the Docker engine does not answer")
    assert message.endswith("or run natively with --runtime native")


def test_bad_override_setting_is_a_user_error(monkeypatch):
    monkeypatch.setenv(docker_runtime.BASE_OVERRIDES_ENV, "no-equals-sign")
    with pytest.raises(UserError, match="is not FROM=TO"):
        get("docker")


def test_invoke_bench_runs_every_cpu_framework_in_its_image(
        cpu_images, cntk_image, root, tmp_path):
    """The user's command: `invoke bench --runtime docker` over the CPU
    frameworks, CNTK included (its image FROM the Ubuntu 18.04 stand-in),
    then the JSON on the host."""
    images = dict(cpu_images, cntk=cntk_image)
    env = dict(os.environ, DLREPRO_IMAGE_PREFIX=PREFIX,
               **{docker_runtime.BASE_OVERRIDES_ENV: BASE_OVERRIDES})
    invoke = str(Path(sys.executable).parent / "invoke")
    proc = subprocess.run(
        [invoke, "bench", "--runtime", "docker", "--framework", "pytorch",
         "--framework", "tensorflow", "--framework", "mxnet", "--framework",
         "cntk", "--network", "fcn-r", "--network", "lstm", "--iterations", "3",
         "--warmup", "1", "--threads", "1", "--out", str(tmp_path)],
        cwd=root, env=env, capture_output=True, text=True, timeout=1200)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    run_dir = (tmp_path / "latest").resolve()
    record = json.loads((run_dir / "run.json").read_text())
    assert record["status"] == "complete" and record["runtime"] == "docker"
    assert len(record["cells"]) == 8
    for entry in record["cells"]:
        framework = entry["cell"]["framework"]
        result = resultfile.load(run_dir / entry["file"])
        assert (run_dir / entry["log"]).exists()
        assert result["environment"]["harness_digest"] == harness_digest()
        assert result["environment"]["container"]["image"] == images[framework]
        if (ROOT / "harness" / "backends" / f"{framework}.py").exists():
            assert result["status"] == "ok", result["error"]
            assert len(result["timing"]["per_iteration_s"]) == 3
        else:
            assert result["status"] == "unsupported"
    # The summary table names every cell.
    assert proc.stdout.count("fcn-r") >= 4
    assert "8 ok" in proc.stdout


def test_convergence_runs_in_images_with_the_data_mounted(
        cpu_images, cntk_image, tmp_path, monkeypatch):
    """`invoke converge --runtime docker`'s path: PyTorch (torchrun) and
    CNTK (mpirun) train on generated MNIST files mounted read-only into
    their images, 1 and 2 workers, results on the host."""
    from dlrepro.converge import runner as conv
    from dlrepro.converge import datasets as dd
    monkeypatch.setenv("DLREPRO_IMAGE_PREFIX", PREFIX)
    monkeypatch.setenv(docker_runtime.BASE_OVERRIDES_ENV, BASE_OVERRIDES)
    data_dir = tmp_path / "data"
    checksums = dd.generate("mnist", data_dir, 512, 128, seed=3)
    specs = conv.plan(["pytorch", "cntk"], ["fcn-r"], [1, 2], global_batch=64,
                      epochs=1, seed=1, threads=2, data_dir=data_dir,
                      checksums=checksums, runtime="docker")
    conv.check_data(specs, log=lambda m: None)
    where = conv.environments(specs, log=lambda m: None)
    assert all(w.name == "docker" for w in where.values()), where
    run_dir, found = conv.run(specs, tmp_path / "out", pythons=where,
                              timeout=900, log=lambda m: None)
    images = dict(cpu_images, cntk=cntk_image)
    for framework in ("pytorch", "cntk"):
        one, two = (found[f"{framework}-fcn-r-w{n}"] for n in (1, 2))
        for result in (one, two):
            assert result["status"] == "ok", result["error"]
            assert result["cell"]["runtime"] == "docker"
            assert result["environment"]["container"]["image"] == \
                images[framework]
            assert result["cell"]["dataset"].startswith("mnist")
        # the same global batches in the same order: the same curve
        a, b = one["convergence"]["curve"]["loss"], \
            two["convergence"]["curve"]["loss"]
        assert len(a) == len(b) == 8
        assert max(abs(x - y) / abs(x) for x, y in zip(a, b)) < 1e-3
