"""Caffe in convergence mode, in its image's Python (tests/caffeenv.py):
one worker trains with Caffe's own solver on small generated MNIST files
through dlrepro.converge.runner, and two workers on the CPU are refused as
`unsupported`, saying why (Caffe 1.0's data parallelism is multi-GPU only).
tests/backends/test_converge_training.py compares 1 and 2 workers for the
frameworks that have CPU data parallelism."""
import math

import caffeenv
import jsonschema
import pytest

from dlrepro.converge import datasets as dd
from dlrepro.converge import plan as conv_plan
from dlrepro.converge import runner as conv
from dlrepro.run import runtimes

TRAIN, TEST, BATCH, EPOCHS = 1024, 256, 64, 2


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    folder = tmp_path_factory.mktemp("data")
    checksums = dd.generate("mnist", folder, TRAIN, TEST, seed=11)
    jobs = conv_plan.plan(["caffe"], ["fcn-r"], [1, 2], global_batch=BATCH,
                          epochs=EPOCHS, seed=5, threads=2, data_dir=folder,
                          checksums=checksums, runtime="native", timeout=900)
    conv_plan.check_data(jobs, log=lambda m: None)
    runtime = runtimes.get("native", python=str(caffeenv.python()))
    _run_dir, results = conv.run(jobs, tmp_path_factory.mktemp("results"),
                                 runtime)
    return results


def test_one_worker_trains_with_the_solver_and_the_loss_falls(trained,
                                                              schema):
    result = trained["caffe-fcn-r-w1"]
    jsonschema.validate(result, schema)
    assert result["status"] == "ok", result["error"]
    block = result["convergence"]
    curve = block["curve"]["loss"]
    per_epoch = TRAIN // BATCH
    assert len(curve) == per_epoch * EPOCHS
    assert all(math.isfinite(v) for v in curve)
    first, last = block["per_epoch"]
    assert last["train_loss"] < first["train_loss"]
    assert curve[-1] < max(curve[:per_epoch])
    # The first iteration starts at chance on ten balanced classes.
    assert abs(curve[0] - math.log(10)) < 0.5, curve[0]
    assert 0.0 <= last["test_accuracy"] <= 1.0
    assert last["test_loss"] > 0
    assert "SGDSolver.step(1)" in block["mechanism"]
    assert result["model"]["framework_parameters"] == \
        result["model"]["parameters"]
    assert result["environment"]["framework_build"]["blas"] == "OpenBLAS"


def test_two_cpu_workers_are_unsupported_with_the_reason(trained, schema):
    result = trained["caffe-fcn-r-w2"]
    jsonschema.validate(result, schema)
    assert result["status"] == "unsupported"
    assert "no CPU data parallelism" in result["error"]["message"]
