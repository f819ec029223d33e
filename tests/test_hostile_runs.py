"""Results that cannot be mixed up (issue 23): what a hostile user did to
run folders, each reproduced on the real command line with
tests/bin/scripted-python as the interpreter (see tests/test_faults.py).

- `--run latest` and run ids name runs under --out, whatever the working
  directory holds; `--out ""` is refused.
- A result file counts only for its own job: its `cell` must be the job's,
  and run.json's `file` must be `<job id>.json`.
- A run folder given twice (by id, path or `latest`) counts once.
- A deleted spec file does not make a finished result run again.
"""
import csv
import json
import shutil
import subprocess
from pathlib import Path

import pytest

from dlrepro.run import runfolder
from test_faults import BENCH, INVOKE, ROOT, _env, bench, invoke, row

FCN5 = "pytorch-cpu-fcn5-cpu-b16-t1"
FCN8 = "pytorch-cpu-fcn8-cpu-b16-t1"
GOLDEN = ROOT / "tests" / "golden" / "runs"


def invoke_in(cwd, *args, modes=""):
    """`invoke` run from `cwd` (tasks.py found with -r)."""
    return subprocess.run([INVOKE, "-r", str(ROOT), *args], cwd=cwd,
                          capture_output=True, text=True, timeout=120,
                          env=_env(modes))


def latest(out):
    return (Path(out) / "latest").resolve()


def started_at(run_dir, job_id):
    return json.loads((Path(run_dir) / f"{job_id}.json").read_text())[
        "started_at"]


def by_id(run_dir):
    return {e["id"]: e for e in runfolder.read_run(run_dir)["jobs"]}


def json_rows(out):
    proc = invoke("report", "--out", str(out), "--json")
    assert proc.returncode == 0, proc.stderr
    return {r["network"]: r for r in json.loads(proc.stdout)}


# --- 1: --run and --out -------------------------------------------------------

def test_resume_from_inside_a_results_folder_resumes_the_run_under_out(
        tmp_path):
    """Item 1: run from inside a results folder, `bench --resume --out X`
    resumed the working directory's run and pointed X/latest at a folder
    that does not exist under X; `report --out X` then found no run."""
    here, there = tmp_path / "here", tmp_path / "there"
    assert bench(here, "fcn5").returncode == 0
    assert bench(there, "fcn5").returncode == 0
    here_run, there_run = latest(here), latest(there)
    proc = invoke_in(here, *BENCH, "--network", "fcn5", "--out", str(there),
                     "--resume")
    assert proc.returncode == 0, proc.stderr
    assert f"resuming {there_run}" in proc.stdout, proc.stdout
    assert latest(there) == there_run
    assert len(runfolder.read_run(there_run)["resumed_at"]) == 1
    assert runfolder.read_run(here_run)["resumed_at"] == []
    report = invoke_in(here, "report", "--out", str(there))
    assert report.returncode == 0, report.stderr
    assert report.stdout.startswith(there_run.name)


def test_a_run_id_is_looked_up_under_out_and_a_path_is_a_path(tmp_path):
    """Item 1: a bare name is a run under --out even when the working
    directory holds a run folder of that name; `./name` is that folder."""
    here, there = tmp_path / "here", tmp_path / "there"
    assert bench(here, "fcn5").returncode == 0
    name = latest(here).name
    (there).mkdir()
    proc = invoke_in(here, "report", "--run", name, "--out", str(there))
    assert proc.returncode == 2, proc.stdout
    assert proc.stderr.startswith(f"error: no run {name!r} under {there}")
    assert f"./{name}" in proc.stderr and proc.stderr.count("\n") == 1
    for given in (f"./{name}", str(latest(here)), "latest/."):
        proc = invoke_in(here, "report", "--run", given, "--out", str(there))
        assert proc.returncode == 0, (given, proc.stderr)
        assert proc.stdout.startswith(name)


@pytest.mark.parametrize("task", [
    [*BENCH, "--network", "fcn5"], [*BENCH, "--network", "fcn5", "--resume"],
    ["report"], ["compare"], ["export", "--csv", "x.csv"],
    ["gpu-restore", "--run", "latest"]])
def test_an_empty_out_is_one_line(tmp_path, task):
    """Item 1: `--out ""` wrote the run folder and a `latest` link into the
    working directory."""
    proc = invoke_in(tmp_path, *task, "--out", "")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr == "error: --out is empty: give a results folder " \
                          "(default: results)\n"
    assert list(tmp_path.iterdir()) == []


# --- 4: a run folder counts once ----------------------------------------------

def test_the_same_run_given_twice_counts_once_in_the_html_report(tmp_path):
    """Item 4: `report --html --run R --run latest` pooled R twice: procs 2
    and a 95% CI of one value."""
    assert bench(tmp_path / "out", "fcn5").returncode == 0
    run_dir = latest(tmp_path / "out")
    page = tmp_path / "r.html"
    proc = invoke("report", "--out", str(tmp_path / "out"), "--html",
                  str(page), "--run", run_dir.name, "--run", "latest",
                  "--run", str(run_dir))
    assert proc.returncode == 0, proc.stderr
    text = page.read_text()
    assert "Several bench runs" not in text
    cells = text[text.index('<section id="cells">'):]
    body = cells[cells.index("<tbody>"):cells.index("</tbody>")]
    values = body.split("<td>")[1:]
    assert values[6].startswith("1<"), values[:8]   # procs


def test_the_same_run_given_twice_is_exported_once(tmp_path):
    """Item 4: `export --run R --run R` wrote every row twice."""
    assert bench(tmp_path, "fcn5", "fcn8").returncode == 0
    run_dir = latest(tmp_path)
    out_csv = tmp_path / "x.csv"
    proc = invoke("export", "--out", str(tmp_path), "--csv", str(out_csv),
                  "--run", run_dir.name, "--run", run_dir.name, "--run",
                  "latest", "--run", str(tmp_path / "latest"))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "2 cells exported\n"
    assert len(list(csv.DictReader(open(out_csv)))) == 2
