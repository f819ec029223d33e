"""What every backend promises before its framework is present: a
translator for every layer kind, and an import that loads no framework
(the harness imports a backend to ask what it offers; a host without the
framework must still get an `unsupported` with the reason). The backends
that run inside Python 3.6 images (Caffe's, CNTK's) are also held to 3.6
syntax and to standard-library imports at their top.

PyTorch's and TensorFlow's backends translate through their frameworks'
own layer classes and have no TRANSLATORS table; tests/repo/test_layers.py
covers their layers.
"""
import ast
import importlib
import sys
from pathlib import Path

import probes
import pytest

from harness import networks as nets

# Framework -> the modules importing its backend must not load.
WATCHED = {
    "caffe": ("caffe", "numpy", "google"),
    "cntk": ("cntk", "numpy", "scipy"),
    "jax": ("jax",),
    "mxnet": ("mxnet",),
}
IN_PYTHON36_IMAGES = ("caffe", "cntk")


def backend(framework):
    return importlib.import_module(
        "harness.frameworks.{}.backend".format(framework))


@pytest.mark.parametrize("framework", sorted(WATCHED))
def test_every_layer_kind_has_a_translator(framework):
    assert set(backend(framework).TRANSLATORS) == set(nets.LAYER_KINDS)


@pytest.mark.parametrize("framework", sorted(WATCHED))
def test_the_backend_imports_without_its_framework(framework, root):
    assert probes.loaded_after_import(
        root, "harness.frameworks.{}.backend".format(framework),
        WATCHED[framework]) == []


# Caffe and CNTK plan each layer's output shape themselves (the translation
# sizes the next layer by it), without the framework.
@pytest.mark.parametrize("framework", IN_PYTHON36_IMAGES)
@pytest.mark.parametrize("name", sorted(nets.NETWORKS))
def test_planned_shapes_follow_the_description_layer_by_layer(framework,
                                                              name):
    for r in probes.walk(nets.resolve(nets.get(name))):
        assert backend(framework).planned_shape(r) == r.out_shape, r.layer


def modules(framework):
    """Every module of the framework's folder (backend.py and what it
    imports from beside it)."""
    return sorted(Path(backend(framework).__file__).parent.glob("*.py"))


@pytest.mark.parametrize("framework", IN_PYTHON36_IMAGES)
def test_the_backend_is_python36_compatible(framework, root):
    for path in modules(framework):
        probes.check_python36(path, root)


@pytest.mark.parametrize("path", [p for f in IN_PYTHON36_IMAGES
                                  for p in modules(f)],
                         ids=lambda p: "{}/{}".format(p.parent.name, p.name))
def test_top_level_imports_are_standard_library_or_harness(path):
    tree = ast.parse(path.read_text())
    for node in tree.body:
        if isinstance(node, ast.Import):
            for alias in node.names:
                assert alias.name in sys.stdlib_module_names, ast.dump(node)
        elif isinstance(node, ast.ImportFrom):
            assert node.level > 0, ast.dump(node)
