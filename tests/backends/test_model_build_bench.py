"""benchmarks/model_build.py on the real frameworks: fresh processes in
each framework's environment, ABBA rounds, medians against PyTorch's."""
import re
import subprocess
import sys

import pytest

from paths import ROOT

SCRIPT = str(ROOT / "benchmarks" / "model_build.py")


def _run(*args):
    return subprocess.run([sys.executable, SCRIPT] + list(args), cwd=ROOT,
                          capture_output=True, text=True, timeout=900)


def test_two_rounds_of_two_frameworks_report_medians_against_pytorch(
        framework_python):
    for framework in ("pytorch", "jax"):
        framework_python(framework)  # the environments the script runs in
    proc = _run("--rounds", "2", "--framework", "jax", "--framework",
                "pytorch", "--network", "fcn-r")
    assert proc.returncode == 0, proc.stderr[-4000:]
    rounds = re.findall(r"^round (\d) (\w+) +fcn-r +build +[\d.]+ s",
                        proc.stdout, re.M)
    # PyTorch first, then the order reversed in the second round (ABBA).
    assert rounds == [("1", "pytorch"), ("1", "jax"), ("2", "jax"),
                      ("2", "pytorch")]
    assert proc.stdout.count("| pytorch | ") == 4  # four tables
    assert re.search(r"^\| pytorch \| [\d.]+ s \(1\.00x\) \|$", proc.stdout,
                     re.M)
    faults = proc.stdout.split("page faults")[1]
    assert re.search(r"^\| jax \| \d+ \([\d.]+x\) \|$", faults, re.M)


@pytest.mark.parametrize("args, message", [
    (("--network", "fcn6"), "unknown network 'fcn6'"),
    (("--framework", "torch"), "unknown framework 'torch'"),
    (("--rounds", "0"), "--rounds and --threads must be positive"),
])
def test_bad_input_is_one_line(args, message):
    proc = _run(*args)
    assert proc.returncode == 2
    assert message in proc.stderr.strip().splitlines()[-1]
    assert "Traceback" not in proc.stderr
