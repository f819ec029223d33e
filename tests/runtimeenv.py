"""What the Podman and Charliecloud tests share: the runtimes' binaries
(.ci/container-runtimes.sh installs them), the MXNet CPU image the Docker
tests build (the smallest one: the same tag, never a second copy), and
helpers to start a job as the pipeline does.

Without a runtime's binary its tests skip, saying what to run; with
DLREPRO_REQUIRE_RUNTIMES set (CI sets it) they fail instead.
"""
import json
import os
import shutil
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import jsonschema
import pytest

import processes
import suitefile
import waits
from dlrepro import ROOT, matrix
from dlrepro.run import pipeline, store
from dlrepro.bench import plan
from dlrepro.images import build as images, charliecloud as ch_images

from dockerenv import BASE_OVERRIDES, PREFIX, engine_or_skip, base_or_skip
from harness import resultfile
from harness.timing import FIRST_TIMED
from harness.provenance import harness_digest

FRAMEWORK = "mxnet"
# Charliecloud's conversions of the test image: converted once per image ID
# and kept between test sessions (a conversion takes about a minute); apart
# from a user's build/charliecloud.
IMAGES = ROOT / "build" / "charliecloud-test"
INVOKE = [sys.executable, "-m", "invoke"]
SCHEMA = json.loads(Path(resultfile.SCHEMA_PATH).read_text())


def binary_or_skip(name):
    if shutil.which(name) is None:
        reason = (f"{name} is not installed (run .ci/container-runtimes.sh)")
        if os.environ.get("DLREPRO_REQUIRE_RUNTIMES"):
            pytest.fail(f"DLREPRO_REQUIRE_RUNTIMES is set but {reason}")
        pytest.skip(reason)


def docker_image():
    """The Docker tests' MXNet CPU image (built when missing)."""
    client = engine_or_skip()
    return images.ensure(FRAMEWORK, "cpu", matrix.load(),
                         base_image=base_or_skip(client), client=client,
                         name_prefix=PREFIX, log=lambda _m: None)


# Three of the smoke suite's cheapest cells in MXNet (model build and
# iterations), swept through a runtime by the group and fork tests.
THREE_CELLS = {"lstm32": 8, "fcn-r": 16, "lstm64": 8}
# fcn-r, endless, never finishes its iterations: it ends by a kill, its
# timeout or a Ctrl-C.
ENDLESS = {"iterations": 10000000, "warmup": 0}


def three_cells_argv(runtime, suite, out, isolation, timeout_s, endless):
    """`invoke bench` of THREE_CELLS through `runtime`, in `isolation`,
    into `out`; their suite written to the file `suite`."""
    groups = []
    for network, batch in THREE_CELLS.items():
        group = {"networks": [network], "batch_sizes": [batch]}
        if network == "fcn-r":
            group["timeout_s"] = timeout_s
            group.update(ENDLESS if endless else {})
        groups.append(group)
    suitefile.write(suite, groups, name="three-cells",
                    description="three tiny cells", device="cpu",
                    iterations=2, warmup=1)
    return INVOKE + ["bench", "--suite", str(suite), "--framework", FRAMEWORK,
                     "--runtime", runtime, "--threads", "1", "--isolation",
                     isolation, "--out", str(out)]


def three_cells_job_id(network):
    return f"{FRAMEWORK}-cpu-{network}-cpu-b{THREE_CELLS[network]}-t1"


def three_cells_at_fcn_r(argv, out):
    """(the sweep `argv` started, its run folder) once fcn-r, its key's
    second cell, is timing in the worker or server that ran lstm32."""
    proc = processes.start(argv, cwd=ROOT, env=cli_env(),
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True, start_new_session=True)
    run_dir = run_folder_of(proc, out)
    log = run_dir / f"{three_cells_job_id('lstm32')}.worker.log"
    waits.wait_for(lambda: proc.poll() is not None or
                   waits.text_of(log).count(FIRST_TIMED) >= 2,
                   seconds=600, what="fcn-r's first timed iteration")
    assert proc.poll() is None, proc.communicate()
    return proc, run_dir


def run_folder_of(proc, out):
    """The run folder the sweep `proc` makes under `out` once it exists;
    fails at once, with what it said, should the sweep end first."""
    latest = Path(out) / "latest"
    waits.wait_for(lambda: latest.exists() or proc.poll() is not None,
                   seconds=300, what="the run folder")
    assert latest.exists(), proc.communicate()
    return latest.resolve()


def left_behind(runtime, run_dir):
    """The run's containers (docker, podman), or its harness processes
    (charliecloud: ch-run makes no container, and no PID namespace, so a
    worker's pid is the host's), still there."""
    if runtime in ("docker", "podman"):
        proc = subprocess.run([runtime, "ps", "-a", "--filter",
                               f"name={run_dir.name}", "--format",
                               "{{.Names}}"], capture_output=True, text=True,
                              check=True)
        return proc.stdout.split()
    pids = {store.load_result(path).get("isolation", {}).get("worker_pid")
            for path in run_dir.glob(f"{FRAMEWORK}-*-t1.json")}
    return [pid for pid in pids if pid and os.path.exists(f"/proc/{pid}")]


def three_cells_fcn_r_timed_out(argv, out):
    """The run folder of the sweep `argv`, run to its end: lstm32 and
    lstm64 ok, fcn-r ended by its timeout."""
    done = subprocess.run(argv, cwd=ROOT, env=cli_env(), capture_output=True,
                          text=True, timeout=900)
    run_dir = (Path(out) / "latest").resolve()
    found = {e["id"]: e["status"] for e in store.read_run(run_dir)["jobs"]}
    assert found == {three_cells_job_id(n): "timeout" if n == "fcn-r"
                     else "ok" for n in THREE_CELLS}, done.stderr
    return run_dir


def ready(request):
    """The runtime `request.param` names, its image ready, or a skip."""
    name = request.param
    if name == "podman":
        binary_or_skip("podman")
    if name == "charliecloud":
        # converted: shared with the Charliecloud tests, one conversion
        request.getfixturevalue("converted")
    else:
        docker_image()
    return name


def cli_env(**overrides):
    """The environment of an `invoke` command line that uses the test
    images (Docker's, Podman's copy, Charliecloud's conversion)."""
    env = dict(os.environ, DLREPRO_IMAGE_PREFIX=PREFIX,
               DLREPRO_BASE_OVERRIDES=BASE_OVERRIDES,
               DLREPRO_CH_IMAGES=str(IMAGES))
    env.update(overrides)
    return env


@pytest.fixture(scope="module")
def converted(root):
    """`invoke ch-convert` of the Docker tests' MXNet image (a no-op when
    that image ID is converted already): its record. Shared by every
    Charliecloud test module, so there is one conversion per image."""
    binary_or_skip("ch-run")
    binary_or_skip("ch-convert")
    image = docker_image()
    proc = subprocess.run(INVOKE + ["ch-convert", "--framework", FRAMEWORK],
                          cwd=root, env=cli_env(), capture_output=True,
                          text=True, timeout=1800)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.split()[-1] == str(ch_images.image_path(image, IMAGES))
    record = ch_images.converted(image, IMAGES)
    assert record is not None and record["source"] == "docker"
    return record


def make_cell(runtime, network="fcn-r", batch=16, iterations=3, threads=1,
              warmup=1):
    return {"framework": FRAMEWORK, "profile": "cpu", "network": network,
            "dataset": "synthetic", "batch_size": batch,
            "global_batch_size": batch, "device": "cpu", "gpus": 0,
            "threads": threads, "iterations": iterations, "warmup": warmup,
            "runtime": runtime, "seed": 0, "clock_policy": "observe"}


def make_job(cell, stem, timeout_s=600):
    """The pipeline's job for `cell`, with a unique id (containers of
    concurrent test sessions stay apart)."""
    return plan.job_for(cell, timeout_s)._replace(
        id=f"{stem}-{uuid.uuid4().hex[:8]}")


def start(rt, job, run_dir, argv=None):
    """Write the spec and start the job as the pipeline does; returns
    (launch, process, log path). `argv` replaces the launch's command."""
    spec = {"cell": job.spec, "container": rt.describe(job.placement.target)}
    (run_dir / f"{job.id}.spec.json").write_text(json.dumps(spec))
    launch = rt.launch(job, run_dir)
    log = run_dir / f"{job.id}.log"
    with open(log, "w") as out:
        proc = processes.start(argv or launch.argv, cwd=launch.cwd,
                               env=launch.env, stdout=out,
                               stderr=subprocess.STDOUT)
    return launch, proc, log


def shape(value):
    """A result's structure without its values: which fields, of which
    JSON types (two runtimes' results must have the same shape)."""
    if isinstance(value, dict):
        return {key: shape(item) for key, item in value.items()}
    if isinstance(value, list):
        return "list"
    return type(value).__name__


def run_pipeline(rt, jobs, out):
    """pipeline.start as `invoke bench` calls it; (run folder, {job id:
    (entry, result)})."""
    run = pipeline.Run(kind="bench", jobs=jobs, out=out, name="t",
                       command="test")
    run_dir = pipeline.start(run, rt, matrix.load())
    _record, job_results = store.load_run(run_dir)
    return run_dir, {e["id"]: (e, r) for e, r in job_results}


def run_one(rt, job, out):
    """`job` run through the pipeline: (run folder, run.json entry, result),
    the entry ok and the result schema-valid, from this harness."""
    run_dir, found = run_pipeline(rt, [job], out)
    entry, result = found[job.id]
    assert entry["status"] == "ok", entry["message"]
    jsonschema.validate(result, SCHEMA)
    assert result["environment"]["harness_digest"] == harness_digest()
    return run_dir, entry, result


def shapes_under(runtimes, out):
    """{name: (the result's shape, its run.json entry's, the image ID)} of
    one cell run under each of `runtimes` ({name: runtime})."""
    shapes = {}
    for name, rt in runtimes.items():
        job = make_job(make_cell(name), name)
        _run_dir, entry, result = run_one(rt, job, out / name)
        container = result["environment"].pop("container")
        shapes[name] = (shape(result), shape(entry), container["image_id"])
    return shapes


def ran(rt, job, run_dir, seconds=300):
    """`job` started as the pipeline starts it, run to its end (exit status
    0) and cleaned up after: its result."""
    _launch, proc, log = start(rt, job, run_dir)
    try:
        assert proc.wait(timeout=seconds) == 0, log.read_text()
    finally:
        rt.cleanup(job, run_dir)
    return resultfile.load(run_dir / f"{job.id}.json")


def stopped_mid_loop(rt, job, run_dir):
    """Start `job`, a cell of far more iterations than ever run (fcn-r at
    batch 16 takes milliseconds each), and once it has timed one stop it
    as the executor does on a timeout: by the launch's stop where it has
    one, else by SIGTERM to the process. Checks that the result kept what
    was measured; returns (exit status, the log's text, the post-mortem
    or None)."""
    launch, proc, log = start(rt, job, run_dir)
    try:
        waits.first_timed_iteration(log, proc)
        if launch.stop is None:
            proc.send_signal(signal.SIGTERM)
        else:
            launch.stop()
        status = proc.wait(timeout=60)
        death = launch.post_mortem() if launch.stop else None
    finally:
        rt.cleanup(job, run_dir)
    result = resultfile.load(run_dir / f"{job.id}.json")
    assert result["error"]["type"] == "Terminated"
    assert 0 < len(result["timing"]["per_iteration_s"]) < \
        job.spec["iterations"]
    return status, log.read_text(), death
