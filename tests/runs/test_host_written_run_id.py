"""A result dlrepro writes itself names its run, as a harness's does
(issue 40): the Slurm watcher's, for a task that ended without one, named
none, so `--resume` and the results database could not tell its run."""
from dlrepro.run import runrecord, store
from dlrepro.run.engines.slurm import watch
from dockercells import make_cell, make_job


def test_the_watchers_result_for_a_task_gone_names_its_run(tmp_path,
                                                          monkeypatch):
    job = make_job(make_cell("pytorch"))
    run_dir = tmp_path / "20261204-000000-abcd"
    run_dir.mkdir()
    runrecord.write_run(run_dir, runrecord.new_record(
        run_dir, "bench", ["bench"], "native", [job], executor="slurm",
        detached=True))
    monkeypatch.setattr(watch, "RESULT_GRACE_S", 0)
    # No task any more (Slurm forgot it), no result on disk.
    result = watch.finish(job, run_dir, None, {"job_id": "7_0"})
    assert result["status"] == "error", result["error"]
    assert result["run_id"] == run_dir.name
    assert store.validation_errors(result) == []
    assert store.load_result(run_dir / f"{job.id}.json") == result
