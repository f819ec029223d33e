"""What a hostile user did to finished runs in round four (issue 42), each
on the real command line with tests/bin/scripted-python as the interpreter
(tests/runs/test_faults.py), or on a run folder changed as the user changed it.

- The result file is what was measured: run.json's status never overrides
  it (item 5), and a result must belong to its run (item 21).
- Timings are finite and not negative (item 8).
- A damaged run folder is one line, as every other damaged file (item 10).
- A run copied elsewhere is still the same run (item 11).
"""
import csv
import json
import re
import shutil
from pathlib import Path

import pytest

from dlrepro.run import store
from scripted import CELL, bench, invoke, one_line_error, row

FCN5 = "pytorch-cpu-fcn5-cpu-b16-t1"
FCN8 = "pytorch-cpu-fcn8-cpu-b16-t1"


def latest(out):
    return (Path(out) / "latest").resolve()


def finished(out, *networks, extra=(), isolation=CELL):
    proc = bench(out, *(networks or ("fcn5", "fcn8")), extra=extra,
                 isolation=isolation)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return latest(out)


def edit(path, change):
    data = json.loads(Path(path).read_text())
    change(data)
    Path(path).write_text(json.dumps(data))


def report(out, *args):
    proc = invoke("report", "--out", str(out), *args)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc.stdout


# --- 5: the result file, not run.json, says how a job ended -----------------

def as_error(result):
    result.update(status="error", timing=None,
                  error={"type": "RuntimeError", "message": "edited"})


def cut_short(result):
    """A partial measurement: one timed iteration of three, as a timeout
    leaves it."""
    timing = result["timing"]
    timing["per_iteration_s"] = timing["per_iteration_s"][:1]
    timing["completed_iterations"] = 1
    result.update(status="timeout", error={
        "type": "Timeout", "message": "timeout after 1 of 3 timed "
                                      "iterations"})


@pytest.mark.parametrize("change, status", [(as_error, "error"),
                                            (cut_short, "timeout")],
                         ids=["error-no-timing", "partial"])
def test_report_says_what_the_result_file_says(tmp_path, change, status):
    """Item 5: run.json said ok; a result that says error with no timing
    crashed `report`, a partial one showed ok ±0.0%."""
    run_dir = finished(tmp_path)
    edit(run_dir / f"{FCN5}.json", change)
    assert store.read_run(run_dir)["jobs"][0]["status"] == "ok"
    text = report(tmp_path)
    fcn5 = row(text, "fcn5")
    assert fcn5[5] == status and fcn5[7] == "-" and fcn5[8] == "-", fcn5
    assert row(text, "fcn8")[5] == "ok"
    rows = {r["network"]: r for r in json.loads(report(tmp_path, "--json"))}
    assert rows["fcn5"]["status"] == status


# --- 8: timings are finite and not negative ---------------------------------

def first_time(value):
    def change(result):
        result["timing"]["per_iteration_s"][0] = value
    return change


@pytest.mark.parametrize("value", [float("nan"), float("inf"), -0.004, 0.0,
                                   1e308],
                         ids=["nan", "infinity", "negative", "zero", "huge"])
def test_a_timing_that_is_no_time_is_that_jobs_error(tmp_path, value):
    """Item 8: NaN and negative timings passed the result schema; `report`
    printed nan or a negative mean, export wrote them on. Zero and absurd
    times passed it later: `compare` divided by a mean of 0, and two times
    of 1e308 s overflowed the sum in `report`, `export` and `compare`."""
    run_dir = finished(tmp_path)
    edit(run_dir / f"{FCN5}.json", first_time(value))
    against = invoke("compare", "--out", str(tmp_path), "--against",
                     "latest")
    assert against.returncode == 0, against.stdout + against.stderr
    text = report(tmp_path)
    fcn5 = row(text, "fcn5")
    assert fcn5[5] == "error" and fcn5[7] == "-", fcn5
    assert "nan" not in text and "inf" not in text.replace("info", "")
    assert f"{FCN5}.json" in " ".join(fcn5)
    rows = tmp_path / "rows.csv"
    proc = invoke("export", "--out", str(tmp_path), "--csv", str(rows))
    assert proc.returncode == 0, proc.stderr
    exported = {r["network"]: r for r in csv.DictReader(rows.open())}
    assert exported["fcn5"]["status"] == "error", exported["fcn5"]
    assert exported["fcn5"]["mean_s"] == "", exported["fcn5"]
    again = bench(tmp_path, "fcn5", "fcn8", extra=["--resume"])
    assert "1 of 2 jobs already done" in again.stdout, again.stdout
    assert row(report(tmp_path), "fcn5")[5] == "ok"


@pytest.mark.parametrize("container", [
    {"labels": "x"}, {"image_id": 5, "image": "x", "runtime": "docker"}],
    ids=["labels-string", "image-id-number"])
def test_a_damaged_container_block_is_that_jobs_error(tmp_path, container):
    """environment.container could be any object: `report` took its
    labels for an object and its image ID for a string (tracebacks)."""
    run_dir = finished(tmp_path, "fcn5")
    edit(run_dir / f"{FCN5}.json",
         lambda result: result["environment"].update(container=container))
    fcn5 = row(report(tmp_path), "fcn5")
    assert fcn5[5] == "error" and f"{FCN5}.json" in " ".join(fcn5), fcn5


# --- 10: a damaged run folder is one line -------------------------------------

def job_field(key, value):
    return lambda record: record["jobs"][0].update({key: value})


def record_field(key, value):
    return lambda record: record.update({key: value})


def every_reader(out, tmp_path):
    """What reads a run folder: report (text and page), compare (with the
    2016 reference and against a run), export and bench --resume."""
    return [invoke("report", "--out", str(out)),
            invoke("report", "--out", str(out), "--html",
                   str(tmp_path / "page.html")),
            invoke("compare", "--out", str(out)),
            invoke("compare", "--out", str(out), "--against", "latest"),
            invoke("export", "--out", str(out), "--csv",
                   str(tmp_path / "rows.csv")),
            bench(out, "fcn5", extra=["--resume"])]


@pytest.mark.parametrize("change, named", [
    (job_field("spec", ["fcn5"]), "`spec` must be an object"),
    (job_field("spec", "fcn5"), "`spec` must be an object"),
    (job_field("wall_s", "3.2"), "`wall_s` must be seconds"),
    (job_field("wall_s", [3.2]), "`wall_s` must be seconds"),
    (job_field("wall_s", -3.2), "`wall_s` must be seconds"),
    (lambda record: record["jobs"][0]["spec"].pop("framework"),
     "its spec's `framework` must be a string"),
    (lambda record: record["jobs"][0]["spec"].update(global_batch_size="16"),
     "its spec's `global_batch_size` must be a whole number"),
    (record_field("host", "box"), "`host` must be an object"),
    (record_field("isolation", 3), "`isolation` must be a mode"),
    (record_field("isolation", ["cell"]), "`isolation` must be a mode"),
    (record_field("isolation", {"pytorch": 1}), "`isolation` must be a mode"),
], ids=["spec-list", "spec-string", "wall-string", "wall-list",
        "wall-negative", "spec-no-framework", "spec-batch-string",
        "host-string", "isolation-number",
        "isolation-list", "isolation-of-a-number"])
def test_a_damaged_run_json_field_is_one_line_everywhere(tmp_path, change,
                                                          named):
    """Item 10: a job's spec not an object, wall_s or host of the wrong
    type, isolation a number or a list: tracebacks in report, its page,
    export or --resume."""
    out = tmp_path / "out"
    run_json = finished(out, "fcn5") / "run.json"
    edit(run_json, change)
    for proc in every_reader(out, tmp_path):
        message = one_line_error(proc)
        assert str(run_json) in message and named in message, message


@pytest.mark.parametrize("name", [f"{FCN5}.spec.json", ".tmp-x1y2.json",
                                  f"{FCN5}.json"])
def test_a_folder_where_resume_writes_a_file_is_one_line(tmp_path, name):
    """Item 10: a `<id>.spec.json` or `.tmp-*.json` that is a folder gave
    IsADirectoryError tracebacks on --resume."""
    run_dir = finished(tmp_path, "fcn5")
    path = run_dir / name
    if path.exists():
        path.unlink()
    (path / "inside").mkdir(parents=True)
    message = one_line_error(bench(tmp_path, "fcn5", extra=["--resume"]))
    assert message == f"error: {path} is a folder; remove it, then " \
                      f"resume again\n"
    assert (path / "inside").is_dir()
    shutil.rmtree(path)
    again = bench(tmp_path, "fcn5", extra=["--resume"])
    assert again.returncode == 0, again.stderr
    assert row(report(tmp_path), "fcn5")[5] == "ok"


# --- 11: a copy of a run is the same run --------------------------------------

def test_a_copy_of_a_run_named_beside_it_counts_once(tmp_path):
    """Item 11: `cp -a` of a run folder given as a second --run counted
    twice: procs 2 and a zero-width CI on the page, every CSV row twice."""
    out = tmp_path / "out"
    run_dir = finished(out, "fcn5")
    copy = tmp_path / "copy"
    shutil.copytree(run_dir, copy, symlinks=True)
    page = tmp_path / "r.html"
    proc = invoke("report", "--out", str(out), "--html", str(page),
                  "--run", "latest", "--run", str(copy))
    assert proc.returncode == 0, proc.stderr
    text = page.read_text()
    assert "Several bench runs" not in text
    cells = text[text.index('<section id="cells">'):]
    body = cells[cells.index("<tbody>"):cells.index("</tbody>")]
    assert body.split("<td>")[1:][6].startswith("1<")   # procs
    rows = tmp_path / "rows.csv"
    proc = invoke("export", "--out", str(out), "--csv", str(rows),
                  "--run", str(copy), "--run", "latest")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "1 cells exported\n"
    (exported,) = csv.DictReader(rows.open())
    assert exported["run_id"] == run_dir.name
    shutil.copytree(run_dir, out / "a-copy", symlinks=True)
    proc = invoke("export", "--out", str(out), "--all", "--csv", str(rows))
    assert proc.stdout == "1 cells exported\n", proc.stdout + proc.stderr


# --- 3 and 18: each job's isolation mode, and what compare says of it -----

def compare_against(out, base):
    proc = invoke("compare", "--out", str(out), "--against", base)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def test_a_resume_under_another_isolation_keeps_each_jobs_mode(tmp_path):
    """Item 3: a group run resumed under --isolation cell said `cell` in
    run.json for the job its worker had measured, and compare against a
    cell run saw no difference."""
    base = finished(tmp_path, extra=["--isolation", "cell"]).name
    grouped = bench(tmp_path, "fcn5", "fcn8", modes="fcn8=crash",
                    extra=["--isolation", "group"])
    assert grouped.returncode != 0 or "error" in grouped.stdout
    run_dir = latest(tmp_path)
    again = bench(tmp_path, "fcn5", "fcn8",
                  extra=["--isolation", "cell", "--resume"])
    assert again.returncode == 0, again.stdout + again.stderr
    assert "1 of 2 jobs already done" in again.stdout, again.stdout
    assert "isolation modes (pytorch: base cell, this run cell and " \
           "group)" in compare_against(tmp_path, base)
    record = store.read_run(run_dir)
    assert {e["id"]: e["isolation"] for e in record["jobs"]} == {
        FCN5: "group", FCN8: "cell"}
    assert record["isolation"] == {"pytorch": "mixed"}
    # Resumed again under group, the jobs done keep the modes they had.
    again = bench(tmp_path, "fcn5", "fcn8",
                  extra=["--isolation", "group", "--resume"])
    assert again.returncode == 0, again.stdout + again.stderr
    assert store.read_run(run_dir)["isolation"] == {"pytorch": "mixed"}


def test_compare_names_only_frameworks_both_runs_measured(tmp_path):
    """Item 18: against a run of PyTorch (cell) and TensorFlow (group), a
    PyTorch-only run under cell was said to differ for TensorFlow. (Each
    framework's default: PyTorch's and TensorFlow's fork now natively,
    Caffe's, run by the scripted harness, groups.)"""
    mixed = ["--framework", "caffe"]
    base = finished(tmp_path, "fcn5", extra=mixed, isolation=())
    assert store.read_run(base)["isolation"] == {"pytorch": "fork",
                                                 "caffe": "group"}
    finished(tmp_path, "fcn5", extra=["--isolation", "fork"])
    assert "isolation" not in compare_against(tmp_path, base.name)
    finished(tmp_path, "fcn5", extra=["--isolation", "group"])
    said = compare_against(tmp_path, base.name)
    assert "(base: fork, this run: group)" in said, said
    assert "caffe" not in said.split("\n")[0]


# --- 21: a result belongs to its run ------------------------------------------

def test_another_runs_result_copied_into_the_folder_is_not_adopted(tmp_path):
    """Item 21: --resume kept another run's result of the same cell and
    seed, copied into the folder, as this run's measurement."""
    other = finished(tmp_path)
    failed = bench(tmp_path, "fcn5", "fcn8", modes="fcn8=crash")
    assert "error" in failed.stdout, failed.stdout
    run_dir = latest(tmp_path)
    assert run_dir != other
    copied = (other / f"{FCN8}.json").read_bytes()
    (run_dir / f"{FCN8}.json").write_bytes(copied)
    fcn8 = row(report(tmp_path), "fcn8")
    assert fcn8[5] == "error" and fcn8[7] == "-", fcn8
    assert f"{FCN8}.json is the result of another run" in " ".join(fcn8)
    entry = {e["id"]: e for e, _ in store.load_run(run_dir)[1]}[FCN8]
    assert entry["message"] == f"{FCN8}.json is the result of another " \
                               f"run ({other.name})"
    again = bench(tmp_path, "fcn5", "fcn8", extra=["--resume"])
    assert again.returncode == 0, again.stdout + again.stderr
    assert "1 of 2 jobs already done" in again.stdout, again.stdout
    assert f"set aside as {FCN8}.invalid.json" in again.stdout
    assert (run_dir / f"{FCN8}.invalid.json").read_bytes() == copied
    mine = store.load_result(run_dir / f"{FCN8}.json")
    assert mine["run_id"] == run_dir.name and mine["status"] == "ok"
    assert json.loads(copied)["run_id"] == other.name
    assert row(report(tmp_path), "fcn8")[5] == "ok"


# --- 17: a timeout says what the host knows -----------------------------------

def test_a_timeout_without_a_result_does_not_say_none_were_done(tmp_path):
    """Item 17: a cell stopped at its timeout without writing a result was
    said to have stopped "after 0 of 3 timed iterations"; the host does
    not know how many were (its log may say)."""
    proc = bench(tmp_path, "fcn5", modes="fcn5=stubborn",
                 extra=["--timeout", "2"])
    assert "timeout" in proc.stdout, proc.stdout + proc.stderr
    result = store.load_result(latest(tmp_path) / f"{FCN5}.json")
    assert result["status"] == "timeout"
    message = result["error"]["message"]
    assert "after 0 of" not in message
    assert message == ("cell exceeded its 2 s timeout; how many of its 3 "
                       "timed iterations were done is not known (the "
                       "harness wrote no result; see its log)")
    assert result["run_id"] == latest(tmp_path).name


# --- 9: where the time went adds up -------------------------------------------

def shares(text):
    """The percentages of the "where the time went" lines of one
    framework: measured, then the rest."""
    part = text[text.index("where the time went"):]
    head = re.search(r"pytorch: (\d+)% measured", part)
    rest = part[part.index("rest: "):part.index("fixed cost")]
    return [int(head.group(1))] + [int(s) for s in re.findall(r"(\d+)%",
                                                              rest)]


def on_a_node(start, wall):
    def change(result):
        result["slurm"] = {"started_epoch_s": start, "wall_s": wall}
    return change


@pytest.mark.parametrize("case", ["clock-behind", "clock-ahead",
                                  "wall-negative"])
def test_where_the_time_went_adds_up_to_the_window(tmp_path, case):
    """Item 9: a node side's clock that differs from the host's, or a
    negative wall_s, gave shares of 127% and 264%; shares add up to the
    window, and a clock that disagrees is named."""
    run_dir = finished(tmp_path)
    first = store.load_result(run_dir / f"{FCN5}.json")["phases"]
    path = run_dir / f"{FCN8}.json"
    own = store.load_result(path)["phases"]
    if case == "clock-behind":
        # fcn8's node side says it started when fcn5 did, 5 s long
        edit(path, on_a_node(first["process_start"], 5.0))
    elif case == "clock-ahead":
        edit(path, lambda result: result.update(phases={
            name: at and at + 30.0 for name, at in own.items()}))
        edit(path, on_a_node(own["process_start"] + 29.9, 2.0))
    else:
        edit(path, on_a_node(own["process_start"], -5.0))
    text = report(tmp_path)
    assert sum(shares(text)) <= 100 + 3, text   # each share rounded
    if case != "wall-negative":
        assert "1 job on a clock up to" in text, text
