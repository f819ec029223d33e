"""The MXNet backend, run for real in .venvs/mxnet-cpu (made on demand from
the same lock file as the CPU image). Framework code runs in subprocesses of
that environment's Python; the checks run here."""
import json
import math
import os
import subprocess
import sys

import jsonschema
import layer_reference as ref
import pytest
from probes import loss_probe, run_probe

from harness import networks as nets
from harness.frameworks.mxnet import backend

PROBE_TIMEOUT = 900


@pytest.fixture(scope="module")
def mxnet_python(root):
    from dlrepro import matrix
    from dlrepro.images import envs
    entry = matrix.entry(matrix.load(), "mxnet", "cpu")
    return str(envs.ensure("mxnet", "cpu", entry, log=lambda *args: None))


# --- without MXNet ------------------------------------------------------------

def test_every_layer_kind_has_a_translator():
    assert set(backend.TRANSLATORS) == set(nets.LAYER_KINDS)


def test_module_imports_without_loading_mxnet(root):
    code = ("import sys, harness.frameworks.mxnet.backend; "
            "print('mxnet' in sys.modules)")
    proc = subprocess.run([sys.executable, "-c", code], cwd=root,
                          capture_output=True, text=True)
    assert proc.stdout.strip() == "False", proc.stderr


# --- every network: parameters and shapes -------------------------------------

NETWORKS_PROBE = """
    import json
    from harness import threads, networks as nets
    threads.apply(2)
    from harness.frameworks.mxnet import backend
    backend.configure(2, "cpu", 0)
    out = {}
    for name, network in sorted(nets.NETWORKS.items()):
        session = backend.prepare(network, 2, "cpu", 0)
        out[name] = {"parameters": session.parameters,
                     "output_shape": list(session.output_shape())}
        del session
    print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def built(mxnet_python, root):
    return run_probe(mxnet_python, root, NETWORKS_PROBE)


@pytest.mark.parametrize("name", sorted(nets.NETWORKS))
def test_parameter_count_is_the_description_plus_second_lstm_bias(built, name):
    network = nets.get(name)
    # Gluon's LSTM keeps i2h and h2h biases: one extra vector per gate.
    expected = nets.parameter_count(network) + nets.lstm_extra_bias(network)
    assert built[name]["parameters"] == expected


@pytest.mark.parametrize("name", sorted(nets.NETWORKS))
def test_output_shape_is_the_description(built, name):
    assert tuple(built[name]["output_shape"]) == \
        nets.output_shape(nets.get(name))


# --- conventions: pooling, padding, shortcut, initialisation -------------------

CONVENTIONS_PROBE = """
    import json, random
    import mxnet as mx
    from harness import networks as nets
    from harness.frameworks.mxnet import backend

    def single(layer, shape):
        return nets.Network("probe", shape, "float32", 2, [layer], 0.1, 0.0,
                            "synthetic", "one layer")

    def run(layer, shape, ones=False):
        model = backend.build_model(single(layer, shape))
        if ones:
            for param in model.collect_params().values():
                param.set_data(mx.nd.ones(param.shape))
        backend.hybridize(model)
        rng = random.Random(7)
        x = [rng.uniform(-1, 1) for _ in range(2 * shape[1] * shape[2])]
        out = model(mx.nd.array(x).reshape((1, 2) + shape[1:]))
        return {"x": x, "y": out.asnumpy().ravel().tolist(),
                "shape": list(out.shape[1:])}

    print(json.dumps({
        "max": run(nets.Pool("max", 3, 2), (2, 6, 8)),
        "avg": run(nets.Pool("avg", 3, 2), (2, 6, 8)),
        "pad34": run(nets.Conv(1, 11, 4, (3, 4), False, None), (2, 24, 27),
                     ones=True),
        "pad11": run(nets.Conv(1, 3, 2, (1, 1), False, None), (2, 7, 6),
                     ones=True),
        "shortcut": run(nets.SubsamplePad(2, 5), (2, 5, 6)),
    }))
"""


@pytest.fixture(scope="module")
def conventions(mxnet_python, root):
    return run_probe(mxnet_python, root, CONVENTIONS_PROBE)


@pytest.mark.parametrize("op", ["max", "avg"])
def test_pooling_keeps_the_last_partial_window_and_averages_in_bounds(
        conventions, op):
    result = conventions[op]
    x = ref.grid(result["x"], 2, 6, 8)
    assert result["shape"] == [2, 3, 4]
    assert result["y"] == pytest.approx(ref.pool(x, op, 3, 2),
                                        abs=1e-5)


@pytest.mark.parametrize("case, k, s, before, after, shape", [
    ("pad34", 11, 4, 3, 4, (24, 27)),   # AlexNet's asymmetric SAME padding
    ("pad11", 3, 2, 1, 1, (7, 6)),
])
def test_convolution_padding_is_placed_as_described(conventions, case, k, s,
                                                    before, after, shape):
    result = conventions[case]
    x = ref.grid(result["x"], 2, shape[0], shape[1])
    expected = ref.ones_conv(x, k, s, before, after)
    assert result["shape"][1:] == [(shape[0] + before + after - k) // s + 1,
                                   (shape[1] + before + after - k) // s + 1]
    assert result["y"] == pytest.approx(expected, abs=1e-4)


def test_subsample_shortcut_keeps_every_second_pixel_then_zero_channels(
        conventions):
    result = conventions["shortcut"]
    x = ref.grid(result["x"], 2, 5, 6)
    assert result["shape"] == [5, 3, 3]
    assert result["y"] == pytest.approx(ref.subsample(x, 2) + [0.0] * (3 * 9))


INIT_PROBE = """
    import json
    from harness import networks as nets
    from harness.frameworks.mxnet import backend
    backend.configure(None, "cpu", 0)
    out = []
    for name in ("alexnet-r", "lstm", "resnet-56"):
        model = backend.build_model(nets.get(name))
        for pname, param in model.collect_params().items():
            data = param.data().asnumpy()
            out.append({"network": name, "name": pname,
                        "shape": list(data.shape),
                        "min": float(data.min()), "max": float(data.max()),
                        "std": float(data.std())})
    print(json.dumps(out))
"""


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
        where = "{} {}".format(param["network"], param["name"])
        if kind == "constant":
            assert param["min"] == param["max"] == value, where
            continue
        assert -value <= param["min"] and param["max"] <= value, where
        size = 1
        for d in param["shape"]:
            size *= d
        if size >= 20000:
            # uniform(-a, a) has standard deviation a / sqrt(3)
            assert param["std"] == pytest.approx(value / math.sqrt(3),
                                                 rel=0.03), where


# --- training -------------------------------------------------------------------

LOSS_PROBE = loss_probe("mxnet")


@pytest.fixture(scope="module")
def losses(mxnet_python, root):
    return run_probe(mxnet_python, root, LOSS_PROBE)


@pytest.mark.parametrize("name", ["fcn-r", "alexnet-r", "lstm"])
def test_first_loss_is_chance_and_training_lowers_it(losses, name):
    values = losses[name]
    chance = math.log(nets.get(name).classes)
    assert abs(values[0] - chance) < 0.5
    assert min(values[1:]) < values[0]


# --- cells through the harness entry point -------------------------------------

CELL = {"framework": "mxnet", "network": "alexnet-r", "dataset": "cifar10",
        "batch_size": 32, "global_batch_size": 32, "iterations": 8}


def run_cell(python, root, tmp_path, cell):
    spec = tmp_path / "spec.json"
    out = tmp_path / "result.json"
    spec.write_text(json.dumps({"cell": cell, "container": None}))
    env = dict(os.environ, PYTHONPATH=str(root))
    proc = subprocess.run([python, "-s", "-m", "harness", "run", "--spec",
                           str(spec), "--out", str(out)], cwd=root, env=env,
                          capture_output=True, text=True,
                          timeout=PROBE_TIMEOUT)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(out.read_text())


@pytest.fixture(scope="module")
def one_thread_result(make_cell, mxnet_python, root, tmp_path_factory):
    return run_cell(mxnet_python, root, tmp_path_factory.mktemp("cell"),
                    make_cell(CELL))


@pytest.fixture(scope="module")
def schema(root):
    return json.loads((root / "harness" / "result.schema.json").read_text())


def test_cell_result_is_valid_and_complete(one_thread_result, schema, root):
    result = one_thread_result
    jsonschema.validate(result, schema)
    assert result["status"] == "ok", result["error"]
    env = result["environment"]
    pins = (root / "dockerfiles" / "matrix.toml").read_text()
    assert 'framework_version = "{}"'.format(env["framework_version"]) in pins
    assert env["cuda"] is None and env["cudnn"] is None
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


def test_gpu_cell_on_a_cpu_build_is_unsupported(make_cell, mxnet_python, root, tmp_path,
                                                schema):
    result = run_cell(mxnet_python, root, tmp_path,
                      make_cell(CELL, device="gpu", gpus=1, threads=None))
    jsonschema.validate(result, schema)
    assert result["status"] == "unsupported"
    assert "no CUDA support" in result["error"]["message"]
