"""The node entry: on a node an engine chose, run ONE job of a submission,
or this node's part of a job on several nodes, or a group of jobs in one
harness worker, the way a local run runs a job (runtime.launch, the local
engine or its group runner, collect), and add to each result where it ran:
the engine's job and array ids, the node, the allocation, the CPUs and
GPUs the process was given, and the --gpu-freq asked beside the clocks
telemetry saw.

An engine starts it as `python -m dlrepro.run.node ENGINE RUN_DIR
SUBMISSION_JSON`; the engine fills the node's NodeEnv (Engine.node_env,
dlrepro.run.nodeenv) from the process's environment, and that object is
all the entry knows of the engine. The job is the submission's
jobs[node.task]. SIGTERM (a cancel, the time limit, a node going down)
stops the job as Ctrl-C does locally: the harness gets SIGTERM and writes
what it measured; the submitting side then records why from the engine.

A group (--isolation group; the submission's `tasks` lists each task's
job ids): the jobs run one after another in one worker
(engines/grouped.py), each under its own timeout, each result written as
its cell ends; SIGTERM stops the cell under way and leaves the rest
unrun, for the submitting side to end with Slurm's word.

A job on several nodes (a convergence run whose spec says "nodes" > 1):
every node runs this entry. It builds its node's "cluster" object
(dlrepro.run.cluster, docs/multinode.md) and runs the harness on the
node's network; node 0 writes the job's result, RUN_DIR/<job>.json, node
r > 0 a side result, RUN_DIR/nodes/<job>.node<r>.json, and node 0 folds
the others' outcomes into the job's. A node whose part did not end ok
exits 1, so the engine ends the job on every node rather than leaving
peers waiting for it.
"""
import contextlib
import functools
import json
import os
import signal
import sys
import time
from pathlib import Path

from dlrepro import matrix as matrix_mod
from dlrepro.errors import UserError
from dlrepro.run import cluster as cluster_mod
from dlrepro.run import nodeenv, runtimes, store, writer
from dlrepro.run.engines.grouped import Grouped
from dlrepro.run.job import Job, Placement
from dlrepro.run.life import JobLife, run_id_in
from dlrepro.run.paths import SIDE_DIR, JobPaths
from dlrepro.run.process import Processes


class Stopped(Exception):
    """The engine sent SIGTERM."""


# Set while a finished cell's result is written: SIGTERM then waits for
# the write (a group stops between cells, its last result whole).
_deferring = {"on": False, "stopped": False}


def _stop(signum, frame):
    # Once: the engine may signal again, and a second Stopped raised while
    # the harness writes its partial result would end this process, and
    # with it (its step over) the harness.
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if _deferring["on"]:
        _deferring["stopped"] = True
        return
    raise Stopped()


@contextlib.contextmanager
def _stop_deferred():
    """SIGTERM's Stopped raised at the end of the block, not inside it."""
    _deferring.update(on=True, stopped=False)
    try:
        yield
    finally:
        _deferring["on"] = False
    if _deferring["stopped"]:
        raise Stopped()


def job_of(document):
    return Job(id=document["id"], kind=document["kind"],
               spec=document["spec"], timeout_s=document["timeout_s"],
               placement=Placement(*document["placement"]),
               mounts=tuple(document["mounts"]),
               # Absent from a submission written before fork existed.
               isolation=document.get("isolation", "cell"))


def where(node):
    """The result's block of where it ran, from the node's environment."""
    try:
        cpus = sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = None
    return {
        "name": node.engine,
        "job_id": f"{node.array_id}_{node.task}",
        "array_job_id": node.array_id,
        "array_task_id": node.task,
        "slurm_job_id": node.job_id,
        "node": node.node,
        "partition": node.partition,
        "allocation": dict(node.variables),
        "placement": {"cpus": cpus, "gpus": node.gpus},
    }


def seen_clocks(result):
    """SM clocks telemetry saw over the timed iterations, per GPU."""
    telemetry = result.get("telemetry") or {}
    return [{"index": g.get("index"), "sm_clock_mhz": g.get("sm_clock_mhz")}
            for g in telemetry.get("gpus") or []] or None


def now():
    """(time.time(), time.monotonic()): a job's start as `annotated`
    takes it."""
    return time.time(), time.monotonic()


def annotated(path, block, gpu_freq, started, result=None):
    """The job's result (`result`, not yet written, else the valid file at
    `path`) with the engine's block added, or None: an invalid file is
    left for the submitting side to judge. `started`: `now()` when this
    node side started the job; its window
    (`started_epoch_s`, on this node's clock, and `wall_s`) is exact where
    run.json's stamps are the submitting side's polls (a group's short
    cell may end between two, never seen running)."""
    if result is None:
        result, _problem = store.read_result(path)
    if result is not None:
        result[nodeenv.BLOCK] = dict(
            block, started_epoch_s=round(started[0], 3),
            wall_s=round(time.monotonic() - started[1], 3),
            gpu_freq={"asked": gpu_freq, "seen": seen_clocks(result)})
    return result


class Part:
    """This node's part of a job: the job (a side job on node r > 0 of
    several), the folder its files go to, and what happened so far."""

    def __init__(self, job, node, run_dir):
        self.whole = job
        self.whole_run_dir = run_dir
        self.node = node
        self.several = job.nodes > 1
        if self.several and node.rank > 0:
            self.job = job._replace(
                id=JobPaths.side_job_id(job.id, node.rank))
            self.folder = run_dir / SIDE_DIR
            self.folder.mkdir(exist_ok=True)
        else:
            self.job, self.folder = job, run_dir
        self.path = JobPaths(self.folder, self.job.id).result
        self.cluster = None
        self.launched = False

    @property
    def folds(self):
        """Node 0 of several, its cluster known: it folds the other nodes'
        outcomes into the job's result before writing it."""
        return self.several and self.node.rank == 0 and \
            self.cluster is not None

    def stopped_message(self):
        what = "this node's part" if self.several else "this task"
        return (f"dlrepro: {self.node.engine.capitalize()} stopped {what} "
                f"(SIGTERM)")

    def block(self):
        block = where(self.node)
        if self.several:
            block["node_rank"] = self.node.rank
            if self.cluster is not None:
                block["cluster"] = self.cluster
        return block


def task_jobs(submission, task):
    """The jobs of the submission's array task `task`: its group's, or
    the one job at that index."""
    documents = submission["jobs"]
    if "tasks" not in submission:
        return [job_of(documents[task])]
    by_id = {document["id"]: document for document in documents}
    return [job_of(by_id[job_id]) for job_id in submission["tasks"][task]]


def main(argv, node):
    """Run the job (or group) of `argv` (RUN_DIR SUBMISSION_JSON) on the
    node `node` describes. Exits 0, or 1 when this node's part of a job on
    several nodes did not end ok."""
    run_dir, submission = Path(argv[0]), json.loads(Path(argv[1]).read_text())
    jobs = task_jobs(submission, node.task or 0)
    signal.signal(signal.SIGTERM, _stop)
    if "tasks" in submission and jobs[0].nodes == 1:
        return run_group(jobs, node, run_dir, submission)
    part = Part(jobs[0], node, run_dir)
    started = now()
    result = None
    try:
        result = _run(part, submission)
    except UserError as exc:
        result = writer.synthesized(part.job, "error", "SetupFailed",
                                    f"on node {node.node}: {exc}")
    except Stopped:
        print(part.stopped_message(), flush=True)
    finally:
        # The one write after the harness's (node 0 of several: after the
        # fold, which adds the other nodes' outcomes).
        result = annotated(part.path, part.block(), submission.get(
            "gpu_freq"), started, result)
        if result is not None and not part.folds:
            writer.write_result(part.path, result)
    if not part.several:
        return 0
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # the fold is short
    return _end_part(part, run_dir, result)


def run_group(jobs, node, run_dir, submission):
    """A group's jobs in one worker, in order; each job's result is
    written, with where it ran, the moment its cell ends. Exits 0."""
    write = functools.partial(_write_cell, run_dir, block=where(node),
                              gpu_freq=submission.get("gpu_freq"))
    try:
        runtime, matrix, ending = _group_runtime(jobs[0], node, submission)
        if ending is not None:
            for job in jobs:
                write(job, now(), writer.synthesized(job, *ending))
            return 0
        # The task finds the spec files its submitter wrote; each cell's
        # result is collected but not written: where it ran is added first.
        processes = Processes()
        grouped = Grouped(processes, JobLife(runtime, run_dir, matrix,
                                             processes, write=False))
        try:
            for job in jobs:
                _run_cell(grouped, job, node, write)
        finally:
            grouped.close()
    except Stopped:
        print(f"dlrepro: {node.engine.capitalize()} stopped this task "
              f"(SIGTERM)", flush=True)
    return 0


def _run_cell(grouped, job, node, write):
    """One job in the group's worker; its result written whatever
    happened (Stopped propagates once it is)."""
    started, result = now(), None
    try:
        result = grouped.launch(job)
    except UserError as exc:
        result = writer.synthesized(job, "error", "SetupFailed",
                                    f"on node {node.node}: {exc}")
    finally:
        write(job, started, result)


def _group_runtime(job, node, submission):
    """(runtime, matrix, None) ready for the group's cells, whose runtime
    target is the same for all (it is a process-wide field), or (None,
    None, (status, error type, message)) that ends every cell at once."""
    matrix = matrix_mod.load()
    try:
        runtime = runtimes.get(submission["runtime"], matrix=matrix,
                               node=node, **submission["runtime_options"])
        runtime.check()
        target = job.placement.target
        reason = runtime.prepare([target], log=print).get(target)
    except UserError as exc:
        return None, None, ("error", "SetupFailed",
                            f"on node {node.node}: {exc}")
    if reason:
        return None, None, ("unsupported", "Unsupported", reason)
    return runtime, matrix, None


def _write_cell(run_dir, job, started, result, block, gpu_freq):
    """A group's cell's result with where it ran, written once (after the
    harness's own); a cell stopped before it wrote anything valid is left
    for the submitting side to end."""
    path = JobPaths(run_dir, job.id).result
    with _stop_deferred():
        result = annotated(path, block, gpu_freq, started, result)
        if result is not None:
            writer.write_result(path, result)


def _run(part, submission):
    """This node's part run to its result, not yet written."""
    job = part.job
    problem = None
    if part.several:
        part.cluster = cluster_mod.cluster_of(
            part.node, submission["runtime"], job.timeout_s)
        problem = _announce(part.cluster, part.node.rank)
    matrix = matrix_mod.load()
    runtime = runtimes.get(submission["runtime"], matrix=matrix,
                           node=part.node, **submission["runtime_options"])
    runtime.check()
    target = job.placement.target
    reason = runtime.prepare([target], log=print).get(target)
    if problem:
        return writer.synthesized(job, "error", "PortTaken", problem)
    if reason:
        return writer.synthesized(job, "unsupported", "Unsupported", reason)
    part.launched = True
    extra = {"cluster": part.cluster} if part.several else None
    return JobLife(runtime, part.folder, matrix, Processes(), write=False,
                   run_id=run_id_in(part.whole_run_dir)).run(job, extra)


def _announce(cluster, rank):
    """Say where this node is; on node 0, why the job's ports cannot be
    used, or None."""
    print(f"dlrepro: node {rank} of {cluster['nodes']} "
          f"({cluster['hosts'][rank]}, {cluster['addresses'][rank]}, "
          f"{cluster['interface']}), rendezvous "
          f"{cluster['coordinator']}:{cluster['port']}", flush=True)
    if rank != 0:
        return None
    return cluster_mod.port_problem(cluster["port"], cluster["addresses"][0],
                                    cluster["hosts"][0])


def _end_part(part, run_dir, result):
    """Node 0 folds the other nodes' results into the job's `result` and
    writes it; every node exits 1 when its part (node 0: the job) did not
    end ok."""
    rank = part.node.rank
    if part.folds:
        # Node 0 that never ran its part knows the job failed: no wait.
        status = cluster_mod.fold(
            part.path, part.whole, part.cluster, run_dir,
            cluster_mod.FOLD_WAIT_S if part.launched else 0, result)
    else:
        status = result["status"] if result else None
    print(f"dlrepro: node {rank}'s part ended: {status}", flush=True)
    return 0 if status in ("ok", "unsupported") else 1


if __name__ == "__main__":
    from dlrepro.run.engines import ENGINES
    sys.exit(main(sys.argv[2:], ENGINES[sys.argv[1]].node_env(os.environ)))
