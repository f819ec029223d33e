"""Code run in a framework's own Python (a virtual environment, or the
CNTK image's interpreter), with the repository on PYTHONPATH; it prints
one JSON line last, which the tests read. Also the checks that the MXNet
and CNTK backend tests share (BackendChecks): the same probes run in each
framework must give the same answers."""
import ast
import json
import math
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import jsonschema
import layer_reference as ref
import pytest

from harness import celltemp, networks as nets

TIMEOUT = 900


def walk(resolved):
    """Every resolved layer, the layers inside residual blocks included."""
    for r in resolved:
        yield r
        if r.children is not None:
            body, shortcut = r.children
            yield from walk(body)
            if shortcut is not None:
                yield from walk(shortcut)


def backend_calls(backend, name):
    """Every call of a function or method `name` in the backend and the
    modules beside it (its translation in layers.py; not parallel.py), read
    with ast: what the backend does, checked without its framework."""
    modules = sorted(p for p in Path(backend.__file__).parent.glob("*.py")
                     if p.name != "parallel.py")
    tree = ast.Module(body=[n for m in modules
                            for n in ast.parse(m.read_text()).body],
                      type_ignores=[])
    return [node for node in ast.walk(tree) if isinstance(node, ast.Call)
            and getattr(node.func, "attr", None) == name]


def check_python36(module, root):
    """The backend module runs in Python 3.6 images (vermin)."""
    vermin = Path(sys.executable).parent / "vermin"
    proc = subprocess.run([str(vermin), "-t=3.6-", "--violations", "--no-tips",
                           "--eval-annotations", str(module)],
                          cwd=root, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def loaded_after_import(root, module, watched):
    """Which of `watched` importing `module` loads (this Python, without
    the frameworks): the backends load their framework only when used."""
    code = ("import sys, {}; print(sorted(m for m in {!r} "
            "if m in sys.modules))".format(module, tuple(watched)))
    proc = subprocess.run([sys.executable, "-c", code], cwd=root,
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().replace("'", '"'))


def assert_initialized(param, kind, value):
    """A parameter as an init probe reports it (network, name, shape, min,
    max, std) is as expected: all `value` ("constant"), or within
    +-`value` with a uniform's spread where it is large ("uniform")."""
    where = "{} {}".format(param["network"], param["name"])
    if kind == "constant":
        assert param["min"] == param["max"] == value, where
        return
    assert -value <= param["min"] and param["max"] <= value, where
    size = 1
    for d in param["shape"]:
        size *= d
    if size >= 20000:
        # uniform(-a, a) has standard deviation a / sqrt(3)
        assert param["std"] == pytest.approx(value / math.sqrt(3),
                                             rel=0.03), where


def run_probe(python, root, code, *args):
    env = dict(os.environ, PYTHONPATH=str(root))
    proc = subprocess.run([python, "-s", "-c", textwrap.dedent(code)]
                          + list(args), cwd=root, env=env, capture_output=True,
                          text=True, timeout=TIMEOUT)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def idiomatic_row(proc, other):
    """The one row an idiomatic benchmark (benchmarks/idiomatic_*.py, run
    with --json on alexnet-r for two rounds) reports: both loops timed,
    the ratio of their means the harness's over `other`'s (the other
    loop's mean). (The report, the row.)"""
    assert proc.returncode == 0, proc.stderr[-4000:]
    report = json.loads(proc.stdout)
    assert report["threads"] == 1
    (row,) = report["rows"]
    assert row["network"] == "alexnet-r" and row["batch_size"] == 128
    assert len(row["round_ratios"]) == 2
    assert row["harness_mean_s"] > 0 and row[other] > 0
    assert row["ratio_of_means"] == pytest.approx(
        row["harness_mean_s"] / row[other])
    return report, row


def run_cell(python, root, folder, cell):
    """Run `cell` through `python -m harness run`; its result."""
    spec, out = folder / "spec.json", folder / "result.json"
    spec.write_text(json.dumps({"cell": cell, "container": None}))
    # As dlrepro runs a cell: a temp dir of its own (`folder`), where the
    # framework keeps what it compiles.
    env = celltemp.without_caches(os.environ)
    env.update(PYTHONPATH=str(root), TMPDIR=str(folder))
    proc = subprocess.run([python, "-s", "-m", "harness", "run", "--spec",
                           str(spec), "--out", str(out)], cwd=root, env=env,
                          capture_output=True, text=True, timeout=TIMEOUT)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(out.read_text())


def alexnet_cell(framework):
    """The cell a backend's tests run through `python -m harness run`:
    alexnet-r on CIFAR-10's shapes, batch 32, 8 iterations."""
    return {"framework": framework, "network": "alexnet-r",
            "dataset": "cifar10", "batch_size": 32, "global_batch_size": 32,
            "iterations": 8}


def alexnet_result_fixture(framework, python_fixture):
    """A module fixture: the result of the framework's alexnet_cell, one
    thread, run once by the Python the fixture `python_fixture` names."""
    @pytest.fixture(scope="module")
    def one_thread_result(make_cell, root, tmp_path_factory, request):
        return run_cell(request.getfixturevalue(python_fixture), root,
                        tmp_path_factory.mktemp("cell"),
                        make_cell(alexnet_cell(framework)))
    return one_thread_result


def valid_and_pinned(result, schema, root):
    """A CPU cell's result is schema-valid, ok, and from the framework
    version dockerfiles/matrix.toml pins: its environment block."""
    jsonschema.validate(result, schema)
    assert result["status"] == "ok", result["error"]
    env = result["environment"]
    pins = (root / "dockerfiles" / "matrix.toml").read_text()
    assert 'framework_version = "{}"'.format(env["framework_version"]) in pins
    assert env["cuda"] is None and env["cudnn"] is None
    return env


def one_thread_cell(python, root, folder, cell, schema):
    """`cell` (one thread) run by the harness in `python`: its result,
    schema-valid, ok, and one thread really used (process CPU time over
    wall time)."""
    result = run_cell(python, root, folder, cell)
    jsonschema.validate(result, schema)
    assert result["status"] == "ok", result["error"]
    assert result["environment"]["threads"]["framework"] == 1
    assert result["timing"]["cpu_utilization"] < 1.3
    return result


# A transformer is built over sequences of this many tokens: its weights,
# and so its parameter count, do not depend on the length, and gpt-small's
# full context would make every probe minutes long.
PROBED_SEQUENCE = 16
# Frameworks that offer no transformer: its cells end `unsupported`.
NO_TRANSFORMER = ("caffe", "cntk")


def probed(name):
    """The network a probe builds for `name`: a transformer over
    PROBED_SEQUENCE tokens, anything else as it is."""
    if nets.context(nets.get(name)) is None:
        return name
    return "{}@{}".format(name, PROBED_SEQUENCE)


def networks_probe(framework):
    """Every network built at batch 2 (a transformer over PROBED_SEQUENCE
    tokens): {network: {parameters, output_shape}}, or {network:
    {unsupported: why}} for what the backend refuses."""
    return """
    import json
    from harness import threads, networks as nets
    from harness.errors import Unsupported
    threads.apply(2)
    from harness.frameworks.{} import backend
    backend.configure(2, "cpu", 0)
    out = {{}}
    for name in sorted(nets.NETWORKS):
        network = nets.get(name if nets.context(nets.get(name)) is None
                           else "{{}}@{}".format(name))
        try:
            session = backend.prepare(network, 2, "cpu", 0)
        except Unsupported as exc:
            out[name] = {{"unsupported": str(exc)}}
            continue
        out[name] = {{"parameters": session.parameters,
                     "output_shape": list(session.output_shape())}}
        del session
    print(json.dumps(out))
    """.format(framework, PROBED_SEQUENCE)


def loss_probe(framework):
    """Six steps of fcn-r, alexnet-r and lstm on the harness's fixed batch
    (batch 16, seed 1): {network: [loss of each step]}."""
    return """
    import json
    from harness import threads, networks as nets
    from harness.data import batches
    threads.apply(2)
    from harness.frameworks.{} import backend
    backend.configure(2, "cpu", 0)
    out = {{}}
    for name in ("fcn-r", "alexnet-r", "lstm"):
        network = nets.get(name)
        session = backend.prepare(network, 16, "cpu", 0,
                                  batch=batches.fixed_batch(network, 16, 1))
        out[name] = [session.step() for _ in range(6)]
    print(json.dumps(out))
    """.format(framework)


# One-layer models run on a fixed input: the framework's `run(layer, shape,
# ones=False)` (defined by the code before this) returns {x, y, shape}.
CONVENTION_CASES = """
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


def conventions_probe(setup):
    """`setup` (indented by four spaces, defining `run`) and the cases."""
    return setup + CONVENTION_CASES


# The values each parameter of three networks starts with, summarised: the
# backend's `arrays(model)` (defined by the code before this) yields
# (fields naming a parameter, its values as a numpy array).
INIT_SUMMARY = """
    out = []
    for name in ("alexnet-r", "lstm", "resnet-56"):
        model = backend.build_model(nets.get(name), 1, "cpu", 0)
        for fields, data in arrays(model):
            fields.update(network=name, shape=list(data.shape),
                          min=float(data.min()), max=float(data.max()),
                          std=float(data.std()))
            out.append(fields)
    print(json.dumps(out))
"""


def init_probe(setup):
    """`setup` (indented by four spaces: json, nets and the configured
    backend imported, `arrays` defined) and the summary."""
    return setup + INIT_SUMMARY


class BackendChecks(object):
    """The probes a backend test module runs in its framework's Python, and
    their checks. A module subclasses it as `Test...`, naming FRAMEWORK,
    CONVENTIONS (its conventions_probe) and PYTHON (the name of its fixture
    that gives the framework's interpreter)."""

    FRAMEWORK = None
    CONVENTIONS = None
    PYTHON = None
    # Gluon's LSTM keeps i2h and h2h biases: one extra vector per gate.
    SECOND_LSTM_BIAS = False

    @pytest.fixture(scope="class")
    @classmethod
    def probe_python(cls, request):
        return request.getfixturevalue(cls.PYTHON)

    @pytest.fixture(scope="class")
    @classmethod
    def built(cls, probe_python, root):
        return run_probe(probe_python, root, networks_probe(cls.FRAMEWORK))

    @pytest.fixture(scope="class")
    @classmethod
    def conventions(cls, probe_python, root):
        return run_probe(probe_python, root, cls.CONVENTIONS)

    @pytest.fixture(scope="class")
    @classmethod
    def losses(cls, probe_python, root):
        return run_probe(probe_python, root, loss_probe(cls.FRAMEWORK))

    def _offered(self, built, name):
        """False (after checking the refusal) where the framework refuses
        the network as it should; True where it built it."""
        if "unsupported" not in built[name]:
            return True
        assert self.FRAMEWORK in NO_TRANSFORMER, built[name]
        assert nets.Transformer in nets.layer_kinds(nets.get(name))
        assert "transformer" in built[name]["unsupported"].lower() or \
            "batched product" in built[name]["unsupported"]
        return False

    @pytest.mark.parametrize("name", sorted(nets.NETWORKS))
    def test_parameter_count_is_the_description(self, built, name):
        if not self._offered(built, name):
            return
        network = nets.get(name)
        expected = nets.parameter_count(network)
        if self.SECOND_LSTM_BIAS:
            expected += nets.lstm_extra_bias(network)
        assert built[name]["parameters"] == expected

    @pytest.mark.parametrize("name", sorted(nets.NETWORKS))
    def test_output_shape_is_the_description(self, built, name):
        if not self._offered(built, name):
            return
        assert tuple(built[name]["output_shape"]) == \
            nets.output_shape(nets.get(probed(name)))

    def test_the_transformer_is_offered_or_refused_as_declared(self, built):
        offered = [n for n in sorted(nets.NETWORKS)
                   if nets.Transformer in nets.layer_kinds(nets.get(n))
                   and "unsupported" not in built[n]]
        assert bool(offered) == (self.FRAMEWORK not in NO_TRANSFORMER)

    @pytest.mark.parametrize("op", ["max", "avg"])
    def test_pooling_keeps_the_last_partial_window_and_averages_in_bounds(
            self, conventions, op):
        result = conventions[op]
        x = ref.grid(result["x"], 2, 6, 8)
        assert result["shape"] == [2, 3, 4]
        assert result["y"] == pytest.approx(ref.pool(x, op, 3, 2), abs=1e-5)

    @pytest.mark.parametrize("case, k, s, before, after, shape", [
        ("pad34", 11, 4, 3, 4, (24, 27)),   # AlexNet's asymmetric SAME pad
        ("pad11", 3, 2, 1, 1, (7, 6)),
    ])
    def test_convolution_padding_is_placed_as_described(
            self, conventions, case, k, s, before, after, shape):
        result = conventions[case]
        x = ref.grid(result["x"], 2, shape[0], shape[1])
        expected = ref.ones_conv(x, k, s, before, after)
        assert result["shape"][1:] == [
            (shape[0] + before + after - k) // s + 1,
            (shape[1] + before + after - k) // s + 1]
        assert result["y"] == pytest.approx(expected, abs=1e-4)

    def test_subsample_shortcut_keeps_every_second_pixel_then_zeros(
            self, conventions):
        result = conventions["shortcut"]
        x = ref.grid(result["x"], 2, 5, 6)
        assert result["shape"] == [5, 3, 3]
        assert result["y"] == pytest.approx(ref.subsample(x, 2) +
                                            [0.0] * (3 * 9))

    @pytest.mark.parametrize("name", ["fcn-r", "alexnet-r", "lstm"])
    def test_first_loss_is_chance_and_training_lowers_it(self, losses, name):
        values = losses[name]
        chance = math.log(nets.get(name).classes)
        assert abs(values[0] - chance) < 0.5
        assert min(values[1:]) < values[0]
