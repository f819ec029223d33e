"""`invoke report --html` end to end: a small real bench run (PyTorch on the
CPU, two networks, 1 and 2 threads, 2 processes per cell) and an old-format
convergence run on one page, opened in a real headless browser (Debian's
`chromium`): no console message, every figure drawn, a screenshot taken.

Without chromium the browser tests skip, saying what to install; with
DLREPRO_REQUIRE_CHROMIUM set (CI) they fail instead. With
DLREPRO_SCREENSHOTS set to a folder, the page and its screenshot are kept
there (CI keeps results/ci/report-screenshot.png).
"""
import os
import re
import shutil
import struct
from pathlib import Path

import pytest

from dlrepro.run import store
from browser import drawn, headless
from cli import invoke
from paths import ROOT

GOLDEN_CONVERGE = ROOT / "tests" / "golden" / "runs" / "converge-v0"
WIDTH = 1600


@pytest.fixture(scope="module")
def runs(tmp_path_factory, framework_python):
    """(results root, bench run folder, convergence run folder)."""
    out = tmp_path_factory.mktemp("runs")
    proc = invoke("bench", "--framework", "pytorch", "--runtime", "native",
                  "--python", str(framework_python("pytorch")),
                  "--network", "fcn5", "--network", "alexnet-r",
                  "--batch-size", "16", "--threads", "1", "--threads", "2",
                  "--iterations", "3", "--warmup", "1", "--repeat", "2",
                  "--out", str(out))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    converge = out / GOLDEN_CONVERGE.name
    shutil.copytree(GOLDEN_CONVERGE, converge)
    return out, (out / "latest").resolve(), converge


@pytest.fixture(scope="module")
def page(runs, tmp_path_factory):
    out, bench, converge = runs
    path = tmp_path_factory.mktemp("page") / "report.html"
    proc = invoke("report", "--out", str(out), "--run", "latest", "--run",
                  str(converge), "--html", str(path))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.strip() == (
        f"report: {path} (3 figures, {path.stat().st_size // 1024} KiB)")
    return path


def section(text, name):
    match = re.search(f'<section id="{name}">(.*?)</section>', text)
    assert match, name
    return match.group(1)


def test_page_is_self_contained_with_each_figure_beside_its_table(page, runs):
    text = page.read_text()
    assert not re.search(r'(src|href)="(?!data:)', text)
    assert "<link" not in text and "<script src" not in text
    figures = re.findall(r'<img src="data:image/svg\+xml;base64,', text)
    assert len(figures) == 3
    for name in ("cpu-time", "cpu-scaling"):
        body = section(text, name)
        assert 'class="plot"' in body
        # The table beside the figure: one row per cell (2 networks x 2
        # thread counts).
        assert len(re.findall(r"<tr><td>", body)) == 4
    # Each cell's processes: 2.
    assert re.findall(r"<tr><td>fcn5</td><td>pytorch</td><td>b16, 1 thr</td>"
                      r"<td>(\d+)</td>", section(text, "cpu-time")) == ["2"]
    assert 'class="plot"' in section(text, "convergence")
    assert "no GPU cells in this run" in section(text, "gpu-time")
    assert "measured on one GPU and on more" in section(text, "multi-gpu")
    assert "matches the 2016 reference" in section(text, "then-now")
    # What produced the results: both runs, the framework's version, the
    # clock policy and the warnings.
    _out, bench, _converge = runs
    provenance = section(text, "provenance")
    assert bench.name in provenance and "converge-cec2" in provenance
    _record, pairs = store.load_run(bench)
    version = pairs[0][1]["environment"]["framework_version"]
    assert f"<td>pytorch</td><td>{version}</td>" in provenance
    assert "<td>2.13.0+cpu</td>" in provenance     # the old convergence run
    assert "GPU clock policy" in provenance and "Warnings (" in provenance


def png_size(path):
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", data[16:24])


def test_chromium_draws_every_figure_and_takes_a_screenshot(page, tmp_path):
    dom, console = headless(page, tmp_path / "profile",
                            f"--window-size={WIDTH},900", "--dump-dom")
    assert console == []
    done, total, height = drawn(dom)
    assert (done, total) == (3, 3)
    shot = tmp_path / "report-screenshot.png"
    _dom, console = headless(page, tmp_path / "profile",
                             f"--window-size={WIDTH},{height}",
                             f"--screenshot={shot}")
    assert console == []
    assert png_size(shot) == (WIDTH, height)
    assert shot.stat().st_size > 50_000
    keep = os.environ.get("DLREPRO_SCREENSHOTS")
    if keep:
        Path(keep).mkdir(parents=True, exist_ok=True)
        shutil.copy(shot, Path(keep) / shot.name)
        shutil.copy(page, Path(keep) / "report.html")
        print(f"screenshot: {Path(keep) / shot.name}")


def test_the_page_check_reports_a_figure_that_did_not_draw(page, tmp_path):
    broken = tmp_path / "broken.html"
    broken.write_text(page.read_text().replace(
        "data:image/svg+xml;base64,", "data:image/svg+xml;base64,AAAA", 1))
    dom, console = headless(broken, tmp_path / "profile",
                            "--window-size=1200,900", "--dump-dom")
    assert drawn(dom)[:2] == (2, 3)
    assert len(console) == 1 and "figure not drawn" in console[0]


def test_bad_input_is_a_one_line_error(runs, tmp_path):
    out, _bench, _converge = runs
    for args, message in (
            (("--run", "nope"), "error: no run 'nope' under"),
            (("--run", "latest", "--html", str(tmp_path / "no" / "x.html")),
             "error: cannot write the report to")):
        proc = invoke("report", "--out", str(out),
                      *(args if "--html" in args
                        else args + ("--html", str(tmp_path / "x.html"))))
        assert proc.returncode == 2
        assert proc.stderr.strip().startswith(message), proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1
