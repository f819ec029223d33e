"""The direction of imports written in docs/DEVELOPING.md, enforced by
import-linter's contracts in pyproject.toml."""
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from paths import ROOT

LINT = str(Path(sys.executable).parent / "lint-imports")


def lint(folder):
    return subprocess.run([LINT, "--no-cache"], cwd=folder,
                          capture_output=True, text=True, timeout=300,
                          env={"PYTHONPATH": str(folder), "PATH": "/usr/bin"})


def test_the_tree_keeps_every_contract():
    proc = lint(ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "broken" not in proc.stdout.lower().replace("0 broken", "")


def _copy(tmp_path):
    for name in ("dlrepro", "harness", "pyproject.toml"):
        source = ROOT / name
        if source.is_dir():
            shutil.copytree(source, tmp_path / name,
                            ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy(source, tmp_path / name)
    return tmp_path


def _broken_by(tmp_path, module, line, in_a_function=False):
    """lint-imports' report after `line` is added to `module` of a copy of
    the tree: at its top, or in the body of a function that nothing calls."""
    tree = _copy(tmp_path)
    path = tree / module
    if in_a_function:
        path.write_text(path.read_text()
                        + "\n\ndef _never_called():\n    " + line + "\n")
    else:
        path.write_text(line + "\n" + path.read_text())
    proc = lint(tree)
    assert proc.returncode != 0, proc.stdout
    return proc.stdout


# (module, line added, in a function, what lint-imports then says): one
# case a contract, and a function-level import in most of them, which
# must count as much as one at the top.
BREAKS = [
    pytest.param("dlrepro/bench/report.py",
                 "from harness.frameworks import pytorch", False,
                 "dlrepro.bench.report -> harness.frameworks.pytorch",
                 id="host imports a framework"),
    pytest.param("dlrepro/bench/report.py", "from harness import lifecycle",
                 True, "dlrepro.bench.report -> harness.lifecycle",
                 id="host imports a runner in a function"),
    # Named nowhere in the contracts: an allow-list refuses it all the same.
    pytest.param("dlrepro/run/collect.py", "from harness import arithmetic",
                 False, "dlrepro.run.collect -> harness.arithmetic",
                 id="host imports a harness module off the list"),
    pytest.param("harness/networks.py", "from harness import throughput",
                 True, "harness.networks -> harness.throughput",
                 id="a contract module imports a runner"),
    pytest.param("harness/stats.py", "import dlrepro.errors", False,
                 "harness is not allowed to import dlrepro",
                 id="harness imports the host"),
    pytest.param("dlrepro/images/build.py",
                 "from dlrepro.run import runfolder", False,
                 "dlrepro.images.build -> dlrepro.run.runfolder",
                 id="a lower layer imports a higher one"),
    pytest.param("dlrepro/present/charts.py",
                 "from dlrepro.history import steps", False,
                 "dlrepro.present.charts -> dlrepro.history.steps",
                 id="the html report imports history"),
    pytest.param("dlrepro/matrix.py", "from dlrepro.images import pylock",
                 True, "dlrepro.matrix -> dlrepro.images.pylock",
                 id="the matrix imports images"),
    pytest.param("harness/frameworks/caffe/backend.py",
                 "from harness.frameworks.pytorch import backend", True,
                 "harness.frameworks.caffe.backend -> "
                 "harness.frameworks.pytorch.backend",
                 id="caffe imports another framework"),
    # plan and runner sit in one layer: only the cycle contract sees this.
    pytest.param("dlrepro/bench/plan.py", "from dlrepro.bench import runner",
                 True, "No cycles are allowed in dlrepro.bench",
                 id="an import cycle within a layer"),
]


@pytest.mark.parametrize("module, line, in_a_function, said", BREAKS)
def test_each_contract_can_break(tmp_path, module, line, in_a_function,
                                 said):
    assert said in _broken_by(tmp_path, module, line, in_a_function)

