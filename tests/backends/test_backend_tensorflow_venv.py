"""The TensorFlow backend's translation of harness.networks, in
TensorFlow itself: it runs in .venvs/tensorflow-cpu, made from the same
lock as the CPU image, through a subprocess that prints JSON (the pure
helpers are tests/backends/test_backend_tensorflow_pure.py).
Why this is long: one test per translation rule of ten networks (padding,
layouts, LSTM, XLA, threads), each a small probe in the framework.
"""
import json
import math
import os
import subprocess

import jsonschema
import probes
import pytest

from dlrepro import matrix
from dlrepro.images import envs
from harness import networks as nets
from harness.frameworks.tensorflow import backend as tfb
from paths import ROOT


# --- in TensorFlow's environment ------------------------------------------------

@pytest.fixture(scope="session")
def tf_python():
    m = matrix.load()
    entry = matrix.entry(m, "tensorflow", "cpu")
    reason = envs.unavailable_reason(entry, "tensorflow", "cpu")
    assert reason is None, reason
    return envs.ensure("tensorflow", "cpu", entry, log=lambda *_: None)


def run_in_tf(python, code, env=None, timeout=600):
    """Run `code` in TensorFlow's venv; it prints one JSON document last."""
    full_env = dict(os.environ, PYTHONPATH=str(ROOT), TF_CPP_MIN_LOG_LEVEL="2")
    full_env.update(env or {})
    proc = subprocess.run([str(python), "-c", code], cwd=ROOT, env=full_env,
                          capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


# Builds every network in both layouts (NCHW is only traced symbolically: the
# CPU has no NCHW kernels) and reports what the translation made of it.
BUILD_CHECKS = r"""
import json, math
import numpy as np
from harness import networks as nets
from harness.frameworks.tensorflow import backend as tfb
tfb.configure(None, "cpu", 0)
report = {}
for name, network in sorted(nets.NETWORKS.items()):
    entry = {}
    for fmt in ("channels_last", "channels_first"):
        model = tfb.keras_model(network, fmt, 0)
        entry[fmt] = {"parameters": tfb.count_parameters(model),
                      "output_shape": list(model.output_shape[1:]),
                      "input_shape": list(model.input_shape[1:])}
    model = tfb.keras_model(network, "channels_last", 0)
    layers = []
    for layer in model.layers:
        config = layer.get_config()
        layers.append({"type": type(layer).__name__,
                       "padding": config.get("padding"),
                       "strides": config.get("strides"),
                       "data_format": config.get("data_format")})
    entry["layers"] = layers
    bounds = []
    for layer in model.layers:
        kind = type(layer).__name__
        weights = [w.numpy() for w in layer.trainable_weights]
        if kind in ("Dense", "Conv2D"):
            kernel = weights[0]
            receptive = int(np.prod(kernel.shape[:-2])) if kernel.ndim == 4 else 1
            fan_in = kernel.shape[-2] * receptive
            fan_out = kernel.shape[-1] * receptive
            limit = math.sqrt(6.0 / (fan_in + fan_out))
            bounds.append({"kind": kind, "max_abs": float(np.abs(kernel).max()),
                           "limit": limit, "std": float(kernel.std()),
                           "bias_max": float(np.abs(weights[1]).max())
                           if len(weights) > 1 else 0.0})
        elif kind == "BatchNormalization":
            bounds.append({"kind": kind, "gamma": float(np.abs(weights[0] - 1).max()),
                           "beta": float(np.abs(weights[1]).max()),
                           "momentum": layer.momentum, "epsilon": layer.epsilon})
        elif kind == "Embedding":
            bounds.append({"kind": kind, "max_abs": float(np.abs(weights[0]).max()),
                           "limit": 0.05})
        elif kind == "LSTM":
            config = layer.get_config()
            bounds.append({"kind": kind, "shapes": [list(w.shape) for w in weights],
                           "bias_max": float(np.abs(weights[2]).max()),
                           "unit_forget_bias": config["unit_forget_bias"],
                           "return_sequences": config["return_sequences"],
                           "recurrent_initializer":
                               config["recurrent_initializer"]["class_name"]
                               if isinstance(config["recurrent_initializer"], dict)
                               else str(config["recurrent_initializer"])})
    entry["init"] = bounds
    optimizer = tfb.make_optimizer(network)
    config = optimizer.get_config()
    entry["optimizer"] = {"learning_rate": float(config["learning_rate"]),
                          "momentum": float(config["momentum"])}
    report[name] = entry
print(json.dumps(report))
"""


@pytest.fixture(scope="module")
def built(tf_python):
    return run_in_tf(tf_python, BUILD_CHECKS)


@pytest.mark.parametrize("name", sorted(nets.NETWORKS))
def test_models_match_the_description_in_both_layouts(built, name):
    network = nets.get(name)
    for fmt in ("channels_last", "channels_first"):
        entry = built[name][fmt]
        # TensorFlow's LSTM keeps one bias per gate: no extra parameters.
        assert entry["parameters"] == nets.parameter_count(network), fmt
        assert tuple(entry["output_shape"]) == nets.output_shape(network), fmt
        assert tuple(entry["input_shape"]) == tfb.input_shape_in(network, fmt)


@pytest.mark.parametrize("name", sorted(nets.NETWORKS))
def test_weights_are_initialised_as_described(built, name):
    network = nets.get(name)
    for init in built[name]["init"]:
        if init["kind"] in ("Dense", "Conv2D"):
            # Glorot-uniform: inside the limit, and filling it (a uniform's
            # std is limit / sqrt(3)).
            assert init["max_abs"] <= init["limit"] * (1 + 1e-6)
            assert init["std"] == pytest.approx(init["limit"] / math.sqrt(3),
                                                rel=0.2)
            assert init["bias_max"] == 0.0
        elif init["kind"] == "BatchNormalization":
            assert init["gamma"] == 0.0 and init["beta"] == 0.0
            assert init["momentum"] == pytest.approx(0.9)
            assert init["epsilon"] == pytest.approx(1e-5)
        elif init["kind"] == "Embedding":
            assert 0.04 < init["max_abs"] <= 0.05
        elif init["kind"] == "LSTM":
            assert init["bias_max"] == 0.0
            assert init["unit_forget_bias"] is False
            assert init["return_sequences"] is True
            # Glorot drawn with numpy (harness.frameworks.draws), not
            # Keras' orthogonal default.
            assert init["recurrent_initializer"] == "Drawn"
            hidden = init["shapes"][1][0]
            assert init["shapes"][2] == [4 * hidden]  # one bias per gate
    assert built[name]["optimizer"] == {
        "learning_rate": pytest.approx(network.learning_rate),
        "momentum": pytest.approx(network.momentum)}


def _types(built, name):
    return [layer["type"] for layer in built[name]["layers"]]


def test_layer_mapping_of_alexnet(built):
    assert _types(built, "alexnet") == [
        "InputLayer", "Conv2D", "MaxPooling2D", "Conv2D", "MaxPooling2D",
        "Conv2D", "Conv2D", "Conv2D", "MaxPooling2D", "Flatten", "Dense",
        "Dense", "Dense"]
    first = built["alexnet"]["layers"][1]
    # (3, 4) is exactly TensorFlow's SAME padding: one op, no ZeroPadding2D.
    assert first["padding"] == "same" and list(first["strides"]) == [4, 4]
    assert first["data_format"] == "channels_last"
    pools = [l for l in built["alexnet"]["layers"] if l["type"] == "MaxPooling2D"]
    assert all(p["padding"] == "same" for p in pools)


def test_layer_mapping_of_resnet50_stem(built):
    assert _types(built, "resnet50")[1:5] == [
        "ZeroPadding2D", "Conv2D", "BatchNormalization", "Activation"]
    assert built["resnet50"]["layers"][2]["padding"] == "valid"
    types = _types(built, "resnet50")
    assert types.count("Add") == 16
    assert types.count("Conv2D") == 53


def test_layer_mapping_of_resnet56_and_lstm(built):
    types = _types(built, "resnet-56")
    assert types.count("Add") == 27
    assert types.count("SubsamplePad") == 2
    assert types.count("GlobalAveragePooling2D") == 1
    assert _types(built, "lstm") == ["InputLayer", "Embedding", "LSTM", "LSTM",
                                     "Dense"]


# Pooling and padding against numpy references written from the description's
# conventions (ceil mode, max over in-bounds values, averages over the
# in-bounds count; explicit zero padding before/after).
NUMERIC_CHECKS = r"""
import json
import numpy as np
import tensorflow as tf
from harness import networks as nets
from harness.frameworks.tensorflow import backend as tfb
tfb.configure(None, "cpu", 0)

def ref_pool(x, op, k, s):
    n, h, w, c = x.shape
    oh, ow = nets._pool_out(h, k, s), nets._pool_out(w, k, s)
    out = np.zeros((n, oh, ow, c), np.float64)
    for i in range(oh):
        for j in range(ow):
            win = x[:, i * s:min(i * s + k, h), j * s:min(j * s + k, w), :]
            out[:, i, j, :] = win.max(axis=(1, 2)) if op == "max" else win.mean(axis=(1, 2))
    return out

def ref_conv(x, wt, s, pad):
    b, a = pad
    x = np.pad(x, ((0, 0), (b, a), (b, a), (0, 0)))
    k = wt.shape[0]
    oh = (x.shape[1] - k) // s + 1
    ow = (x.shape[2] - k) // s + 1
    out = np.zeros((x.shape[0], oh, ow, wt.shape[3]))
    for i in range(oh):
        for j in range(ow):
            patch = x[:, i * s:i * s + k, j * s:j * s + k, :]
            out[:, i, j, :] = np.tensordot(patch, wt, axes=([1, 2, 3], [0, 1, 2]))
    return out

rng = np.random.RandomState(0)
report = {"pool": [], "conv": []}
for size, k, s in ((16, 3, 2), (9, 2, 2), (15, 3, 2), (10, 5, 2), (12, 5, 3)):
    # All negative: padding that leaked into a max would show as 0.
    x = (rng.randn(2, size, size, 3) - 4.0).astype(np.float32)
    for op in ("max", "avg"):
        network = nets.Network("probe", (3, size, size), "float32", 2,
                               [nets.Pool(op, k, s)], 0.1, 0.0, "synthetic", "")
        model = tfb.keras_model(network, "channels_last", 0)
        got = model(tf.constant(x)).numpy()
        want = ref_pool(x.astype(np.float64), op, k, s)
        report["pool"].append({"case": [size, k, s, op],
                               "layer": type(model.layers[1]).__name__,
                               "shape": list(got.shape[1:]),
                               "expected_shape": list(want.shape[1:]),
                               "error": float(np.abs(got - want).max())})
for size, k, s, pad in ((9, 3, 2, (1, 1)), (12, 11, 4, (3, 4)), (10, 7, 2, (3, 3)),
                        (8, 3, 1, (1, 1)), (9, 1, 2, (0, 0)), (10, 3, 1, (0, 2)),
                        (9, 3, 2, (2, 1))):
    x = rng.randn(2, size, size, 3).astype(np.float32)
    network = nets.Network("probe", (3, size, size), "float32", 2,
                           [nets.Conv(4, k, s, pad, False, None)], 0.1, 0.0,
                           "synthetic", "")
    model = tfb.keras_model(network, "channels_last", 0)
    conv = [l for l in model.layers if type(l).__name__ == "Conv2D"][0]
    got = model(tf.constant(x)).numpy()
    want = ref_conv(x.astype(np.float64), conv.kernel.numpy().astype(np.float64), s, pad)
    report["conv"].append({"case": [size, k, s, list(pad)],
                           "shape": list(got.shape[1:]),
                           "expected_shape": list(want.shape[1:]),
                           "error": float(np.abs(got - want).max())})

# The loss: ln(classes) for uniform logits; mean over tokens for sequences.
logits = tf.zeros((4, 7, 10))
labels = tf.constant(rng.randint(0, 10, (4, 7)).astype(np.int32))
report["uniform_loss"] = float(tfb.loss(logits, labels).numpy())
logits = tf.constant(rng.randn(4, 7, 10).astype(np.float32))
flat = tfb.loss(tf.reshape(logits, (-1, 10)), tf.reshape(labels, (-1,)))
report["token_mean"] = [float(tfb.loss(logits, labels).numpy()), float(flat.numpy())]

# Option-A shortcut: every second pixel, zero channels appended.
x = rng.randn(1, 6, 6, 2).astype(np.float32)
network = nets.Network("probe", (2, 6, 6), "float32", 2,
                       [nets.SubsamplePad(2, 5)], 0.1, 0.0, "synthetic", "")
got = tfb.keras_model(network, "channels_last", 0)(tf.constant(x)).numpy()
report["subsample"] = {"shape": list(got.shape[1:]),
                       "kept": float(np.abs(got[..., :2] - x[:, ::2, ::2, :]).max()),
                       "padded": float(np.abs(got[..., 2:]).max())}
report["math_mode"] = [tfb.math_mode("cpu"), tfb.math_mode("gpu")]
tf.config.experimental.enable_tensor_float_32_execution(False)
report["math_mode"].append(tfb.math_mode("gpu"))
print(json.dumps(report))
"""


@pytest.fixture(scope="module")
def numeric(tf_python):
    return run_in_tf(tf_python, NUMERIC_CHECKS)


def test_pooling_is_ceil_mode_with_in_bounds_averages(numeric):
    routes = set()
    for case in numeric["pool"]:
        assert case["shape"] == case["expected_shape"], case
        assert case["error"] < 1e-5, case
        size, kernel, stride, op = case["case"]
        # Whether the last window runs off the edge (ceil > floor mode).
        overhang = nets._pool_out(size, kernel, stride) > (
            (size - kernel) // stride + 1)
        routes.add((case["layer"], op, overhang))
    # Every route was exercised, with windows running off the edge: SAME
    # pooling and the explicit fallback, max and average.
    assert {("MaxPooling2D", "max", True), ("AveragePooling2D", "avg", True),
            ("CeilPool", "max", True), ("CeilPool", "avg", True)} <= routes


def test_convolution_padding_matches_explicit_zero_padding(numeric):
    for case in numeric["conv"]:
        assert case["shape"] == case["expected_shape"], case
        assert case["error"] < 1e-4, case


def test_loss_is_mean_cross_entropy_over_tokens(numeric):
    assert numeric["uniform_loss"] == pytest.approx(math.log(10), rel=1e-6)
    mean, flat = numeric["token_mean"]
    assert mean == pytest.approx(flat, rel=1e-6)


def test_subsample_pad_keeps_strided_pixels_and_adds_zero_channels(numeric):
    assert numeric["subsample"] == {"shape": [3, 3, 5], "kept": 0.0,
                                    "padded": 0.0}


# --- whole cells through `python -m harness run` ---------------------------------

CELL = {"framework": "tensorflow", "network": "alexnet-r",
        "dataset": "cifar10", "batch_size": 16, "global_batch_size": 16,
        "iterations": 12, "warmup": 3}


def run_cell(python, tmp_path, cell, env=None):
    spec = tmp_path / "spec.json"
    out = tmp_path / "result.json"
    spec.write_text(json.dumps({"cell": cell, "container": None}))
    full_env = dict(os.environ, PYTHONPATH=str(ROOT), TF_CPP_MIN_LOG_LEVEL="2")
    full_env.update(env or {})
    proc = subprocess.run([str(python), "-m", "harness", "run", "--spec",
                           str(spec), "--out", str(out)], cwd=ROOT,
                          env=full_env, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    result = json.loads(out.read_text())
    schema = json.loads((ROOT / "harness" / "result.schema.json").read_text())
    jsonschema.validate(result, schema)
    return result


def test_one_thread_cell_uses_one_core(make_cell, tf_python, tmp_path):
    result = run_cell(tf_python, tmp_path, make_cell(CELL))
    assert result["status"] == "ok", result["error"]
    env = result["environment"]
    assert env["threads"]["requested"] == 1
    assert env["threads"]["framework"] == 1
    assert env["threads"]["environment"]["TF_NUM_INTRAOP_THREADS"] == "1"
    # Process CPU seconds over wall seconds: one busy core is ~1.
    assert result["timing"]["cpu_utilization"] < 1.3
    assert len(result["timing"]["per_iteration_s"]) == 12
    assert result["model"]["framework_parameters"] == 89578
    assert result["model"]["parameter_note"] is None
    assert env["framework_version"].startswith("2.")
    assert result["compilation"]["mode"] == "function"
    assert env["tf_data_format"] == "channels_last"
    assert env["cuda"] is None and env["cudnn"] is None
    losses = result["loss"]["per_iteration"]
    assert all(math.isfinite(v) for v in losses)
    assert losses[-1] < result["loss"]["warmup"][0]


def test_xla_option_compiles_the_step_and_is_reported(make_cell, tf_python, tmp_path):
    result = run_cell(tf_python, tmp_path,
                      make_cell(CELL, network="fcn-r", dataset="mnist", batch_size=8,
                            global_batch_size=8, threads=None, iterations=3,
                            warmup=1, compile="xla"))
    assert result["status"] == "ok", result["error"]
    assert result["compilation"]["mode"] == "xla"
    assert all(math.isfinite(v) for v in result["loss"]["per_iteration"])


def test_unknown_compile_mode_is_unsupported_with_the_modes(make_cell, tf_python, tmp_path):
    result = run_cell(tf_python, tmp_path,
                      make_cell(CELL, iterations=1, warmup=1, compile="jit"))
    assert result["status"] == "unsupported"
    assert result["error"]["message"] == ("the tensorflow backend offers "
                                          "compile mode function, xla, none "
                                          "only, not 'jit'")


def test_gpu_cell_without_a_gpu_says_why(make_cell, tf_python, tmp_path):
    result = run_cell(tf_python, tmp_path, make_cell(CELL, device="gpu", gpus=1, threads=None,
                                                 iterations=1, warmup=0))
    assert result["status"] == "error"
    assert "sees no GPU" in result["error"]["message"]


# --- TensorFlow 1.15 (the tf1 profile's version), where Python 3.7 exists --------

def test_tf1_cell_runs_end_to_end(make_cell, tmp_path):
    import tf1_venv
    python = tf1_venv.python()
    result = run_cell(python, tmp_path, make_cell(CELL))
    assert result["status"] == "ok", result["error"]
    env = result["environment"]
    assert env["framework_version"] == "1.15.5"
    assert env["python_version"].startswith("3.7.")
    assert env["threads"]["framework"] == 1
    assert result["timing"]["cpu_utilization"] < 1.3
    assert result["model"]["framework_parameters"] == 89578
    losses = result["loss"]["per_iteration"]
    assert losses[-1] < result["loss"]["warmup"][0]


def test_tf1_xla_option_compiles_the_step(make_cell, tmp_path):
    import tf1_venv
    python = tf1_venv.python()
    # TensorFlow 1.15's tf.function takes experimental_compile.
    result = run_cell(python, tmp_path,
                      make_cell(CELL, network="fcn-r", dataset="mnist", batch_size=8,
                            global_batch_size=8, iterations=2, warmup=1,
                            compile="xla"))
    assert result["status"] == "ok", result["error"]
    assert result["compilation"]["mode"] == "xla"
    assert all(math.isfinite(v) for v in result["loss"]["per_iteration"])


def test_math_mode_follows_tensorflows_tf32_switch(numeric):
    fp32 = {"matmul": "fp32", "conv": "fp32"}
    # TensorFlow allows TF32 by default; the CPU has none.
    assert numeric["math_mode"] == [fp32, {"matmul": "tf32", "conv": "tf32"},
                                    fp32]


# --- the benchmark script runs and reports (no timing asserted) -----------------

def _benchmark(python, *args):
    return subprocess.run(
        [str(python), str(ROOT / "benchmarks" / "idiomatic_tensorflow.py")]
        + list(args), cwd=ROOT, capture_output=True, text=True, timeout=600,
        env=dict(os.environ, PYTHONPATH=str(ROOT), TF_CPP_MIN_LOG_LEVEL="2"))


def test_idiomatic_benchmark_reports_both_loops(tf_python):
    proc = _benchmark(tf_python, "--networks", "alexnet-r", "--rounds", "2",
                      "--block", "1", "--warmup", "1", "--threads", "1",
                      "--json")
    report, _row = probes.idiomatic_row(proc, "fit_mean_s")
    assert report["versions"]["tf_xla"] is False


def test_idiomatic_benchmark_rejects_unknown_networks(tf_python):
    proc = _benchmark(tf_python, "--networks", "vgg16")
    assert proc.returncode == 2
    assert "unknown networks vgg16" in proc.stderr
