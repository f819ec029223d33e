"""What the docker runtime's test modules share: the cells and jobs they
run, a docker runtime whose harness command a test may replace
(ScriptedRuntime), the pipeline as `invoke bench` calls it, and the
containers a test looks for. The tests: tests/runtimes/test_docker_runtime_cells.py,
test_docker_runtime_hardening.py and test_docker_runtime_cli.py."""
import json
import subprocess
import uuid
from pathlib import Path

import waits
from dlrepro import matrix
from dlrepro.bench import plan
from dlrepro.run import pipeline, store
from dlrepro.run.runtimes import docker as docker_runtime
from harness import resultfile

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

