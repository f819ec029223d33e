"""What a hostile user found in round four (issue 42 item 22) that relabelled
nothing measured but told it wrong, on the real command line with
tests/bin/scripted-python as the interpreter (tests/runs/test_faults.py):

- a result the host writes for a worker's cell (the worker, or its forked
  child, ended without one) says where the cell stood, as the worker's
  own results do;
- after `--resume --repeat 1` of a run with more processes per cell, bench
  counts what `report` counts.
"""
import pytest

from dlrepro.run import store
from groupcells import BENCH, result
from scripted import BENCH as SCRIPTED_BENCH, invoke, row

FCN5 = "pytorch-cpu-fcn5-cpu-b16-t1"


@pytest.mark.parametrize("isolation", ["group", "fork"])
def test_a_host_written_result_of_a_workers_cell_says_where_it_stood(
        tmp_path, isolation):
    """Fault: the cell's result, written by the host, had no isolation
    block: the page, export and history took it for a process of its
    own."""
    done = invoke(*BENCH, "--out", str(tmp_path), "--isolation", isolation,
                  modes="fcn8=crash")
    run_dir = (tmp_path / "latest").resolve()
    crashed = result(run_dir, "fcn8")
    assert crashed["status"] == "error", done.stdout + done.stderr
    assert crashed["environment"]["recorded_by"] == "host"
    assert store.validation_errors(crashed) == []
    block = crashed["isolation"]
    first = result(run_dir, "fcn5")["isolation"]
    assert block["mode"] == isolation
    assert block["position"] == 2
    assert block["worker_pid"] == first["worker_pid"]
    assert block["cells_before"] == [FCN5]
    if isolation == "fork":
        assert block["pid"] not in (None, first["pid"], first["worker_pid"])
        assert block["parent"]["pid"] == first["worker_pid"]
    else:
        assert block["memory_held"]["rss_bytes"] is None
    # the rest of the sweep is as it was
    assert result(run_dir, "fcn-r")["status"] == "ok"


def test_a_resume_with_a_smaller_repeat_counts_every_process(tmp_path):
    """Fault: after `--resume --repeat 1` of a --repeat 3 run, bench's
    table said procs 1 while `report` said 3, for the same run."""
    args = (*SCRIPTED_BENCH, "--out", str(tmp_path), "--network", "fcn5")
    first = invoke(*args, "--repeat", "3")
    assert first.returncode == 0, first.stdout + first.stderr
    again = invoke(*args, "--repeat", "1", "--resume")
    assert again.returncode == 0, again.stdout + again.stderr
    report = invoke("report", "--out", str(tmp_path))
    for text in (first.stdout, again.stdout, report.stdout):
        assert row(text, "fcn5")[6] == "3", text
