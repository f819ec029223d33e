"""The docker runtime: real harness cells in the CPU images, the JSON on the
host (schema-valid, written by the mounted harness, owned by the invoking
user), the container's hardening (no capabilities, a pids limit, the chown
helper with CHOWN alone), stop on timeout with a partial result,
out-of-memory kills (`oom`) against kills from outside (`error`, measured
again on --resume), Ctrl-C on the real CLI, one base substitution that
build, bench and render all read, and one-line errors for an unreachable
engine.

Jobs start the way the pipeline starts them: runtime.launch(job, run_dir)
gives the command line, which runs as a subprocess whose output goes to a
log, and runtime.cleanup(job, run_dir) follows; or pipeline.start runs them
whole. Tests of the container's life cycle replace only the harness command
(ScriptedRuntime): the flags, mounts, image, stop, post-mortem and cleanup
are the runtime's own.

Why this is long: every test here needs the real engine and shares the
images built once per test session, so they stay in one module.
"""
import json
import os
import signal
import subprocess
import threading
import uuid
from pathlib import Path

import jsonschema
import pytest

import processes
import waits
from paths import INVOKE
from runtimeenv import ran, stopped_mid_loop
from dlrepro import ROOT, matrix
from dlrepro.bench import plan
from dlrepro.errors import UserError
from dlrepro.run import pipeline, store
from dlrepro.run.runtimes import docker as docker_runtime, get, harness_args
from harness import resultfile
from harness.provenance import harness_digest

from dockerenv import (BASE_OVERRIDES, BIONIC_IMAGE, PREFIX, PYTHON_SLIM,
                       UBUNTU_1804)

SCHEMA = json.loads(Path(resultfile.SCHEMA_PATH).read_text())


def make_cell(framework, network="fcn-r", batch=16, iterations=3, threads=1,
              device="cpu", gpus=0, clock_policy="observe", warmup=1):
    return {"framework": framework, "profile": "cpu" if device == "cpu" else "cuda",
            "network": network, "dataset": "synthetic", "batch_size": batch,
            "global_batch_size": batch * max(gpus, 1), "device": device,
            "gpus": gpus, "threads": threads, "iterations": iterations,
            "warmup": warmup, "runtime": "docker", "seed": 0,
            "clock_policy": clock_policy, "precision": "default",
            "compile": None}


def make_job(cell, job_id=None, timeout_s=600):
    """The pipeline's job for `cell`; a unique id keeps containers of
    concurrent test sessions apart."""
    job = plan.job_for(cell, timeout_s)
    return job._replace(id=job_id) if job_id else job


def unique(stem):
    return f"{stem}-{uuid.uuid4().hex[:8]}"


class ScriptedRuntime(docker_runtime.Runtime):
    """The docker runtime with the command after the image replaced by
    `command(job)` when it is set."""
    command = None

    def run_argv(self, job, run_dir, tag, name):
        argv = super().run_argv(job, run_dir, tag, name)
        if self.command is None:
            return argv
        return argv[:argv.index(tag) + 1] + self.command(job)


@pytest.fixture
def runtime(cpu_images, monkeypatch):
    # How `invoke bench --runtime docker` is told to build FROM the test bases.
    monkeypatch.setenv(docker_runtime.BASE_OVERRIDES_ENV, BASE_OVERRIDES)
    rt = get("docker", name_prefix=PREFIX)
    rt.check()
    return rt


@pytest.fixture
def cntk_runtime(cntk_image, monkeypatch):
    """A ScriptedRuntime over the CNTK image (built once per session, FROM
    the Ubuntu 18.04 stand-in), prepared."""
    monkeypatch.setenv(docker_runtime.BASE_OVERRIDES_ENV, BASE_OVERRIDES)
    rt = ScriptedRuntime(name_prefix=PREFIX)
    assert rt.prepare([("cntk", "cpu")], log=lambda _m: None) == \
        {("cntk", "cpu"): None}
    return rt


def run_pipeline(rt, jobs, out, resume=False):
    """pipeline.start as `invoke bench` calls it; (run folder, entries by
    id, results by id)."""
    run = pipeline.Run(kind="bench", jobs=jobs, out=out, name="t",
                       command="test", resume=resume)
    run_dir = pipeline.start(run, rt, matrix.load())
    _record, pairs = store.load_run(run_dir)
    return (run_dir, {e["id"]: e for e, _r in pairs},
            {e["id"]: r for e, r in pairs})


def containers(name_part):
    """Names of containers, running or not, whose name holds `name_part`."""
    proc = subprocess.run(["docker", "ps", "-a", "--filter",
                           f"name={name_part}", "--format", "{{.Names}}"],
                          capture_output=True, text=True, check=True)
    return proc.stdout.split()


def running_container(name_part):
    """The name of a running container whose name holds `name_part`."""
    proc = subprocess.run(["docker", "ps", "--filter", f"name={name_part}",
                           "--filter", "status=running", "--format",
                           "{{.Names}}"], capture_output=True, text=True)
    return next(iter(proc.stdout.split()), None)


def wait_for_running(name_part, seconds=120):
    return waits.wait_for(lambda: running_container(name_part), seconds,
                          every=0.2, what=f"a container named *{name_part}*")


@pytest.mark.parametrize("framework", ["pytorch", "tensorflow", "mxnet",
                                       "jax", "cntk", "caffe"])
def test_a_cell_runs_in_its_image_and_lands_on_the_host(
        runtime, cpu_images, docker_client, tmp_path, framework, monkeypatch,
        request):
    # CNTK's and Caffe's images are built FROM the Ubuntu 18.04 stand-in,
    # the others FROM the Debian one.
    tag = (request.getfixturevalue(f"{framework}_image")
           if framework in ("cntk", "caffe") else cpu_images[framework])
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
    job = make_job(cell, unique("c1"))
    result = ran(runtime, job, tmp_path)
    jsonschema.validate(result, SCHEMA)
    assert (tmp_path / f"{job.id}.json").stat().st_uid == owner
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
    backend = ROOT / "harness" / "frameworks" / framework / "backend.py"
    if backend.exists():
        assert result["status"] == "ok", result["error"]
        version = matrix.load()[framework]["cpu"]["framework_version"]
        assert env["framework_version"].startswith(version)
        assert len(result["timing"]["per_iteration_s"]) == cell["iterations"]
    else:
        # This branch has no backend for it yet: the harness says so.
        assert result["status"] == "unsupported"
        assert f"harness.frameworks.{framework}" in result["error"]["message"]
    # cleanup removed the container.
    assert not docker_client.containers.list(
        all=True, filters={"label": f"{docker_runtime.LABEL_CELL}={job.id}"})


def test_torch_compile_builds_its_kernels_in_the_pytorch_image(runtime,
                                                              tmp_path):
    # The image has g++ (matrix apt) and its base's Python.h: inductor
    # compiles the model's C++ inside the container. The smallest cell that
    # compiles: fcn-r, the one warm-up iteration compiling, one timed.
    assert runtime.prepare([("pytorch", "cpu")], log=lambda _m: None) == \
        {("pytorch", "cpu"): None}
    cell = dict(make_cell("pytorch", iterations=1), precision="bf16",
                compile="default")
    job = make_job(cell, unique("tc"))
    result = ran(runtime, job, tmp_path)
    assert result["status"] == "ok", (
        f"{result['error']} (a stand-in base without Python.h: rerun "
        f".ci/base-image.sh)")
    assert result["compilation"]["mode"] == "default"
    assert result["precision"]["autocast"] == "bf16"
    # Compiling made the warm-up iteration far slower than the timed one.
    assert result["compilation"]["first_iteration_excess_s"] > \
        10 * result["timing"]["median_s"]


def test_stop_on_timeout_leaves_a_partial_result(cntk_runtime, tmp_path):
    cell = make_cell("cntk", network="fcn-r", iterations=10 ** 7, warmup=0)
    job = make_job(cell, unique("long"))
    # docker stop: SIGTERM, then SIGKILL after 10 s
    status, log, death = stopped_mid_loop(cntk_runtime, job, tmp_path)
    assert status == 143, log
    assert death.oom is False and "status 143" in death.detail
    assert not containers(docker_runtime.container_name(tmp_path, job.id))


# --- hardening ------------------------------------------------------------------

def _argv(runtime, tmp_path, **cell):
    job = make_job(make_cell("pytorch", **cell), "c")
    return runtime.run_argv(job, tmp_path, "img:tag", "name")


def _values(argv, flag):
    return [argv[i + 1] for i, item in enumerate(argv) if item == flag]


def test_isolation_flags(tmp_path):
    runtime = get("docker")  # the command line needs no engine
    argv = _argv(runtime, tmp_path, threads=2)
    joined = " ".join(argv)
    assert "--privileged" not in argv and "--cap-add" not in argv
    assert _values(argv, "--cap-drop") == ["ALL"]
    assert _values(argv, "--pids-limit") == [str(docker_runtime.PIDS_LIMIT)]
    assert _values(argv, "--security-opt") == ["no-new-privileges"]
    assert argv[argv.index("--network") + 1] == "none"
    assert argv[argv.index("--user") + 1] == f"{os.getuid()}:{os.getgid()}"
    assert f"{ROOT / 'harness'}:/opt/dlrepro/harness:ro" in argv
    assert f"{tmp_path}:/results" in argv
    assert argv[argv.index("--cpuset-cpus") + 1] == docker_runtime.cpuset(2)
    assert "--gpus" not in argv and "--shm-size 2g" in joined
    assert "--memory" not in argv
    assert argv[-6:] == ["harness", "run", "--spec", "/results/c.spec.json",
                         "--out", "/results/c.json"]
    runtime.memory = "1g"
    assert _values(_argv(runtime, tmp_path), "--memory") == ["1g"]
    gpu = _argv(runtime, tmp_path, device="gpu", gpus=2, threads=None)
    assert gpu[gpu.index("--gpus") + 1] == "2" and "--cpuset-cpus" not in gpu
    assert "--cap-add" not in gpu and _values(gpu, "--cap-drop") == ["ALL"]
    # A policy that changes clocks gets back what it needs and the right to
    # write the user's run folder as root, nothing else.
    clocks = _argv(runtime, tmp_path, device="gpu", gpus=1, threads=None,
                   clock_policy="lock=1500")
    assert sorted(_values(clocks, "--cap-add")) == ["DAC_OVERRIDE",
                                                    "SYS_ADMIN"]
    assert _values(clocks, "--cap-drop") == ["ALL"]
    assert _values(clocks, "--security-opt") == ["no-new-privileges"]
    assert _values(clocks, "--pids-limit") == [str(docker_runtime.PIDS_LIMIT)]
    assert clocks[clocks.index("--user") + 1] == "0:0"
    assert "NVIDIA_DRIVER_CAPABILITIES=compute,utility" in clocks
    observe = _argv(runtime, tmp_path, device="gpu", gpus=1, threads=None)
    assert "--cap-add" not in observe


STATUS_PROBE = ('grep -E "^(CapEff|CapBnd|NoNewPrivs)" /proc/self/status '
                '> /results/{id}.status; (cat /sys/fs/cgroup/pids/pids.max '
                '2>/dev/null || cat /sys/fs/cgroup/pids.max) >> '
                '/results/{id}.status; exec "$0" "$@"')


def test_a_hardened_container_runs_a_cell(cntk_runtime, tmp_path):
    """The real flags, one real cell: the harness writes its result while
    the container has no capability, no way to gain one, and a pids limit."""
    job = make_job(make_cell("cntk", iterations=2), unique("hard"))
    cntk_runtime.command = lambda job: [
        "sh", "-c", STATUS_PROBE.format(id=job.id),
        docker_runtime.PYTHON_IN_CONTAINER] + harness_args(
        job, docker_runtime.RESULTS_IN_CONTAINER)
    run_dir, entries, results = run_pipeline(cntk_runtime, [job], tmp_path)
    assert entries[job.id]["status"] == "ok", entries[job.id]["message"]
    assert len(results[job.id]["timing"]["per_iteration_s"]) == 2
    status = dict(line.split(":\t") if ":\t" in line else ("pids.max", line)
                  for line in (run_dir / f"{job.id}.status").read_text()
                  .splitlines())
    assert int(status["CapEff"], 16) == 0 and int(status["CapBnd"], 16) == 0
    assert status["NoNewPrivs"] == "1"
    assert status["pids.max"] == str(docker_runtime.PIDS_LIMIT)
    assert not containers(docker_runtime.container_name(run_dir, job.id))


def test_the_chown_helper_has_chown_alone(cntk_runtime, cntk_image, tmp_path,
                                         monkeypatch):
    """What a root container wrote goes back to the invoking user through a
    container that may chown and nothing else."""
    me = os.getuid()
    if me == 0:
        # Root owns what root wrote: hand it to another user instead.
        monkeypatch.setattr(docker_runtime.os, "getuid", lambda: 4321)
        monkeypatch.setattr(docker_runtime.os, "getgid", lambda: 4321)
        for name in ("j.json", "j.clock-state.json"):
            (tmp_path / name).write_text("{}")
    else:
        subprocess.run(["docker", "run", "--rm", "--user", "0:0", "--volume",
                        f"{tmp_path}:/results", cntk_image, "touch",
                        "/results/j.json", "/results/j.clock-state.json"],
                       check=True, capture_output=True)
    (tmp_path / "other.json").write_text("{}")
    calls = []
    real_run = docker_runtime.subprocess.run

    def recording_run(argv, **kwargs):
        calls.append(argv)
        return real_run(argv, **kwargs)
    monkeypatch.setattr(docker_runtime.subprocess, "run", recording_run)
    cntk_runtime._give_back(cntk_image, tmp_path, "j")
    [argv] = calls
    assert _values(argv, "--cap-drop") == ["ALL"]
    assert _values(argv, "--cap-add") == ["CHOWN"]
    assert _values(argv, "--security-opt") == ["no-new-privileges"]
    assert _values(argv, "--network") == ["none"]
    uid = docker_runtime.os.getuid()
    for name in ("j.json", "j.clock-state.json"):
        assert (tmp_path / name).stat().st_uid == uid
    # Only the job's own files.
    assert (tmp_path / "other.json").stat().st_uid == me


# --- deaths: the engine's OOM flag against kills from outside --------------------

HOG = ("chunks = []\n"
       "while True:\n"
       "    chunks.append(b'x' * (1 << 20))\n")


def test_a_real_out_of_memory_kill_ends_as_oom(cntk_runtime, tmp_path):
    """A harness that allocates past --memory: the kernel kills it, the
    engine flags the container OOMKilled, the job ends `oom`."""
    cntk_runtime.memory = "64m"
    cntk_runtime.command = lambda job: [docker_runtime.PYTHON_IN_CONTAINER,
                                        "-c", HOG]
    job = make_job(make_cell("cntk"), unique("oom"))
    run_dir, entries, results = run_pipeline(cntk_runtime, [job], tmp_path)
    result = results[job.id]
    assert entries[job.id]["status"] == "oom", entries[job.id]["message"]
    assert result["error"]["type"] == "OutOfMemory"
    assert "OOM-killed" in result["error"]["message"]
    assert not containers(docker_runtime.container_name(run_dir, job.id))


def test_a_container_killed_from_outside_is_an_error_measured_again_on_resume(
        cntk_runtime, tmp_path):
    job = make_job(make_cell("cntk", iterations=2), unique("kill"))
    launched = []

    def sleeper(job):
        launched.append("sleeper")
        return ["sleep", "600"]
    cntk_runtime.command = sleeper
    killed = {}

    def kill_when_running():
        try:
            killed["name"] = wait_for_running(f"-{job.id}")
            subprocess.run(["docker", "kill", killed["name"]], check=True,
                           capture_output=True)
        except Exception as exc:  # the assertion below says what happened
            killed["error"] = exc
    killer = threading.Thread(target=kill_when_running)
    killer.start()
    try:
        run_dir, entries, results = run_pipeline(cntk_runtime, [job],
                                                 tmp_path)
    finally:
        killer.join(timeout=150)
    assert "error" not in killed, killed
    entry, result = entries[job.id], results[job.id]
    assert entry["status"] == "error", entry["message"]
    assert result["error"]["type"] == "Killed"
    assert "from outside" in result["error"]["message"]
    assert "no OOM kill" in result["error"]["message"]
    assert not containers(killed["name"])
    # --resume measures it again, with the real harness this time.
    cntk_runtime.command = None
    again_dir, entries, results = run_pipeline(cntk_runtime, [job], tmp_path,
                                               resume=True)
    assert again_dir == run_dir and launched == ["sleeper"]
    assert entries[job.id]["status"] == "ok", entries[job.id]["message"]
    assert len(results[job.id]["timing"]["per_iteration_s"]) == 2


# --- errors ---------------------------------------------------------------------

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
    # The way out names the one setting that build and bench both read.
    assert f'{docker_runtime.BASE_OVERRIDES_ENV}="{PYTHON_SLIM}=IMAGE"' \
        in reason


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


# --- the real command line ----------------------------------------------------------

def invoke(root, *args, env, timeout=600):
    return subprocess.run([INVOKE, *args], cwd=root, env=env,
                          capture_output=True, text=True, timeout=timeout)


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
    built = invoke(root, "build", "--framework=cntk", env=env)
    assert built.returncode == 0, built.stdout + built.stderr
    assert built.stdout.split()[-1] == cntk_image
    # The per-command forms name the same image.
    mapped = invoke(root, "build", "--framework", "cntk", "--base-image",
                    f"{UBUNTU_1804}={BIONIC_IMAGE}", env=cli_env())
    plain = invoke(root, "build", "--framework", "cntk", "--base-image",
                   BIONIC_IMAGE, env=cli_env())
    for proc in (mapped, plain):
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert proc.stdout.split()[-1] == cntk_image
        assert (f"{docker_runtime.BASE_OVERRIDES_ENV}="
                f"{UBUNTU_1804}={BIONIC_IMAGE}") in proc.stderr
    assert "note:" not in built.stderr
    rendered = invoke(root, "render", "--framework", "cntk", env=env)
    assert f"FROM {BIONIC_IMAGE}" in rendered.stdout, rendered.stderr
    bench = invoke(root, "bench", "--runtime", "docker", "--framework", "cntk",
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
         "--threads", "1", "--out", str(tmp_path)],
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
    built = invoke(root, "build", "--framework=cntk", env=env)
    assert built.returncode == 0, built.stdout + built.stderr
    assert built.stdout.split()[-1] == cntk_image
    proc = invoke(root, "bench", "--all", "--network", "fcn-r", "--network",
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
