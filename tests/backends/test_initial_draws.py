"""Initial weights: the documented distributions, checked by their moments.

harness.networks documents Glorot-uniform weights (limit sqrt(6 / (fan_in +
fan_out))) and uniform(-0.05, 0.05) embeddings. TensorFlow, MXNet and JAX
draw them with numpy (harness.frameworks.draws), CNTK its dense and
embedding weights (in its image), PyTorch with its own generator. For a
large layer in each backend the sample's mean and standard deviation must
lie within five standard errors of the documented uniform's (mean 0, std
limit / sqrt(3)), every value within the limit, and a seed must give the
same weights twice and another seed other weights.
"""
import hashlib
import math
import os
import threading

import numpy as np
import pytest

from harness.frameworks import draws
from probes import run_probe

# Standard errors allowed: a correct draw misses by chance with probability
# about 6e-7 per check.
Z = 5.0
# uniform(-a, a): excess kurtosis -1.2, so the sample variance's relative
# standard error is sqrt((kurtosis - 1) / n) = sqrt(0.8 / n), its std's half.
STD_REL_SE = math.sqrt(0.8) / 2

BACKENDS = ("pytorch", "tensorflow", "mxnet", "jax", "cntk")

# The first weight of fcn-r (784 x 2048 Glorot) and lstm32's embedding
# (10000 x 256, uniform(-0.05, 0.05)), as each backend holds them.
PROBE = """
    import hashlib, json, sys
    import numpy as np
    from harness import networks as nets
    from harness.frameworks import load
    framework = sys.argv[1]
    backend = load(framework)
    backend.configure(1, "cpu", 0)

    def first(model, network):
        if framework == "cntk":
            # model.parameters is not in layer order: the layer's by shape.
            shape = {"fcn-r": (784, 2048), "lstm32": (10000, 256)}[network]
            (weight,) = [p for p in model.parameters if p.shape == shape]
            return np.asarray(weight.value)
        if framework == "pytorch":
            return model[0].weight.detach().numpy()
        if framework == "tensorflow":
            return model.trainable_weights[0].numpy()
        if framework == "mxnet":
            return list(model.collect_params().values())[0].data().asnumpy()
        return np.asarray(model.params[0][sorted(model.params[0])[-1]])

    out = {}
    for network in ("fcn-r", "lstm32"):
        for seed in (0, 0, 1):
            values = first(backend.build_model(nets.get(network), 1, "cpu",
                                               seed), network)
            entry = out.setdefault(network, {"digests": []})
            entry["digests"].append(
                hashlib.sha256(np.ascontiguousarray(values)).hexdigest())
            entry.update(shape=list(values.shape), size=int(values.size),
                         mean=float(values.mean(dtype=np.float64)),
                         std=float(values.std(dtype=np.float64)),
                         min=float(values.min()), max=float(values.max()))
    print(json.dumps(out))
"""

LIMITS = {"fcn-r": math.sqrt(6.0 / (784 + 2048)), "lstm32": 0.05}


def assert_uniform(values, limit, where):
    """Moments and range of a sample summary (size, mean, std, min, max)
    against uniform(-limit, limit)."""
    sigma = limit / math.sqrt(3)
    n = values["size"]
    assert -limit <= values["min"] and values["max"] <= limit, where
    assert abs(values["mean"]) <= Z * sigma / math.sqrt(n), where
    assert abs(values["std"] - sigma) <= Z * STD_REL_SE * sigma / \
        math.sqrt(n), where


def summary(values):
    return {"size": int(values.size), "mean": float(values.mean(
        dtype=np.float64)), "std": float(values.std(dtype=np.float64)),
        "min": float(values.min()), "max": float(values.max())}


@pytest.mark.parametrize("framework", BACKENDS)
def test_a_large_layer_has_the_documented_moments(framework, framework_python,
                                                  root):
    found = run_probe(str(framework_python(framework)), root, PROBE,
                      framework)
    for network, limit in sorted(LIMITS.items()):
        entry = found[network]
        assert entry["size"] > 1000000, network
        assert_uniform(entry, limit, "{} {}".format(framework, network))
        first, again, other = entry["digests"]
        assert first == again, "{}: one seed, other weights".format(network)
        assert first != other, "{}: another seed, same weights".format(
            network)


MXNET_LSTM_PROBE = """
    import json
    from harness import networks as nets
    from harness.frameworks.mxnet import backend
    backend.configure(1, "cpu", 0)
    model = backend.build_model(nets.get("lstm32"), 1, "cpu", 0)
    params = dict((name.split("_", 1)[1], p.data().asnumpy())
                  for name, p in model.collect_params().items())
    print(json.dumps({"same": [bool((params["l0_" + m] ==
                                     params["l1_" + m]).all())
                               for m in ("h2h_weight",)],
                      "names": sorted(params)}))
"""


def test_mxnet_lstm_layers_draw_their_own_matrices(framework_python, root):
    # Gluon hands one initializer to both layers' matrices: each call must
    # draw from a key of its own, or the layers would start equal.
    found = run_probe(str(framework_python("mxnet")), root, MXNET_LSTM_PROBE)
    assert "l1_h2h_weight" in found["names"], found["names"]
    assert found["same"] == [False]


PYTORCH_CHUNKS_PROBE = """
    import hashlib, json
    import torch
    from harness.frameworks.draws import SPAN
    from harness.frameworks.pytorch import initial
    out = {}
    for threads in (1, 2, 3):
        torch.set_num_threads(threads)
        torch.manual_seed(11)
        # Three spans and an odd rest, drawn by `threads` threads.
        values = torch.empty(3 * SPAN + 5)
        initial.uniform(values, -0.5, 0.5)
        chunks = values[:3 * SPAN].view(3, -1)
        out[threads] = {
            "digest": hashlib.sha256(values.numpy().tobytes()).hexdigest(),
            "range": [float(values.min()), float(values.max())],
            "chunks_equal": bool((chunks[0] == chunks[1]).all()
                                 or (chunks[1] == chunks[2]).all()),
            "zeros": int((values == 0).sum())}
    print(json.dumps(out))
"""


def test_pytorch_draws_a_large_tensor_the_same_with_any_thread_count(
        framework_python, root):
    # The chunks' generators are seeded from the global generator in
    # order: how many threads drew them must not change the weights (a
    # cell with 1 thread and one with 2 start from the same model).
    found = run_probe(str(framework_python("pytorch")), root,
                      PYTORCH_CHUNKS_PROBE)
    assert found["1"]["digest"] == found["2"]["digest"] == \
        found["3"]["digest"]
    for threads, entry in found.items():
        low, high = entry["range"]
        assert -0.5 <= low < -0.49 and 0.49 < high < 0.5, threads
        assert not entry["chunks_equal"], threads
        # Every value drawn (torch.empty's memory may hold zeros).
        assert entry["zeros"] < 5, threads


def test_the_moments_check_fails_for_a_wrong_limit():
    values = draws.uniform(draws.keys(0), (784, 2048), 0.05)
    assert_uniform(summary(values), 0.05, "right")
    with pytest.raises(AssertionError):
        assert_uniform(summary(values), 0.05 * 1.01, "1% too wide")
    with pytest.raises(AssertionError):
        assert_uniform(summary(values + np.float32(0.001)), 0.06, "shifted")


def test_draws_are_aligned_in_bounds_and_deterministic():
    limit = draws.glorot_limit(3 * 3 * 64, 3 * 3 * 128)
    a = draws.glorot(draws.keys(7).spawn(1)[0], (3, 3, 64, 128),
                     3 * 3 * 64, 3 * 3 * 128)
    b = draws.glorot(draws.keys(7).spawn(1)[0], (3, 3, 64, 128),
                     3 * 3 * 64, 3 * 3 * 128)
    assert a.ctypes.data % draws.ALIGNMENT == 0
    assert a.dtype == np.float32 and a.flags.c_contiguous
    assert np.abs(a).max() <= np.float32(limit)
    assert hashlib.sha256(a).digest() == hashlib.sha256(b).digest()
    assert_uniform(summary(a), limit, "conv")


def test_drawing_into_memory_given_draws_the_same_values():
    key = draws.keys(3)
    given = np.empty((100, 300), dtype=np.float32)
    drawn = draws.uniform(key.spawn(1)[0], (100, 300), 0.1)
    into = draws.uniform(draws.keys(3).spawn(1)[0], (100, 300), 0.1,
                         out=given)
    assert into is given
    assert np.array_equal(drawn, given)


def test_a_draw_in_chunks_is_the_one_draw_of_the_whole_array():
    # Two chunks and an odd rest: a cut in the generator's stream (or a
    # chunk drawn twice, or left undrawn) changes the values.
    count, limit = 2 * draws.CHUNK + 3, 0.02
    bound = np.float32(limit)
    if float(bound) > limit:
        bound = np.nextafter(bound, np.float32(0))
    whole = np.random.default_rng(draws.keys(5)).random(count,
                                                        dtype=np.float32)
    whole = (whole * np.float32(2) - np.float32(1)) * bound
    drawn = draws.uniform(draws.keys(5), (count,), limit)
    assert np.array_equal(drawn, whole)


def test_a_large_draw_is_each_spans_own_stream_whatever_the_threads(
        monkeypatch):
    # Two spans and an odd rest, each from the key's child in order: a span
    # drawn from another key, twice or not at all, or values that depend on
    # how many threads drew them, change the array.
    count, limit = 2 * draws.SPAN + 3, 0.02
    bound = np.float32(limit)
    if float(bound) > limit:
        bound = np.nextafter(bound, np.float32(0))
    parts = []
    for index, size in enumerate((draws.SPAN, draws.SPAN, 3)):
        u = np.random.default_rng(draws.keys(5).spawn(3)[index]).random(
            size, dtype=np.float32)
        parts.append((u * np.float32(2) - np.float32(1)) * bound)
    expected = np.concatenate(parts)
    for threads in ("1", "2", "3"):
        monkeypatch.setenv("OMP_NUM_THREADS", threads)
        assert draws.workers() == int(threads)
        drawn = draws.uniform(draws.keys(5), (count,), limit)
        assert np.array_equal(drawn, expected), threads
    key = draws.keys(5)  # a key draws the same values each time
    assert np.array_equal(draws.uniform(key, (count,), limit),
                          draws.uniform(key, (count,), limit))


def test_side_by_side_shares_the_items_among_threads_and_raises_theirs():
    seen = {}
    draws.side_by_side(
        lambda item: seen.setdefault(threading.current_thread().name,
                                     []).append(item),
        list(range(7)), 3)
    assert len(seen) == 3
    assert sorted(sum(seen.values(), [])) == list(range(7))

    def fails_on_five(item):
        if item == 5:
            raise ValueError("item 5")
    with pytest.raises(ValueError, match="item 5"):
        draws.side_by_side(fails_on_five, list(range(7)), 2)


def test_a_draw_refuses_memory_it_would_copy():
    strided = np.empty((100, 300), dtype=np.float32)[:, ::2]
    with pytest.raises(ValueError, match="C-contiguous"):
        draws.uniform(draws.keys(0), strided.shape, 0.1, out=strided)


def test_a_bound_never_rounds_past_the_limit():
    # float32(limit) > limit: the bound is the next float32 down.
    limit = 0.1
    assert float(np.float32(limit)) > limit
    values = draws.uniform(draws.keys(0), (1000, 1000), limit)
    assert float(np.abs(values).max()) <= limit


def test_a_large_buffer_is_mapped_aligned_and_writable_on_its_own():
    # Mapped alone in 4 KiB pages (no huge-page madvise: compaction stalls).
    shape = (draws.MAPPED_BYTES // 4 + 1,)
    a, b = draws.aligned_empty(shape), draws.aligned_empty(shape)
    assert a.ctypes.data % 4096 == 0 and a.flags.writeable
    a.fill(1)
    b.fill(2)
    assert a.sum() == shape[0] and b[0] == 2
    # Private: a child forked now writes its own pages, never the parent's.
    pid = os.fork()
    if pid == 0:
        a.fill(3)
        os._exit(0)
    os.waitpid(pid, 0)
    assert a[0] == 1 and a[-1] == 1
