"""Run folders written before the one job pipeline stay readable: bench
runs of run.json format 1 and convergence runs of format 0, exactly as the
previous version wrote them (tests/golden/runs/, made with that version's
`invoke bench` and `invoke converge` on PyTorch), through report, compare
and --resume."""
import json
import shutil

import pytest

from dlrepro.converge import runner as conv_runner, summary
from dlrepro.errors import UserError
from dlrepro.run import runfolder, store
from cli import invoke
from paths import ROOT, SCRIPTED

GOLDEN = ROOT / "tests" / "golden" / "runs"


def copied(tmp_path, name, kind):
    run_dir = tmp_path / name
    shutil.copytree(GOLDEN / name, run_dir)
    runfolder.point_latest(tmp_path, run_dir, kind)
    return run_dir


def test_a_bench_run_of_format_1_reads_as_format_2():
    record, pairs = store.load_run(GOLDEN / "bench-v1")
    assert record["schema_version"] == 2 and record["kind"] == "bench"
    assert [(e["spec"]["network"], e["status"]) for e, _ in pairs] == [
        ("fcn5", "ok"), ("fcn8", "ok")]
    assert all(result["status"] == "ok" for _, result in pairs)


def test_report_and_compare_read_a_format_1_run():
    proc = invoke("report", "--run", str(GOLDEN / "bench-v1"))
    assert proc.returncode == 0, proc.stderr
    rows = [line.split() for line in proc.stdout.splitlines()
            if line.startswith("pytorch ")]
    assert [(r[1], r[5]) for r in rows] == [("fcn5", "ok"), ("fcn8", "ok")]
    proc = invoke("compare", "--run", str(GOLDEN / "bench-v1"))
    assert proc.returncode == 0, proc.stderr
    assert "no result in this run matches the 2016 reference" in proc.stdout


def test_resume_of_a_format_1_run_keeps_its_cells(tmp_path):
    run_dir = copied(tmp_path, "bench-v1", "bench")
    proc = invoke("bench", "--framework", "pytorch", "--runtime", "native",
                  "--python", SCRIPTED, "--network", "fcn5", "--network",
                  "fcn8", "--batch-size", "4", "--iterations", "2",
                  "--warmup", "1", "--threads", "1", "--out", str(tmp_path),
                  "--resume")
    assert proc.returncode == 0, proc.stderr
    assert "2 of 2 jobs already done" in proc.stdout
    record = json.loads((run_dir / "run.json").read_text())
    assert record["schema_version"] == 2 and len(record["resumed_at"]) == 1
    assert (run_dir / "pytorch-cpu-fcn5-cpu-b4-t1.json").read_bytes() == \
        (GOLDEN / "bench-v1" / "pytorch-cpu-fcn5-cpu-b4-t1.json").read_bytes()


def test_a_convergence_run_of_format_0_reads_as_format_2():
    record, results = conv_runner.load_run(GOLDEN / "converge-v0")
    assert record["kind"] == "converge" and record["status"] == "complete"
    assert record["jobs"][0]["id"] == "pytorch-fcn-r-w1"
    assert record["command"].startswith("/")
    (result,) = results
    lines = summary.table_lines(summary.summarise(results))
    assert lines[0].startswith("pytorch fcn-r on cpu, global batch 16")


def test_a_format_0_command_of_other_than_strings_is_read(tmp_path):
    """Format 0 kept the command as a list of arguments; one edited to
    hold a number gave report and export a TypeError traceback."""
    run_dir = copied(tmp_path, "converge-v0", "converge")
    path = run_dir / "run.json"
    record = json.loads(path.read_text())
    record["command"] = ["invoke", 1, 2.5]
    path.write_text(json.dumps(record))
    assert store.read_run(run_dir)["command"] == "invoke 1 2.5"
    proc = invoke("report", "--run", str(run_dir))
    assert proc.returncode == 0, proc.stderr


def test_resume_of_a_format_0_convergence_run_keeps_its_run(tmp_path):
    run_dir = copied(tmp_path, "converge-v0", "converge")
    proc = invoke("converge", "--runtime", "native", "--framework",
                  "pytorch", "--network", "fcn-r", "--synthetic",
                  "--workers", "1", "--epochs", "1", "--train-samples", "64",
                  "--test-samples", "16", "--global-batch-size", "16",
                  "--threads", "1", "--out", str(tmp_path), "--resume")
    assert proc.returncode == 0, proc.stderr
    assert "1 of 1 jobs already done" in proc.stdout
    assert json.loads((run_dir / "run.json").read_text())["kind"] == "converge"


def test_an_unknown_format_is_named(tmp_path):
    (tmp_path / "run.json").write_text('{"schema_version": 7}')
    with pytest.raises(UserError, match="run.json version 7 is not "
                                        "supported \\(this version reads 0 "
                                        "to 2\\)"):
        store.read_run(tmp_path)
