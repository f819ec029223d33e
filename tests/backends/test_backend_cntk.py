"""The CNTK backend.

CNTK 2.7 exists only for Python <= 3.6 with OpenMPI 1.10, which these
machines have only in the CNTK image. Two groups of tests:
- static ones that always run: the plain-Python shape, padding,
  batch-norm and minibatch arithmetic the translation relies on (Python
  3.6 syntax, the import without CNTK and the translators:
  test_backend_contract);
- framework ones, run by the image's Python (tests/cntkenv.py; or the
  interpreter DLREPRO_CNTK_PYTHON names): skipped with the reason where no
  Docker engine or base image is available, failed instead in CI
  (DLREPRO_REQUIRE_DOCKER).
"""
import ast
import math

import cntkenv
import probes
import pytest
from probes import run_probe
from workercells import forked_trains_as_alone, small_cells

from harness import networks as nets
from harness.frameworks.cntk import backend

def _layers(kind):
    for network in nets.NETWORKS.values():
        for r in probes.walk(nets.resolve(network)):
            if type(r.layer) is kind:
                yield network.name, r


# --- static: always run ------------------------------------------------------

def _calls(name):
    return probes.backend_calls(backend, name)


def test_training_is_train_minibatch_with_classic_momentum():
    assert _calls("train_minibatch")
    momentum = _calls("momentum_sgd")
    assert len(momentum) == 1
    unit_gain = [k for k in momentum[0].keywords if k.arg == "unit_gain"]
    # CNTK's unit-gain momentum scales gradients by (1 - momentum); the
    # other frameworks do not.
    assert len(unit_gain) == 1 and unit_gain[0].value.value is False


def test_pooling_keeps_partial_windows_and_excludes_padding():
    (pool,) = _calls("pooling")
    keywords = dict((k.arg, k.value.value) for k in pool.keywords
                    if isinstance(k.value, ast.Constant))
    assert keywords["ceil_out_dim"] is True
    assert keywords["include_pad"] is False


def test_automatic_padding_only_where_it_equals_the_description():
    seen = set()
    for name, r in _layers(nets.Conv):
        layer = r.layer
        mode = backend.conv_padding(layer)
        seen.add(mode if isinstance(mode, str) else "explicit")
        if mode == "auto":
            assert layer.kernel % 2 == 1
            assert layer.pad == (layer.kernel // 2, layer.kernel // 2)
        elif mode == "none":
            assert layer.pad == (0, 0)
        else:
            assert mode == layer.pad
    assert seen == {"auto", "none", "explicit"}
    alexnet_first = nets.resolve(nets.get("alexnet"))[0].layer
    assert backend.conv_padding(alexnet_first) == (3, 4)


@pytest.mark.parametrize("size", range(1, 40))
@pytest.mark.parametrize("kernel, stride", [(1, 1), (1, 2), (3, 1), (3, 2),
                                            (5, 1), (7, 2), (11, 4)])
def test_centred_automatic_padding_matches_explicit_arithmetic(size, kernel,
                                                               stride):
    pad = kernel // 2
    layer = nets.Conv(8, kernel, stride, (pad, pad), False, None)
    assert backend.conv_padding(layer) == ("none" if kernel == 1 else "auto")
    assert backend.conv_size(size, layer) == \
        (size + 2 * pad - kernel) // stride + 1


@pytest.mark.parametrize("samples", [1, 11, 16, 128, 4096])
def test_batch_norm_time_constant_blends_like_momentum(samples):
    constant = backend.bn_time_constant(0.9, samples)
    # CNTK's running-statistics blend factor per minibatch.
    assert 1 - math.exp(-samples / constant) == pytest.approx(0.1)


@pytest.mark.parametrize("name", ["lstm", "lstm32", "lstm64"])
def test_lstm_minibatch_is_sequences_and_the_rate_is_per_token(name):
    network = nets.get(name)
    plan = backend.minibatch_plan(network, 128)
    assert plan == {"sequences": 128,
                    "samples": 128 * network.input_shape[0]}


def test_image_minibatch_counts_samples():
    assert backend.minibatch_plan(nets.get("alexnet-r"), 128) == \
        {"sequences": 128, "samples": 128}


def test_glorot_fans_are_the_descriptions():
    first = nets.resolve(nets.get("alexnet"))[0]
    assert backend.fans(first) == (3 * 121, 96 * 121)
    dense = nets.resolve(nets.get("fcn5"))[0]
    assert backend.fans(dense) == (26752, 2048)
    time_dense = nets.resolve(nets.get("lstm"))[-1]
    assert backend.fans(time_dense) == (256, 10000)
    assert backend.glorot_limit(256, 1024) == pytest.approx(
        math.sqrt(6.0 / 1280))


# --- with CNTK: where it imports ---------------------------------------------

@pytest.fixture(scope="module")
def cntk_python():
    return str(cntkenv.python())


CONVENTIONS_PROBE = probes.conventions_probe("""
    import json, random
    import numpy as np
    from harness import networks as nets
    from harness.frameworks.cntk import backend
    backend.configure(None, "cpu", 0)

    def run(layer, shape, ones=False):
        network = nets.Network("probe", shape, "float32", 2, [layer], 0.1,
                               0.0, "synthetic", "one layer")
        model = backend.build_model(network, 1, "cpu", 0)
        if ones:
            for parameter in model.parameters:
                parameter.value = np.ones(parameter.shape, dtype=np.float32)
        rng = random.Random(7)
        x = [rng.uniform(-1, 1) for _ in range(2 * shape[1] * shape[2])]
        data = np.array(x, dtype=np.float32).reshape((1,) + shape)
        out = np.asarray(model.eval({model.arguments[0]: data}))
        return {"x": x, "y": out.ravel().tolist(),
                "shape": list(out.shape[1:])}
""")


class TestCNTKProbes(probes.BackendChecks):
    """Networks, layer conventions and training, as for MXNet; CNTK counts
    one bias vector per LSTM gate, as the description does."""
    FRAMEWORK, PYTHON = "cntk", "cntk_python"
    CONVENTIONS = CONVENTIONS_PROBE


# The update rule, checked against plain Python on two small models: a
# dense softmax layer trained with momentum (the image networks' path), and
# token sequences through an embedding and a per-step dense layer without
# momentum (the LSTMs' path). Two steps each, so a wrong learning-rate
# scale (a sum over samples, or over sequences instead of tokens), unit-gain
# momentum or a loss averaged over sequences cannot pass.
UPDATE_PROBE = """
    import json
    import numpy as np
    from harness import networks as nets
    from harness.data import batches
    from harness.frameworks.cntk import backend
    backend.configure(1, "cpu", 0)

    def run(network, batch_size, steps):
        batch = batches.fixed_batch(network, batch_size, 3)
        session = backend.prepare(network, batch_size, "cpu", 3, batch=batch)

        def weights():
            return [{"shape": list(p.shape),
                     "value": np.asarray(p.value).ravel().tolist()}
                    for p in session.model.parameters]
        states, losses = [weights()], []
        for _ in range(steps):
            losses.append(session.step())
            states.append(weights())
        return {"inputs": batch.inputs.tolist(),
                "labels": batch.labels.tolist(),
                "losses": losses, "states": states}

    print(json.dumps({
        "dense": run(nets.Network("dense", (4,), "float32", 3,
                                  [nets.Dense(3, None)], 0.5, 0.9,
                                  "synthetic", "probe"), 5, 2),
        "tokens": run(nets.Network("tokens", (4,), "int64", 5,
                                   [nets.Embedding(5, 3), nets.TimeDense(5)],
                                   0.5, 0.0, "synthetic", "probe"), 3, 2),
    }))
"""


@pytest.fixture(scope="module")
def updates(cntk_python, root):
    return run_probe(cntk_python, root, UPDATE_PROBE)


def _by_shape(state):
    return dict((tuple(p["shape"]), p["value"]) for p in state)


def _softmax_grads(features, labels, weight, bias, classes):
    """Mean cross-entropy of softmax(features @ weight + bias) over the rows,
    its gradient with respect to the logits (already divided by the row
    count) and the weight gradient; plain Python."""
    rows, width = len(features), len(features[0])
    total, dlogits = 0.0, []
    for x, y in zip(features, labels):
        logits = [bias[k] + sum(x[i] * weight[i * classes + k]
                                for i in range(width)) for k in range(classes)]
        top = max(logits)
        exps = [math.exp(v - top) for v in logits]
        norm = sum(exps)
        total += math.log(norm) + top - logits[y]
        dlogits.append([(e / norm - (k == y)) / rows
                        for k, e in enumerate(exps)])
    dweight = [sum(features[r][i] * dlogits[r][k] for r in range(rows))
               for i in range(width) for k in range(classes)]
    return total / rows, dlogits, dweight


def _classic_momentum(weights, grads, velocity, rate, momentum):
    velocity = [momentum * v + g for v, g in zip(velocity, grads)]
    return [w - rate * v for w, v in zip(weights, velocity)], velocity


def test_cntk_dense_update_is_classic_momentum_on_the_mean_gradient(updates):
    probe = updates["dense"]
    x = [probe["inputs"][i * 4:(i + 1) * 4] for i in range(5)]
    start = _by_shape(probe["states"][0])
    weight, bias = start[(4, 3)], start[(3,)]
    v_weight, v_bias = [0.0] * 12, [0.0] * 3
    for step in range(2):
        loss, dlogits, dweight = _softmax_grads(x, probe["labels"], weight,
                                                bias, 3)
        dbias = [sum(row[k] for row in dlogits) for k in range(3)]
        assert probe["losses"][step] == pytest.approx(loss, rel=1e-5)
        weight, v_weight = _classic_momentum(weight, dweight, v_weight, 0.5,
                                             0.9)
        bias, v_bias = _classic_momentum(bias, dbias, v_bias, 0.5, 0.9)
        got = _by_shape(probe["states"][step + 1])
        assert got[(4, 3)] == pytest.approx(weight, rel=1e-4, abs=1e-6)
        assert got[(3,)] == pytest.approx(bias, rel=1e-4, abs=1e-6)


def test_cntk_sequence_update_is_the_mean_gradient_per_token(updates):
    probe = updates["tokens"]
    tokens, labels = probe["inputs"], probe["labels"]  # 3 sequences x 4
    start = _by_shape(probe["states"][0])
    table, weight, bias = start[(5, 3)], start[(3, 5)], start[(5,)]
    for step in range(2):
        features = [table[t * 3:(t + 1) * 3] for t in tokens]
        loss, dlogits, dweight = _softmax_grads(features, labels, weight,
                                                bias, 5)
        dbias = [sum(row[k] for row in dlogits) for k in range(5)]
        dtable = [0.0] * 15
        for token, row in zip(tokens, dlogits):
            for d in range(3):
                dtable[token * 3 + d] += sum(row[k] * weight[d * 5 + k]
                                             for k in range(5))
        # The loss CNTK reports is the mean over the 12 tokens, not over
        # the 3 sequences.
        assert probe["losses"][step] == pytest.approx(loss, rel=1e-5)
        weight = [w - 0.5 * g for w, g in zip(weight, dweight)]
        bias = [b - 0.5 * g for b, g in zip(bias, dbias)]
        table = [w - 0.5 * g for w, g in zip(table, dtable)]
        got = _by_shape(probe["states"][step + 1])
        assert got[(3, 5)] == pytest.approx(weight, rel=1e-4, abs=1e-6)
        assert got[(5,)] == pytest.approx(bias, rel=1e-4, abs=1e-6)
        assert got[(5, 3)] == pytest.approx(table, rel=1e-4, abs=1e-6)


VERSIONS_PROBE = """
    import json
    from harness.frameworks.cntk import backend
    print(json.dumps(backend.versions("cpu")))
"""


def test_cntk_version_is_the_wheels(cntk_python, root):
    from dlrepro import matrix
    info = run_probe(cntk_python, root, VERSIONS_PROBE)
    # cntk.__version__ says "2.7"; the wheel's own version tells
    # 2.7.post2 from the releases before it.
    assert info["framework_version"] == \
        matrix.load()["cntk"]["cpu"]["framework_version"]
    assert info["framework_build"] == {"distribution": "cntk",
                                       "module_version": "2.7"}
    assert (info["cuda"], info["cudnn"], info["nccl"]) == (None, None, None)


def test_cntk_cell_is_valid_and_one_thread_is_really_used(
        make_cell, cntk_python, root, tmp_path, schema):
    cell = make_cell({"framework": "cntk", "network": "alexnet-r",
                      "dataset": "cifar10", "batch_size": 32,
                      "global_batch_size": 32, "iterations": 8})
    probes.one_thread_cell(cntk_python, root, tmp_path, cell, schema)


def test_a_forked_child_trains_as_a_process_of_its_own(
        make_cell, cntk_python, root, tmp_path):
    # The fork server in CNTK's image imports CNTK before it forks
    # (harness.forkserver.PRELOAD): each child's losses must equal those of
    # a process of its own, step by step.
    cells = small_cells(make_cell, "cntk", ("fcn-r", "lstm32"))
    forked = forked_trains_as_alone(root, cntk_python, "cntk", tmp_path, cells)
    assert forked[0]["isolation"]["parent"]["preload"]["threads"][
        "after"] == 1
