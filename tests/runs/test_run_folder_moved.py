"""A run folder moved or deleted while its run runs (issue 42 item 12), on
the real command line with tests/bin/scripted-python as the interpreter
(tests/runs/test_faults.py): a one-line error, the running job stopped,
nothing written by the old path, and a moved folder's run.json saying
`interrupted`, not `running`, in every isolation mode (a process per
cell, a group's worker, a fork server's child)."""
import json
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest

import fake_harness
from scripted import BENCH, harness_pids, one_line_error, start
from waits import text_of, wait_for

FCN5 = "pytorch-cpu-fcn5-cpu-b16-t1"
# A cell that measures for a minute unless stopped.
LONG = list(BENCH)
LONG[LONG.index("--iterations") + 1] = "60"


def measuring(out):
    """The run folder once its first cell (mode slow) is measuring."""
    run_dir = (Path(out) / "latest").resolve()
    logs = (run_dir / f"{FCN5}.log", run_dir / f"{FCN5}.worker.log")
    return run_dir if any(fake_harness.SLOW_STEP in text_of(log)
                          for log in logs) else None


@pytest.mark.parametrize("isolation", ["cell", "group", "fork"])
@pytest.mark.parametrize("how", ["moved", "deleted"])
def test_a_run_folder_gone_mid_run_stops_it_in_one_line(tmp_path, how,
                                                         isolation):
    """Fault: a traceback at the next write (FileNotFoundError), run.json
    in the moved folder `running` for ever."""
    out = tmp_path / "out"
    proc = start(*LONG, "--out", str(out), "--network", "fcn5",
                 "--network", "fcn8", "--isolation", isolation,
                 modes="fcn5=slow")
    run_dir = wait_for(lambda: measuring(out), what="a measuring cell")
    moved = tmp_path / "moved"
    if how == "moved":
        run_dir.rename(moved)
    else:
        shutil.rmtree(run_dir)
    stdout, stderr = proc.communicate(timeout=120)
    message = one_line_error(SimpleNamespace(
        returncode=proc.returncode, stdout=stdout, stderr=stderr))
    assert str(run_dir) in message, message
    assert "the running job was stopped" in message, message
    # The job's processes, named by the old path, are gone with invoke.
    assert harness_pids(run_dir) == []
    # Nothing written by the old path after the folder left it.
    assert not run_dir.exists()
    if how == "moved":
        assert f"was moved to {moved}" in message, message
        record = json.loads((moved / "run.json").read_text())
        assert record["status"] == "interrupted"
        assert record["finished_at"]
    else:
        assert "was deleted" in message, message
