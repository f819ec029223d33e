"""Convergence runs through the job pipeline: one job per (framework,
network, worker count), then the figures across worker counts.

Run folder: <out>/<stamp>-converge-<hex>/, a run folder like any other
(dlrepro.run.runfolder) with kind "converge", plus convergence.json (the
figures across worker counts, harness.figures.compare).
<out>/latest-converge links the newest one (<out>/latest stays bench's).
"""
from harness import resultfile

from dlrepro import ROOT
from dlrepro.converge import summary as summary_mod
from dlrepro.errors import NoUsableResult, UserError
from dlrepro.run import pipeline, runfolder

DEFAULT_OUT = ROOT / "results"


def run_of(jobs, out, command, resume=False):
    return pipeline.Run(kind="converge", jobs=jobs, out=out, name="converge",
                        command=command, resume=resume)


def check_resumable(out):
    """Fail early (before images are built) when there is nothing to
    resume under `out`."""
    pipeline.resumable(out, "converge")


def run(jobs, out, runtime, command="", resume=False, events=None,
        matrix=None):
    """Run the jobs and write convergence.json; (run folder, {job id:
    result})."""
    run_dir = pipeline.start(run_of(jobs, out, command, resume), runtime,
                             matrix, events)
    _record, pairs, _summary = finish(run_dir)
    return run_dir, {entry["id"]: result for entry, result in pairs}


def finish(run_dir):
    """Write convergence.json; returns (record, [(entry, result)],
    summary)."""
    record, pairs = _load(run_dir)
    summary = summary_mod.summarise(_results(pairs))
    resultfile.write_atomic(str(run_dir / "convergence.json"), summary)
    return record, pairs, summary


# A diverged run is a finding: its curve up to the divergence is kept.
USABLE = ("ok", "diverged")


def check_usable(run_dir, pairs, only_ids):
    """NoUsableResult when no job in `only_ids` ended ok or diverged."""
    if not any(entry["status"] in USABLE for entry, _result in pairs
               if entry["id"] in only_ids):
        raise NoUsableResult(f"no convergence run ended ok or diverged: "
                             f"{run_dir} holds no usable result")


def latest_run(out=DEFAULT_OUT):
    return runfolder.resolve_run(out, "latest", "converge")


def load_run(run_dir):
    """(run.json, [results]) of a convergence run folder."""
    record, pairs = _load(run_dir)
    return record, _results(pairs)


def _load(run_dir):
    record, pairs = runfolder.load_run(run_dir)
    if record["kind"] != "converge":
        raise UserError(f"{run_dir} is not a convergence run folder (its "
                        f"kind is {record['kind']})")
    return record, pairs


def _results(pairs):
    return [result for _entry, result in pairs if result is not None]
