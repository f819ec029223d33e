"""The MXNet backend, run for real in .venvs/mxnet-cpu (made on demand from
the same lock file as the CPU image). Framework code runs in subprocesses of
that environment's Python; the checks run here."""
import math

import jsonschema
import probes
import pytest
from probes import run_cell, run_probe

from harness import networks as nets


@pytest.fixture(scope="module")
def mxnet_python(framework_python):
    return str(framework_python("mxnet"))


# --- networks, layer conventions, training: the probes both backends run -----

CONVENTIONS_PROBE = probes.conventions_probe("""
    import json, random
    import mxnet as mx
    from harness import networks as nets
    from harness.frameworks.mxnet import backend

    def single(layer, shape):
        return nets.Network("probe", shape, "float32", 2, [layer], 0.1, 0.0,
                            "synthetic", "one layer")

    def run(layer, shape, ones=False):
        model = backend.build_model(single(layer, shape), 1, "cpu", 0)
        if ones:
            for param in model.collect_params().values():
                param.set_data(mx.nd.ones(param.shape))
        backend.hybridize(model)
        rng = random.Random(7)
        x = [rng.uniform(-1, 1) for _ in range(2 * shape[1] * shape[2])]
        out = model(mx.nd.array(x).reshape((1, 2) + shape[1:]))
        return {"x": x, "y": out.asnumpy().ravel().tolist(),
                "shape": list(out.shape[1:])}
""")


class TestMXNetProbes(probes.BackendChecks):
    FRAMEWORK, PYTHON = "mxnet", "mxnet_python"
    CONVENTIONS = CONVENTIONS_PROBE
    SECOND_LSTM_BIAS = True


# --- initialisation ----------------------------------------------------------

INIT_PROBE = probes.init_probe("""
    import json
    from harness import networks as nets
    from harness.frameworks.mxnet import backend
    backend.configure(None, "cpu", 0)

    def arrays(model):
        for pname, param in model.collect_params().items():
            yield {"name": pname}, param.data().asnumpy()
""")


@pytest.fixture(scope="module")
def initial(mxnet_python, root):
    return run_probe(mxnet_python, root, INIT_PROBE)


def _expected_init(name, shape):
    """(kind, value): "uniform" with its limit, or "constant"."""
    if name.endswith(("_bias", "_beta", "running_mean")):
        return "constant", 0.0
    if name.endswith(("_gamma", "running_var")):
        return "constant", 1.0
    if "embedding" in name:
        return "uniform", 0.05
    receptive = 1
    for d in shape[2:]:
        receptive *= d
    return "uniform", math.sqrt(6.0 / ((shape[0] + shape[1]) * receptive))


def test_weights_are_glorot_uniform_and_the_rest_as_described(initial):
    assert len(initial) > 20
    for param in initial:
        kind, value = _expected_init(param["name"], param["shape"])
        probes.assert_initialized(param, kind, value)


# --- cells through the harness entry point -----------------------------------

CELL = probes.alexnet_cell("mxnet")
one_thread_result = probes.alexnet_result_fixture("mxnet", "mxnet_python")


def test_cell_result_is_valid_and_complete(one_thread_result, schema, root):
    result = one_thread_result
    env = probes.valid_and_pinned(result, schema, root)
    assert env["framework_build"]["CUDA"] is False
    network = nets.get("alexnet-r")
    assert result["model"]["framework_parameters"] == \
        nets.parameter_count(network)
    assert len(result["timing"]["per_iteration_s"]) == 8
    assert all(math.isfinite(v) for v in result["loss"]["per_iteration"])


def test_one_thread_is_reported_and_really_used(one_thread_result):
    threads = one_thread_result["environment"]["threads"]
    assert threads["requested"] == 1
    assert threads["framework"] == 1
    assert threads["environment"]["MXNET_CPU_WORKER_NTHREADS"] == "1"
    # Process CPU seconds over wall seconds: more than one busy core would
    # show as > 1 (1.3 leaves room for the Python thread and the clock).
    assert one_thread_result["timing"]["cpu_utilization"] < 1.3


THREADS_PROBE = """
    import json
    from harness import threads
    threads.apply(2)
    from harness.frameworks.mxnet import backend
    backend.configure(2, "cpu", 0)
    print(json.dumps({"environment": threads.snapshot(),
                      "framework": backend.effective_threads()}))
"""


def test_n_threads_are_n_openmp_threads_in_one_engine_worker(mxnet_python,
                                                             root):
    result = run_probe(mxnet_python, root, THREADS_PROBE)
    env = result["environment"]
    assert env["OMP_NUM_THREADS"] == env["MXNET_OMP_MAX_THREADS"] == "2"
    # More workers would each run a 2-thread team: up to 4 threads.
    assert env["MXNET_CPU_WORKER_NTHREADS"] == "1"
    assert result["framework"] == 2


def test_gpu_cell_on_a_cpu_build_is_unsupported(make_cell, mxnet_python, root,
                                                tmp_path, schema):
    result = run_cell(mxnet_python, root, tmp_path,
                      make_cell(CELL, device="gpu", gpus=1, threads=None))
    jsonschema.validate(result, schema)
    assert result["status"] == "unsupported"
    assert "no CUDA support" in result["error"]["message"]
