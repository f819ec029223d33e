"""The docker runtime's cells: real harness cells in the CPU images, the
JSON on the host (schema-valid, written by the mounted harness, owned by the
invoking user), torch.compile's kernels built in the PyTorch image.

Jobs start the way the pipeline starts them: runtime.launch(job, run_dir)
gives the command line, which runs as a subprocess whose output goes to a
log, and runtime.cleanup(job, run_dir) follows (tests/runtimeenv.py: ran).
The container's hardening, stops and deaths are
tests/runtimes/test_docker_runtime_hardening.py; the real command line
tests/runtimes/test_docker_runtime_cli.py.
"""
import os

import jsonschema
import pytest

from runtimeenv import ran
from dlrepro import ROOT, matrix
from dlrepro.run.runtimes import docker as docker_runtime, get
from harness.provenance import harness_digest

from dockerenv import BASE_OVERRIDES, PREFIX
from dockercells import SCHEMA, make_cell, make_job, unique


@pytest.fixture
def runtime(cpu_images, monkeypatch):
    # How `invoke bench --runtime docker` is told to build FROM the test bases.
    monkeypatch.setenv(docker_runtime.BASE_OVERRIDES_ENV, BASE_OVERRIDES)
    rt = get("docker", name_prefix=PREFIX)
    rt.check()
    return rt



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



# Why CNTK and Caffe refuse the transformer (their layers.TRANSFORMER_REASON).
NO_TRANSFORMER = {"cntk": "not translated for CNTK 2.7",
                  "caffe": "no batched product of two blobs"}


@pytest.mark.parametrize("framework", ["pytorch", "tensorflow", "mxnet",
                                       "jax", "cntk", "caffe"])
def test_a_gpt_tiny_cell_runs_in_every_cpu_image(runtime, cpu_images,
                                                 tmp_path, framework,
                                                 request):
    # The smoke suite's transformer cell in each CPU image: trained with
    # the attention its framework records, or refused with the reason.
    if framework in ("cntk", "caffe"):
        request.getfixturevalue(f"{framework}_image")
    assert runtime.prepare([(framework, "cpu")], log=lambda _m: None) == {
        (framework, "cpu"): None}
    cell = make_cell(framework, network="gpt-tiny", batch=4, iterations=2)
    result = ran(runtime, make_job(cell, unique("gpt")), tmp_path)
    jsonschema.validate(result, SCHEMA)
    assert result["cell"] == cell
    if framework in NO_TRANSFORMER:
        assert result["status"] == "unsupported"
        assert NO_TRANSFORMER[framework] in result["error"]["message"]
        return
    assert result["status"] == "ok", result["error"]
    assert result["model"]["framework_parameters"] == 532_992
    assert result["model"]["attention"]
    first = result["loss"]["per_iteration"][0]
    assert abs(first - 6.9078) < 0.15, first  # ln(1000), two steps in
