"""`invoke converge`: convergence runs through the job pipeline, one job
per (framework, network, worker count), then the figures across worker
counts. tasks.py parses the flags into ConvergeFlags and calls `converge`;
tests call `run` (the same path from planned jobs).

Run folder: <out>/<stamp>-converge-<hex>/, a run folder like any other
(dlrepro.run.store) with kind "converge", plus convergence.json (the
figures across worker counts, harness.figures.compare).
<out>/latest-converge links the newest one (<out>/latest stays bench's).
"""
from dataclasses import dataclass
from typing import Optional

from harness import resultfile

from dlrepro import matrix as matrix_mod
from dlrepro.converge import plan as plan_mod, summary as summary_mod
from dlrepro.errors import NoUsableResult, UserError
from dlrepro.run import command, pipeline, runrecord, runtimes, store
from dlrepro.run.kinds import KINDS

# Results go under the working directory, as bench's, report's and
# export's do.
DEFAULT_OUT = "results"
CONVERGE = KINDS["converge"]


@dataclass
class ConvergeFlags(command.RunFlags):
    """`invoke converge`'s flags as given, with the task's defaults."""
    workers: Optional[str] = None
    gpus: Optional[str] = None
    nodes: Optional[str] = None
    epochs: Optional[str] = None
    global_batch_size: Optional[str] = None
    data_dir: Optional[str] = None
    synthetic: bool = False
    train_samples: Optional[str] = None
    test_samples: Optional[str] = None
    target_loss: Optional[str] = None
    threads: Optional[str] = None


def converge(flags, command_line="", echo=print):
    """Plan the runs `flags` ask for and print them; unless --dry-run, run
    them and print the figures. The run folder (None on a dry run);
    NoUsableResult when no run ended ok or diverged."""
    m = matrix_mod.load()
    jobs = plan_of(flags, m)
    executor = command.executor_of(flags, None, {})
    for job in jobs:
        spec = job.spec
        echo(f"{job.id}: {spec['epochs']} epochs, global batch "
             f"{spec['global_batch_size']}, {spec['data']['source']} "
             f"{spec['data']['name']}")
    if flags.dry_run:
        return None
    if flags.resume:
        check_resumable(flags.out)
    plan_mod.check_data(jobs)
    run_dir, record, job_results, figures = execute(
        jobs, flags.out, runtimes.get(flags.runtime, matrix=m), command_line,
        flags.resume, matrix=m, executor=executor)
    if figures is None:
        echo(command.submitted_line(run_dir, record))
        return run_dir
    echo("\n".join(summary_mod.table_lines(figures)))
    echo(f"results: {run_dir}")
    check_usable(run_dir, job_results, {job.id for job in jobs})
    return run_dir


def plan_of(flags, m):
    """The jobs of `flags`: --workers or --gpus (the device follows)."""
    if flags.gpus is not None and flags.workers is not None:
        raise UserError("give --workers or --gpus, not both")
    if flags.gpus is not None and flags.device not in (None, "gpu"):
        raise UserError("--gpus needs --device gpu")
    device = flags.device or ("gpu" if flags.gpus is not None else "cpu")
    counts = plan_mod.worker_counts(flags.gpus or flags.workers or "1,2,4",
                                    "--gpus" if flags.gpus else "--workers")
    return plan_mod.plan(
        flags.framework, flags.network, counts, device=device,
        global_batch=flags.global_batch_size, epochs=flags.epochs,
        seed=flags.seed, threads=flags.threads, data_dir=flags.data_dir,
        synthetic=flags.synthetic, train_samples=flags.train_samples,
        test_samples=flags.test_samples, target_loss=flags.target_loss,
        runtime=flags.runtime, timeout=flags.timeout, matrix=m,
        nodes=flags.nodes, executor=flags.executor)


def run_of(jobs, out, command, resume=False):
    return pipeline.Run(kind="converge", jobs=jobs, out=out, name="converge",
                        command=command, resume=resume)


def check_resumable(out):
    """Fail early (before images are built) when there is nothing to
    resume under `out`."""
    pipeline.resumable(out, "converge")


def execute(jobs, out, runtime, command_line="", resume=False, events=None,
            matrix=None, executor=None):
    """Run the jobs and write convergence.json: (run folder, record,
    [(entry, result)], figures); figures and job results None when the run
    went to Slurm without waiting."""
    run_dir = command.start(run_of(jobs, out, command_line, resume),
                            runtime, matrix, executor, events)
    record = store.read_run(run_dir)
    if record["status"] == "submitted":
        return run_dir, record, None, None
    record, job_results, figures = finish(run_dir)
    return run_dir, record, job_results, figures


def run(jobs, out, runtime, command="", resume=False, events=None,
        matrix=None):
    """execute() without an executor's choice: (run folder, {job id:
    result})."""
    run_dir, _record, job_results, _figures = execute(
        jobs, out, runtime, command, resume, events, matrix)
    return run_dir, {entry["id"]: result for entry, result in job_results}


def finish(run_dir):
    """Write convergence.json; returns (record, [(entry, result)],
    summary)."""
    record, job_results = _load(run_dir)
    summary = summary_mod.summarise(_results(job_results))
    resultfile.write_atomic(str(run_dir / "convergence.json"), summary)
    return record, job_results, summary


# A diverged run is a finding: its curve up to the divergence is kept.
USABLE = ("ok", "diverged")


def check_usable(run_dir, job_results, only_ids):
    """NoUsableResult when no job in `only_ids` ended ok or diverged."""
    if not any(entry["status"] in USABLE for entry, _result in job_results
               if entry["id"] in only_ids):
        raise NoUsableResult(f"no convergence run ended ok or diverged: "
                             f"{run_dir} holds no usable result")


def latest_run(out=DEFAULT_OUT):
    return store.resolve_run(out, "latest", "converge")


def load_run(run_dir):
    """(run.json, [results]) of a convergence run folder."""
    record, job_results = _load(run_dir)
    return record, _results(job_results)


def _load(run_dir):
    record, job_results = store.load_run(run_dir)
    if runrecord.kind_of(record) is not CONVERGE:
        raise UserError(f"{run_dir} is not a convergence run folder (its "
                        f"kind is {record['kind']})")
    return record, job_results


def _results(job_results):
    return [result for _entry, result in job_results if result is not None]
