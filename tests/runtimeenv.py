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
import subprocess
import uuid

import pytest

from dlrepro import matrix
from dlrepro.run import pipeline, runfolder
from dlrepro.bench import plan
from dlrepro.images import build as images

from dockerenv import PREFIX, engine_or_skip, base_or_skip

FRAMEWORK = "mxnet"


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
        proc = subprocess.Popen(argv or launch.argv, cwd=launch.cwd,
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
    _record, pairs = runfolder.load_run(run_dir)
    return run_dir, {e["id"]: (e, r) for e, r in pairs}
