"""The docker runtime on the real command line: Ctrl-C stops the
container and says how to resume, one base substitution that build, bench
and render all read, `invoke bench --all` over every CPU framework in its
image, and convergence runs with the data mounted.
"""
import os
import signal
import subprocess

import processes
import waits
from cli import invoke
from paths import INVOKE
from dlrepro import ROOT, matrix
from dlrepro.run import store
from dlrepro.run.runtimes import docker as docker_runtime, get
from harness.provenance import harness_digest

from dockerenv import BASE_OVERRIDES, BIONIC_IMAGE, PREFIX, UBUNTU_1804
from dockercells import containers, wait_for_running


# --- the real command line ----------------------------------------------------------

def cli_env(**overrides):
    env = dict(os.environ, DLREPRO_IMAGE_PREFIX=PREFIX)
    env.pop(docker_runtime.BASE_OVERRIDES_ENV, None)
    env.update(overrides)
    return env


def test_build_bench_and_render_read_one_base_substitution(cntk_image, root,
                                                           tmp_path):
    """Fault 11: the image `invoke build` makes under DLREPRO_BASE_OVERRIDES
    is the one `invoke bench` runs under the same setting; --base-image is
    the same mapping for one command, and says how to make bench see it."""
    env = cli_env(**{docker_runtime.BASE_OVERRIDES_ENV: BASE_OVERRIDES})
    built = invoke("build", "--framework=cntk", env=env)
    assert built.returncode == 0, built.stdout + built.stderr
    assert built.stdout.split()[-1] == cntk_image
    # The per-command forms name the same image.
    mapped = invoke("build", "--framework", "cntk", "--base-image",
                    f"{UBUNTU_1804}={BIONIC_IMAGE}", env=cli_env())
    plain = invoke("build", "--framework", "cntk", "--base-image",
                   BIONIC_IMAGE, env=cli_env())
    for proc in (mapped, plain):
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert proc.stdout.split()[-1] == cntk_image
        assert (f"{docker_runtime.BASE_OVERRIDES_ENV}="
                f"{UBUNTU_1804}={BIONIC_IMAGE}") in proc.stderr
    assert "note:" not in built.stderr
    rendered = invoke("render", "--framework", "cntk", env=env)
    assert f"FROM {BIONIC_IMAGE}" in rendered.stdout, rendered.stderr
    bench = invoke("bench", "--runtime", "docker", "--framework", "cntk",
                   "--network", "fcn-r", "--iterations", "2", "--warmup", "1",
                   "--threads", "1", "--out", str(tmp_path), env=env)
    assert bench.returncode == 0, bench.stdout + bench.stderr
    run_dir = (tmp_path / "latest").resolve()
    record = store.read_run(run_dir)
    [entry] = record["jobs"]
    assert entry["status"] == "ok", entry["message"]
    result = store.load_result(run_dir / entry["file"])
    assert result["environment"]["container"]["image"] == cntk_image


def test_ctrl_c_stops_the_container_and_says_how_to_resume(cntk_image, root,
                                                           tmp_path):
    env = cli_env(**{docker_runtime.BASE_OVERRIDES_ENV: BASE_OVERRIDES})
    proc = processes.start(
        [INVOKE, "bench", "--runtime", "docker", "--framework", "cntk",
         "--network", "fcn-r", "--iterations", str(10 ** 7), "--warmup", "0",
         "--threads", "1", "--out", str(tmp_path), "--isolation", "cell"],
        cwd=root, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, start_new_session=True)
    try:
        waits.wait_for(lambda: (tmp_path / "latest").exists()
                       or proc.poll() is not None, what="a run folder")
        assert proc.poll() is None, proc.communicate()
        run_dir = (tmp_path / "latest").resolve()
        name = wait_for_running(docker_runtime.container_name(run_dir, ""))
        log = waits.wait_for(lambda: next(run_dir.glob("*.log"), None),
                             what="the job's log")
        waits.first_timed_iteration(log, proc)
        os.kill(proc.pid, signal.SIGINT)  # what Ctrl-C sends
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 130, out + err
    assert "interrupted: kept 0 finished job(s)" in err
    assert "the running job was stopped" in err and "--resume" in err
    assert not containers(name)
    record = store.read_run(run_dir)
    assert record["status"] == "interrupted"
    assert record["jobs"][0]["status"] != "ok"


def test_invoke_bench_all_runs_every_cpu_framework_in_its_image(
        cpu_images, cntk_image, caffe_image, root, tmp_path):
    """The user's commands: `invoke build --framework=cntk`, then
    `invoke bench --all` over the CPU frameworks (JAX among them), CNTK and
    Caffe included (their images FROM the Ubuntu 18.04 stand-in), with one
    DLREPRO_BASE_OVERRIDES for both; then the JSON on the host."""
    images = dict(cpu_images, cntk=cntk_image, caffe=caffe_image)
    env = cli_env(**{docker_runtime.BASE_OVERRIDES_ENV: BASE_OVERRIDES})
    built = invoke("build", "--framework=cntk", env=env)
    assert built.returncode == 0, built.stdout + built.stderr
    assert built.stdout.split()[-1] == cntk_image
    proc = invoke("bench", "--all", "--network", "fcn-r", "--network",
                  "lstm", "--iterations", "3", "--warmup", "1", "--threads",
                  "1", "--out", str(tmp_path), env=env, timeout=1200)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    run_dir = (tmp_path / "latest").resolve()
    record, pairs = store.load_run(run_dir)
    assert record["status"] == "complete" and record["runtime"] == "docker"
    assert len(pairs) == 2 * len(images)
    assert {e["spec"]["framework"] for e, _r in pairs} == set(images)
    for entry, result in pairs:
        framework = entry["spec"]["framework"]
        assert result is not None, entry["message"]
        assert (run_dir / entry["log"]).exists()
        assert result["environment"]["harness_digest"] == harness_digest()
        assert result["environment"]["container"]["image"] == images[framework]
        if (ROOT / "harness" / "frameworks" / framework / "backend.py").exists():
            assert result["status"] == "ok", result["error"]
            assert len(result["timing"]["per_iteration_s"]) == 3
        else:
            assert result["status"] == "unsupported"
    # The summary table names every cell.
    assert proc.stdout.count("fcn-r") >= len(images)
    assert f"{2 * len(images)} ok" in proc.stdout


def test_convergence_runs_in_images_with_the_data_mounted(
        cpu_images, cntk_image, tmp_path, monkeypatch):
    """`invoke converge --runtime docker`'s path: PyTorch (torchrun) and
    CNTK (mpirun) train on generated MNIST files mounted read-only into
    their images, 1 and 2 workers, results on the host."""
    from dlrepro.converge import datasets as dd
    from dlrepro.converge import plan as conv_plan
    from dlrepro.converge import runner as conv
    monkeypatch.setenv("DLREPRO_IMAGE_PREFIX", PREFIX)
    monkeypatch.setenv(docker_runtime.BASE_OVERRIDES_ENV, BASE_OVERRIDES)
    data_dir = tmp_path / "data"
    checksums = dd.generate("mnist", data_dir, 512, 128, seed=3)
    m = matrix.load()
    jobs = conv_plan.plan(["pytorch", "cntk"], ["fcn-r"], [1, 2],
                          global_batch=64, epochs=1, seed=1, threads=2,
                          data_dir=data_dir, checksums=checksums,
                          runtime="docker", timeout=900, matrix=m)
    conv_plan.check_data(jobs, log=lambda m: None)
    run_dir, found = conv.run(jobs, tmp_path / "out", get("docker", matrix=m),
                              "test", matrix=m)
    assert sorted(found) == sorted(job.id for job in jobs)
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
