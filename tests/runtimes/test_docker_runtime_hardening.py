"""The docker runtime's containers: their hardening (no capabilities, a
pids limit, the chown helper with CHOWN alone), stop on timeout with a
partial result, out-of-memory kills (`oom`) against kills from outside
(`error`, measured again on --resume), and one-line errors for a missing
image, an unreachable engine or a bad override setting.

Tests of the container's life cycle replace only the harness command
(ScriptedRuntime, tests/dockercells.py): the flags, mounts, image, stop,
post-mortem and cleanup are the runtime's own.
"""
import os
import subprocess
import threading

import pytest

from runtimeenv import stopped_mid_loop
from dlrepro import ROOT
from dlrepro.errors import UserError
from dlrepro.run.runtimes import docker as docker_runtime, get, harness_args

from dockerenv import BASE_OVERRIDES, PREFIX, PYTHON_SLIM
from dockercells import (ScriptedRuntime, containers, make_cell, make_job,
                         run_pipeline, unique, wait_for_running)


@pytest.fixture
def cntk_runtime(cntk_image, monkeypatch):
    """A ScriptedRuntime over the CNTK image (built once per session, FROM
    the Ubuntu 18.04 stand-in), prepared."""
    monkeypatch.setenv(docker_runtime.BASE_OVERRIDES_ENV, BASE_OVERRIDES)
    rt = ScriptedRuntime(name_prefix=PREFIX)
    assert rt.prepare([("cntk", "cpu")], log=lambda _m: None) == \
        {("cntk", "cpu"): None}
    return rt



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

