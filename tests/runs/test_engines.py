"""One contract every engine keeps, checked on the real command line for
each (`invoke bench --executor NAME`, tests/bin/scripted-python as the
interpreter, its harness tests/fake_harness.py in a mode per network): a
job that ends ok, one that fails, one past its timeout and one that cannot
run each end in a schema-valid result and a run.json entry that says so;
a resumed run whose jobs are all done runs none of them again. The Slurm
engine needs the test cluster (.ci/slurm.sh; skipped without one, as in
tests/slurm/test_slurm_results.py)."""
import inspect
import os
import subprocess
import sys
from pathlib import Path

import pytest

import slurmenv
from dlrepro.run import store
from dlrepro.run.engines import ENGINES, Engine
from paths import ROOT

INVOKE = str(Path(sys.executable).parent / "invoke")
SCRIPTED = str(ROOT / "tests" / "bin" / "scripted-python")
# fcn5 ends ok, fcn8 crashes, alexnet is stopped at its timeout; at 4096
# threads each cell is unsupported on any machine the tests run on.
MODES = "fcn8=crash,alexnet=slow"
EXPECTED = {("fcn5", "t1"): "ok", ("fcn8", "t1"): "error",
            ("alexnet", "t1"): "timeout", ("fcn5", "t4096"): "unsupported",
            ("fcn8", "t4096"): "unsupported",
            ("alexnet", "t4096"): "unsupported"}


def _bench(engine, out, *extra):
    args = ["bench", "--framework", "pytorch", "--runtime", "native",
            "--python", SCRIPTED, "--iterations", "30", "--warmup", "1",
            "--threads", "1", "--threads", "4096", "--timeout", "8",
            "--network", "fcn5", "--network", "fcn8", "--network",
            "alexnet", "--executor", engine, "--out", str(out), *extra]
    return subprocess.run([INVOKE, *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=300,
                          env=dict(os.environ, DLREPRO_FAKE_MODES=MODES))


@pytest.fixture(params=sorted(ENGINES))
def engine(request, tmp_path):
    """Each engine by its --executor name; Slurm's tasks of a test are
    cancelled after it."""
    if request.param == "slurm":
        slurmenv._cluster_or_skip()
    yield request.param
    if request.param == "slurm":
        left = slurmenv._queued(under=tmp_path)
        if left:
            subprocess.run(["scancel"] + sorted(left))


def _cell(entry):
    parts = entry["id"].split("-")
    return parts[2], parts[-1]


def test_every_registered_engine_is_an_engine():
    for name, engine in ENGINES.items():
        assert issubclass(engine, Engine) and engine.name == name
        assert not inspect.isabstract(engine), name


def test_each_job_ends_in_its_result_and_entry(engine, tmp_path):
    out = tmp_path / "r"
    done = _bench(engine, out)
    assert done.returncode == 0, done.stdout + done.stderr
    run_dir = (out / "latest").resolve()
    record = store.read_run(run_dir)
    assert record["executor"] == engine
    assert record["status"] == "complete"
    assert {_cell(e): e["status"] for e in record["jobs"]} == EXPECTED
    for entry in record["jobs"]:
        result, problem = store.read_result(run_dir / entry["file"])
        assert problem is None, problem
        assert result["status"] == entry["status"]
        assert entry["finished_at"] and (
            entry["message"] == (result["error"] or {}).get("message"))
        if entry["status"] == "unsupported":
            # Never started: no spec file, no log.
            assert not (run_dir / entry["log"]).exists()
            assert "4096 CPU threads" in entry["message"]
        else:
            assert (run_dir / entry["log"]).exists()
    timeout = next(e for e in record["jobs"]
                   if _cell(e) == ("alexnet", "t1"))
    assert "8 s" in timeout["message"] or "timeout" in timeout["message"]


def test_resume_of_a_finished_run_runs_nothing(engine, tmp_path):
    out = tmp_path / "r"
    first = _bench(engine, out)
    assert first.returncode == 0, first.stdout + first.stderr
    run_dir = (out / "latest").resolve()
    before = {p.name: p.read_bytes() for p in run_dir.glob("*.json")
              if p.name != "run.json"}
    failed = [e["id"] for e in store.read_run(run_dir)["jobs"]
              if e["status"] not in store.DONE_STATUSES]
    again = _bench(engine, out, "--resume")
    assert again.returncode == 0, again.stdout + again.stderr
    assert "already done" in again.stdout + again.stderr
    after = {p.name: p.read_bytes() for p in run_dir.glob("*.json")
             if p.name != "run.json"}
    # What was done is kept as it was; only what failed ran again.
    for name, content in before.items():
        if name.split(".")[0] not in failed:
            assert after[name] == content, name
    record = store.read_run(run_dir)
    assert record["status"] == "complete" and len(record["resumed_at"]) == 1
    assert {_cell(e): e["status"] for e in record["jobs"]} == EXPECTED
    if engine == "slurm":  # only the failed jobs were submitted again
        assert [sorted(a["jobs"]) for a in record["slurm"]["arrays"]][1:] \
            == [sorted(failed)]
