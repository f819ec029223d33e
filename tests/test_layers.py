"""The direction of imports written in docs/DEVELOPING.md, enforced by
import-linter's contracts in pyproject.toml."""
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
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


def test_a_host_module_importing_a_framework_breaks_a_contract(tmp_path):
    tree = _copy(tmp_path)
    report = tree / "dlrepro" / "bench" / "report.py"
    report.write_text("from harness.frameworks import pytorch\n"
                      + report.read_text())
    proc = lint(tree)
    assert proc.returncode != 0
    assert "dlrepro.bench.report -> harness.frameworks.pytorch" in proc.stdout


def test_the_harness_importing_the_host_breaks_a_contract(tmp_path):
    tree = _copy(tmp_path)
    stats = tree / "harness" / "stats.py"
    stats.write_text("import dlrepro.errors\n" + stats.read_text())
    proc = lint(tree)
    assert proc.returncode != 0
    assert "harness is not allowed to import dlrepro" in proc.stdout


def test_a_lower_layer_importing_a_higher_one_breaks_a_contract(tmp_path):
    tree = _copy(tmp_path)
    build = tree / "dlrepro" / "images" / "build.py"
    build.write_text("from dlrepro.run import runfolder\n" + build.read_text())
    proc = lint(tree)
    assert proc.returncode != 0
    assert "dlrepro.images.build -> dlrepro.run.runfolder" in proc.stdout


def test_the_html_report_importing_history_breaks_a_contract(tmp_path):
    tree = _copy(tmp_path)
    charts = tree / "dlrepro" / "present" / "charts.py"
    charts.write_text("from dlrepro.history import steps\n"
                      + charts.read_text())
    proc = lint(tree)
    assert proc.returncode != 0
    assert "dlrepro.present.charts -> dlrepro.history.steps" in proc.stdout


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


def test_a_function_level_import_counts(tmp_path):
    out = _broken_by(tmp_path, "dlrepro/bench/report.py",
                     "from harness import lifecycle", in_a_function=True)
    assert "dlrepro.bench.report -> harness.lifecycle" in out


def test_the_host_importing_a_harness_module_off_the_list_breaks_a_contract(
        tmp_path):
    # Named nowhere in the contracts: an allow-list refuses it all the same.
    out = _broken_by(tmp_path, "dlrepro/run/collect.py",
                     "from harness import arithmetic")
    assert "dlrepro.run.collect -> harness.arithmetic" in out


def test_a_contract_module_importing_a_runner_breaks_a_contract(tmp_path):
    out = _broken_by(tmp_path, "harness/networks.py",
                     "from harness import throughput", in_a_function=True)
    assert "harness.networks -> harness.throughput" in out


def test_the_matrix_importing_images_breaks_a_contract(tmp_path):
    out = _broken_by(tmp_path, "dlrepro/matrix.py",
                     "from dlrepro.images import pylock", in_a_function=True)
    assert "dlrepro.matrix -> dlrepro.images.pylock" in out


def test_caffe_importing_another_framework_breaks_a_contract(tmp_path):
    out = _broken_by(tmp_path, "harness/frameworks/caffe/backend.py",
                     "from harness.frameworks.pytorch import backend",
                     in_a_function=True)
    assert "harness.frameworks.caffe.backend -> " \
        "harness.frameworks.pytorch.backend" in out


def test_an_import_cycle_within_a_layer_breaks_a_contract(tmp_path):
    # plan and runner sit in one layer; only the cycle contract sees this.
    out = _broken_by(tmp_path, "dlrepro/bench/plan.py",
                     "from dlrepro.bench import runner", in_a_function=True)
    assert "No cycles are allowed in dlrepro.bench" in out
