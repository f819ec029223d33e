"""benchmarks/project_groups.py's projection of a whole suite from the
iteration times measured at a few batch sizes."""
import importlib.util
import json
import subprocess
import sys

import pytest

import suitefile
from dlrepro.errors import UserError
from paths import ROOT

SCRIPT = ROOT / "benchmarks" / "project_groups.py"
H200 = ROOT / "docs" / "measurements" / "h200-2026-11-30"
SYNTHETIC = H200 / "20261130T011802Z-paper-synthetic-gpu-4ebc"


def load_script():
    spec = importlib.util.spec_from_file_location("project_groups", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def projection():
    return load_script()


def test_a_power_law_is_estimated_exactly_inside_and_beyond(projection):
    law = {b: 1e-3 * b ** 0.8 for b in (64, 256, 1024)}
    known = {b: law[b] for b in (64, 1024)}
    for batch in (16, 64, 256, 4096):
        assert projection.estimated_mean(known, batch) == pytest.approx(
            1e-3 * batch ** 0.8)


def test_one_measured_batch_keeps_the_time_per_sample(projection):
    assert projection.estimated_mean({512: 0.01}, 128) == pytest.approx(
        0.0025)


def test_the_lower_bound_holds_for_a_fixed_cost_plus_a_cost_per_sample(
        projection):
    # Time grows with the batch and time per sample falls: the two facts
    # the bound rests on. It is met at the measured sizes, and between and
    # beyond them it stays under the law.
    def law(b):
        return 0.004 + 1e-5 * b
    known = {b: law(b) for b in (64, 512)}
    for batch in (64, 512):
        assert projection.least_mean(known, batch) == pytest.approx(law(batch))
    for batch in (8, 32, 128, 256, 2048):
        assert projection.least_mean(known, batch) < law(batch)


def write_suite(path, networks):
    return suitefile.write(
        path, [{"networks": networks, "batch_sizes": [64, 128]}],
        name="tiny", device="gpu", iterations=10, warmup=2)


def test_a_suite_is_projected_from_its_cells(projection, tmp_path):
    from dlrepro.bench import suites
    suite = suites.load(write_suite(tmp_path / "tiny.toml", ["fcn5"]))
    # fcn5 at 64: 0.1 s, its first warm-up 0.5 s beyond; at 128: 0.2 s.
    points = {"fcn5": {64: (0.1, 0.5), 128: (0.2, 0.7)}}
    guess, least, total, first = projection.project_suite(
        suite, points, first_fixed=3.0, later_cost=0.5)
    measured = [0.5 + 12 * 0.1, 0.5 + 12 * 0.2]
    assert total == pytest.approx(sum(measured))
    assert first == pytest.approx(1.0)
    assert guess == pytest.approx(sum(measured) / (3.0 + sum(measured) + 0.5))
    iterations = 12 * 0.1 + 12 * 0.2
    assert least == pytest.approx(iterations / (3.0 + iterations + 0.5))


def test_a_network_never_measured_is_named(projection, tmp_path):
    from dlrepro.bench import suites
    suite = suites.load(write_suite(tmp_path / "tiny.toml",
                                    ["fcn5", "alexnet"]))
    with pytest.raises(UserError, match="alexnet"):
        projection.project_suite(suite, {"fcn5": {64: (0.1, 0.0)}}, 3.0, 0.5)


def test_the_h200_suite_projection_on_the_command_line(tmp_path):
    run = [sys.executable, str(SCRIPT), str(SYNTHETIC), "--later-cost",
           "0.25", "--suite", "paper-synthetic-gpu", "--times",
           str(H200 / "summary.json"), "--times", str(SYNTHETIC)]
    proc = subprocess.run(run, capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    assert "the suite paper-synthetic-gpu (30 cells" in proc.stdout
    # Without the gpu_check's cells alexnet and resnet50 were never measured.
    proc = subprocess.run(run[:-4] + ["--times", str(SYNTHETIC)],
                          capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines() == [
        "error: no measured iterations of alexnet, fcn5, resnet50: add a "
        "--times source that measured them"]


def test_a_source_that_is_no_summary_is_one_line(tmp_path):
    (tmp_path / "notes.json").write_text("[1, 2]")
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), str(SYNTHETIC), "--suite",
         "paper-synthetic-gpu", "--times", str(tmp_path / "notes.json")],
        capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines() == [
        f"error: {tmp_path / 'notes.json'} is not a run folder or a "
        "benchmarks/gpu_check.py summary.json"]
