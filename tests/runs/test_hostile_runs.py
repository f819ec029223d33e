"""Results that cannot be mixed up (issue 23): what a hostile user did to
run folders, each reproduced on the real command line with
tests/bin/scripted-python as the interpreter (see tests/runs/test_faults.py).

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

from dlrepro.run import store
from paths import INVOKE, ROOT
from scripted import BENCH, bench, env_for as _env, invoke, row

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
    return {e["id"]: e for e in store.read_run(run_dir)["jobs"]}


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
    assert len(store.read_run(there_run)["resumed_at"]) == 1
    assert store.read_run(here_run)["resumed_at"] == []
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


# --- 2: a result belongs to its job -------------------------------------------

def test_a_result_of_another_cell_copied_into_place_is_set_aside(tmp_path):
    """Item 2: fcn8's result copied over fcn5's was reported as fcn5 and
    kept as done by --resume."""
    assert bench(tmp_path, "fcn5", "fcn8").returncode == 0
    run_dir = latest(tmp_path)
    copied = (run_dir / f"{FCN8}.json").read_bytes()
    (run_dir / f"{FCN5}.json").write_bytes(copied)
    report = invoke("report", "--out", str(tmp_path))
    assert report.returncode == 0, report.stderr
    fcn5 = row(report.stdout, "fcn5")
    assert fcn5[5] == "error" and fcn5[7] == "-", fcn5
    assert f"{FCN5}.json is the result of another cell" in " ".join(fcn5)
    assert row(report.stdout, "fcn8")[5] == "ok"
    before = started_at(run_dir, FCN8)
    again = bench(tmp_path, "fcn5", "fcn8", extra=["--resume"])
    assert again.returncode == 0, again.stderr
    assert "1 of 2 jobs already done" in again.stdout, again.stdout
    assert f"{FCN5}.invalid.json" in again.stdout
    assert (run_dir / f"{FCN5}.invalid.json").read_bytes() == copied
    assert store.load_result(run_dir / f"{FCN5}.json")["cell"][
        "network"] == "fcn5"
    assert started_at(run_dir, FCN8) == before
    assert {e["status"] for e in by_id(run_dir).values()} == {"ok"}


def test_a_result_with_an_edited_batch_size_is_not_reported(tmp_path):
    """Item 2: a result whose cell.batch_size was edited gave a row with one
    batch size and samples/s computed from another."""
    assert bench(tmp_path, "fcn5").returncode == 0
    run_dir = latest(tmp_path)
    path = run_dir / f"{FCN5}.json"
    result = json.loads(path.read_text())
    result["cell"]["batch_size"] = 32
    path.write_text(json.dumps(result))
    fcn5 = json_rows(tmp_path)["fcn5"]
    assert fcn5["batch"] == "16"
    assert fcn5["status"] == "error" and fcn5["samples/s"] == "-", fcn5
    assert fcn5["note"].startswith(f"{FCN5}.json is the result of another")
    (entry, _), = store.load_run(run_dir)[1]
    assert entry["message"].endswith("(batch_size 32, not 16)")
    again = bench(tmp_path, "fcn5", extra=["--resume"])
    assert "0 of 1 jobs already done" in again.stdout, again.stdout
    assert json_rows(tmp_path)["fcn5"]["status"] == "ok"


def test_a_run_json_file_naming_a_sibling_result_is_not_done(tmp_path):
    """Item 2: run.json's `file` of a never-measured process named its
    sibling's result, so it counted as done (twice the same result in the
    cell's interval)."""
    assert bench(tmp_path, "fcn5", extra=["--repeat", "2"]).returncode == 0
    run_dir = latest(tmp_path)
    second = f"{FCN5}-p2"
    (run_dir / f"{second}.json").unlink()
    record = json.loads((run_dir / "run.json").read_text())
    (entry,) = [e for e in record["jobs"] if e["id"] == second]
    entry["file"] = f"{FCN5}.json"
    (run_dir / "run.json").write_text(json.dumps(record))
    fcn5 = json_rows(tmp_path)["fcn5"]
    assert fcn5["status"] == "error 1/2", fcn5
    assert f"names {FCN5}.json as its result" in fcn5["note"]
    again = bench(tmp_path, "fcn5", extra=["--repeat", "2", "--resume"])
    assert "1 of 2 jobs already done" in again.stdout, again.stdout
    jobs = by_id(run_dir)
    assert jobs[second]["file"] == f"{second}.json"
    assert {e["status"] for e in jobs.values()} == {"ok"}


def test_a_convergence_result_of_another_spec_is_an_error(tmp_path):
    """Item 2, convergence jobs: their results carry a cell derived from
    the spec (harness.spec.convergence_cell); what it holds must agree."""
    run_dir = tmp_path / "converge-v0"
    shutil.copytree(GOLDEN / "converge-v0", run_dir)
    _, [(entry, result)] = store.load_run(run_dir)
    assert entry["status"] == "ok" and result is not None
    path = run_dir / "pytorch-fcn-r-w1.json"
    data = json.loads(path.read_text())
    data["cell"]["global_batch_size"] = data["cell"]["batch_size"] = 32
    path.write_text(json.dumps(data))
    _, [(entry, result)] = store.load_run(run_dir)
    assert result is None and entry["status"] == "error"
    assert entry["message"] == ("pytorch-fcn-r-w1.json is the result of "
                                "another cell (batch_size 32, not 16)")
    assert store.finished_on_disk(run_dir, entry, entry["spec"]) is None


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


# --- 8: a deleted spec file ---------------------------------------------------

def test_a_deleted_spec_file_does_not_measure_a_finished_result_again(
        tmp_path):
    """Item 8: without its .spec.json a valid finished result was measured
    again and overwritten by --resume, while report showed it ok."""
    assert bench(tmp_path, "fcn5", "fcn8").returncode == 0
    run_dir = latest(tmp_path)
    (run_dir / f"{FCN5}.spec.json").unlink()
    before = started_at(run_dir, FCN5)
    again = bench(tmp_path, "fcn5", "fcn8", extra=["--resume"])
    assert again.returncode == 0, again.stderr
    assert "2 of 2 jobs already done" in again.stdout, again.stdout
    assert started_at(run_dir, FCN5) == before


def test_a_deleted_spec_file_and_a_foreign_result_run_again(tmp_path):
    """Item 8 with item 2: without the spec file the result's own cell
    decides, so another cell's result still does not count."""
    assert bench(tmp_path, "fcn5", "fcn8").returncode == 0
    run_dir = latest(tmp_path)
    (run_dir / f"{FCN5}.spec.json").unlink()
    shutil.copy(run_dir / f"{FCN8}.json", run_dir / f"{FCN5}.json")
    again = bench(tmp_path, "fcn5", "fcn8", extra=["--resume"])
    assert "1 of 2 jobs already done" in again.stdout, again.stdout
    assert store.load_result(run_dir / f"{FCN5}.json")["cell"][
        "network"] == "fcn5"


# --- the store reads a job as its run's kind ------------------------------------

def test_a_bench_entry_without_a_batch_size_is_still_checked_as_a_bench_cell(
        tmp_path):
    """run.json says its kind; an entry whose spec lost the field that told
    the kinds apart (batch_size) was not checked at all, and a result of
    another network was reported as the entry's own."""
    assert bench(tmp_path, "fcn5").returncode == 0
    run_dir = latest(tmp_path)
    record = json.loads((run_dir / "run.json").read_text())
    (entry,) = record["jobs"]
    del entry["spec"]["batch_size"]
    entry["spec"]["network"] = "fcn8"
    (run_dir / "run.json").write_text(json.dumps(record))
    fcn8 = json_rows(tmp_path)["fcn8"]
    assert fcn8["status"] == "error", fcn8
    # The table's note is cut to its column; the message is store's own.
    assert fcn8["note"].startswith(f"{FCN5}.json is the result of another "
                                   f"cell (networ"), fcn8
