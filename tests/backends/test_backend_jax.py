"""The JAX backend's translation of harness.networks, in .venvs/jax-cpu
(made from the same lock as the CPU image), through subprocesses that print
JSON; the shared probes (tests/probes.py) check what every backend must
agree on, the rest is JAX's own: initialisation, threads through the CPU
affinity, what an allocation failure means, the idiomatic-loop benchmark.
"""
import math
import os
import subprocess

import jsonschema
import pytest

import probes
from probes import run_cell, run_probe

from harness import networks as nets
from harness.gpu import compat
from harness.frameworks.jax import backend


# --- without JAX ---------------------------------------------------------------

def test_jit_is_the_only_compile_mode():
    assert backend.CAPABILITIES.compile_modes == ("jit",)


def test_images_are_nhwc_and_sequences_unchanged():
    assert backend.input_shape(nets.get("alexnet")) == (224, 224, 3)
    assert backend.input_shape(nets.get("lstm")) == (32,)
    assert backend.input_shape(nets.get("fcn5")) == (26752,)


EXHAUSTED = RuntimeError("RESOURCE_EXHAUSTED: Out of memory while trying to "
                         "allocate 1073741824 bytes.")


@pytest.mark.parametrize("device, expected", [("gpu", True), ("cpu", False)])
def test_a_deviceless_allocation_failure_is_oom_only_in_a_gpu_cell(
        monkeypatch, device, expected):
    monkeypatch.setitem(backend._CONFIGURED, "device", device)
    assert backend.is_out_of_memory(EXHAUSTED) is expected
    assert backend.is_out_of_memory(MemoryError()) is False
    assert backend.is_out_of_memory(ValueError("shapes differ")) is False


# The jax/cuda profile's kernels (dockerfiles/matrix.toml) through the gate,
# as the host passes them (dlrepro.run.life.STACK_KEYS).
GATE = [
    # (GPU, capability, driver, verdict, runs as)
    ("h200", "9.0", "580.95.05", compat.NATIVE, "sm_90"),
    ("a100", "8.0", "580.95.05", compat.NATIVE, "sm_80"),
    ("l4-sm89-uses-sm80", "8.9", "580.95.05", compat.NATIVE, "sm_80"),
    ("b200", "10.0", "580.95.05", compat.NATIVE, "sm_100"),
    # jaxlib's plugin carries sm_120 machine code (read from its libraries,
    # docs/images.md), so an RTX 5090 needs no PTX JIT.
    ("rtx5090", "12.0", "580.95.05", compat.NATIVE, "sm_120"),
    ("gb10-sm121-uses-sm120", "12.1", "580.95.05", compat.NATIVE, "sm_120"),
    ("k80", "3.7", "470.256.02", compat.DRIVER_TOO_OLD, None),
    ("t4-sm75-uses-sm70", "7.5", "535.54.03", compat.NATIVE, "sm_70"),
]


@pytest.mark.parametrize("capability, driver, verdict, runs_as",
                         [g[1:] for g in GATE], ids=[g[0] for g in GATE])
def test_the_gate_knows_jaxlibs_architectures(capability, driver, verdict,
                                              runs_as):
    from dlrepro import matrix
    from dlrepro.run.life import STACK_KEYS
    entry = matrix.entry(matrix.load(), "jax", "cuda")
    stack = dict((key, entry[key]) for key in STACK_KEYS)
    result = compat.check(capability, driver, stack)
    assert result["verdict"] == verdict, result["reason"]
    assert result["runs_as"] == runs_as


# --- networks, layer conventions, training: the probes every backend runs ------

CONVENTIONS_PROBE = probes.conventions_probe("""
    import json, random
    import jax, numpy as np
    from harness import networks as nets
    from harness.frameworks.jax import backend
    backend.configure(1, "cpu", 0)

    def single(layer, shape):
        return nets.Network("probe", shape, "float32", 2, [layer], 0.1, 0.0,
                            "synthetic", "one layer")

    def run(layer, shape, ones=False):
        model = backend.build_model(single(layer, shape), 1, "cpu", 0)
        params = model.params
        if ones:
            params = jax.tree_util.tree_map(np.ones_like, params)
        rng = random.Random(7)
        x = [rng.uniform(-1, 1) for _ in range(2 * shape[1] * shape[2])]
        nhwc = np.array(x, np.float32).reshape((1,) + shape).transpose(
            0, 2, 3, 1)
        out, _ = model.apply(params, model.state, nhwc, True)
        out = np.asarray(out).transpose(0, 3, 1, 2)
        return {"x": x, "y": out.ravel().tolist(),
                "shape": list(out.shape[1:])}
""")


class TestJaxProbes(probes.BackendChecks):
    FRAMEWORK, PYTHON = "jax", "jax_python"
    CONVENTIONS = CONVENTIONS_PROBE


# --- initialisation --------------------------------------------------------------

INIT_PROBE = probes.init_probe("""
    import json
    import jax, numpy as np
    from harness import networks as nets
    from harness.frameworks.jax import backend
    backend.configure(1, "cpu", 0)

    def arrays(model):
        for tree, kind in ((model.params, "param"), (model.state, "state")):
            leaves, _ = jax.tree_util.tree_flatten_with_path(tree)
            for path, leaf in leaves:
                yield ({"kind": kind, "name": jax.tree_util.keystr(path)},
                       np.asarray(leaf))
""")


@pytest.fixture(scope="module")
def initial(jax_python, root):
    return run_probe(jax_python, root, INIT_PROBE)


def _expected_init(name, shape):
    """(kind, value): "uniform" with its limit, or "constant"."""
    key = name.rsplit("'", 2)[-2]  # ...['w'] -> w
    if key in ("b", "beta", "mean"):
        return "constant", 0.0
    if key in ("gamma", "var"):
        return "constant", 1.0
    if key == "table":
        return "uniform", 0.05
    if key in ("w_ih", "w_hh"):
        return "uniform", math.sqrt(6.0 / (shape[0] + shape[1]))
    # Dense (in, out) or convolution HWIO (k, k, in, out).
    receptive = shape[0] * shape[1] if len(shape) == 4 else 1
    fan_in, fan_out = shape[-2] * receptive, shape[-1] * receptive
    return "uniform", math.sqrt(6.0 / (fan_in + fan_out))


def test_weights_are_glorot_uniform_and_the_rest_as_described(initial):
    assert len(initial) > 20
    keys = set()
    for param in initial:
        kind, value = _expected_init(param["name"], param["shape"])
        keys.add(param["name"].rsplit("'", 2)[-2])
        probes.assert_initialized(param, kind, value)
    # Every kind of parameter and statistic was seen.
    assert keys == {"w", "b", "gamma", "beta", "mean", "var", "table",
                    "w_ih", "w_hh"}


# --- what XLA compiles -------------------------------------------------------------

COMPILE_PROBE = """
    import json
    import jax.monitoring
    from harness import networks as nets
    from harness.data import batches
    from harness.frameworks import backends
    # The fp16 session's compilations are counted on any CPU: one without
    # float16 arithmetic (most) would refuse it, so pretend it has some
    # (emulated, the same code: tests/backends/test_precision_jax.py FP16_PROBE).
    backends.cpu_flags = lambda: {"avx512_fp16"}
    from harness.frameworks.jax import backend
    backend.configure(1, "cpu", 0)
    compiled = []

    def count(event, seconds, **kwargs):
        # Every XLA compilation, a jitted function's or one eager op's.
        if event == "/jax/core/compile/backend_compile_duration":
            compiled.append(seconds)

    jax.monitoring.register_event_duration_secs_listener(count)
    out = {}
    network = nets.get("alexnet-r")
    given = batches.Batch([0.5] * (2 * 3 * 32 * 32), (2, 3, 32, 32), [1, 2],
                          (2,))
    for name, options in (("synthetic", {}), ("given", {"batch": given}),
                          ("fp16", {"precision": "fp16"})):
        del compiled[:]
        session = backend.prepare(network, 2, "cpu", 0, **options)
        built = len(compiled)
        for _ in range(3):
            session.step()
        out[name] = {"build": built, "steps": len(compiled) - built,
                     "step_cache": session._step._cache_size()}
    print(json.dumps(out))
"""


def test_model_build_compiles_nothing_and_the_step_compiles_once(jax_python,
                                                                 root):
    # Model build draws on the host (nothing for XLA to compile per shape);
    # weights and mini-batch committed alike, so the step's second call
    # does not compile it again.
    counts = run_probe(jax_python, root, COMPILE_PROBE)
    assert counts == {name: {"build": 0, "steps": 1, "step_cache": 1}
                      for name in ("synthetic", "given", "fp16")}


# --- cells through the harness entry point ---------------------------------------

CELL = probes.alexnet_cell("jax")
one_thread_result = probes.alexnet_result_fixture("jax", "jax_python")


def test_cell_result_is_valid_and_complete(one_thread_result, schema, root):
    result = one_thread_result
    env = probes.valid_and_pinned(result, schema, root)
    assert env["jax_backend"] == "cpu"
    # Each step on the calling thread (backend._run_steps_inline).
    assert env["jax_cpu_async_dispatch"] is False
    assert result["model"]["framework_parameters"] == \
        nets.parameter_count(nets.get("alexnet-r"))
    assert result["model"]["parameter_note"] is None
    assert len(result["timing"]["per_iteration_s"]) == 8
    losses = result["loss"]["per_iteration"]
    assert all(math.isfinite(v) for v in losses)
    assert losses[-1] < result["loss"]["warmup"][0]


def test_one_thread_is_reported_and_really_used(one_thread_result):
    threads = one_thread_result["environment"]["threads"]
    assert threads["requested"] == 1
    assert threads["framework"] == 1
    # Process CPU seconds over wall seconds: XLA's pools running on more
    # than one core would show as > 1.
    assert one_thread_result["timing"]["cpu_utilization"] < 1.3


THREADS_PROBE = """
    import json, os, sys
    from harness.frameworks.jax import backend
    allowed = len(os.sched_getaffinity(0))
    backend.configure(int(sys.argv[1]), "cpu", 0)
    import jax
    print(json.dumps({"allowed": allowed,
                      "framework": backend.effective_threads(),
                      "affinity": len(os.sched_getaffinity(0)),
                      "backend": jax.default_backend()}))
"""


@pytest.mark.parametrize("threads", [1, 2, 64])
def test_threads_narrow_the_cpus_xla_sizes_its_pools_by(jax_python, root,
                                                        threads):
    result = run_probe(jax_python, root, THREADS_PROBE, str(threads))
    expected = min(threads, result["allowed"])
    # More threads than CPUs cannot be had: the record says what was.
    assert result["framework"] == result["affinity"] == expected
    assert result["backend"] == "cpu"


def test_gpu_cell_on_a_cpu_build_says_why(make_cell, jax_python, root,
                                          tmp_path, schema):
    result = run_cell(jax_python, root, tmp_path,
                      make_cell(CELL, device="gpu", gpus=1, threads=None,
                                iterations=1, warmup=0))
    jsonschema.validate(result, schema)
    assert result["status"] == "error"
    assert "sees no GPU" in result["error"]["message"]


MATH_PROBE = """
    import json
    import jax
    from harness.frameworks.jax import backend
    backend.configure(1, "cpu", 0)
    modes = [backend.math_mode("cpu"), backend.math_mode("gpu")]
    jax.config.update("jax_default_matmul_precision", "highest")
    modes.append(backend.math_mode("gpu"))
    print(json.dumps(modes))
"""


def test_math_mode_follows_the_default_matmul_precision(jax_python, root):
    cpu, default, highest = run_probe(jax_python, root, MATH_PROBE)
    assert cpu == {"matmul": "fp32", "conv": "fp32"}
    assert default == {"matmul": "tf32", "conv": "tf32"}
    assert highest == {"matmul": "fp32", "conv": "fp32"}


# --- the benchmark script runs and reports (no timing asserted) -------------------

def _benchmark(python, root, *args):
    return subprocess.run(
        [str(python), str(root / "benchmarks" / "idiomatic_jax.py")]
        + list(args), cwd=root, capture_output=True, text=True, timeout=600,
        env=dict(os.environ, PYTHONPATH=str(root)))


def test_idiomatic_benchmark_reports_both_loops(jax_python, root):
    proc = _benchmark(jax_python, root, "--networks", "alexnet-r", "--rounds",
                      "2", "--block", "1", "--warmup", "1", "--threads", "1",
                      "--json")
    _report, row = probes.idiomatic_row(proc, "plain_mean_s")
    assert len(row["donated_round_ratios"]) == 2
    assert row["donated_ratio_of_means"] == pytest.approx(
        row["harness_mean_s"] / row["donated_mean_s"])


def test_idiomatic_benchmark_rejects_unknown_networks(jax_python, root):
    proc = _benchmark(jax_python, root, "--networks", "vgg16")
    assert proc.returncode == 2
    assert "unknown networks vgg16" in proc.stderr
