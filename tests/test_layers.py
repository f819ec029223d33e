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
    assert "dlrepro is not allowed to import harness.frameworks" in proc.stdout


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
