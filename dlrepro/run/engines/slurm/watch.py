"""Waiting for a run's tasks in Slurm: polling their states into run.json
(a task of a group ends several jobs: each when its own result is final,
the rest when the task ends),
Ctrl-C (cancel them only when the user says so), and how a job ends when
its task has: the result file the task wrote on the shared filesystem, or,
for a task Slurm cancelled, timed out, preempted, killed over its memory
or lost with its node, a result whose status and reason come from Slurm,
keeping whatever the harness measured first."""
import time

from harness import resultfile
from harness.blocks import utc_now, utc_stamp

from dlrepro.errors import UserError
from dlrepro.run import collect, nodeenv, runrecord, store, writer
from dlrepro.run.paths import JobPaths
from dlrepro.run.engines.slurm import client
from dlrepro.run.events import Events

# How a task that ended without a final result of its own ends: Slurm's
# state -> (status, error type, what happened).
ENDINGS = {
    "TIMEOUT": ("timeout", "Timeout", "Slurm stopped the task at its time "
                                      "limit"),
    "DEADLINE": ("timeout", "Timeout", "Slurm stopped the task at its "
                                       "deadline"),
    "CANCELLED": ("error", "Cancelled", "the task was cancelled in Slurm"),
    "NODE_FAIL": ("error", "NodeFail", "the task's node failed or was set "
                                       "DOWN"),
    "BOOT_FAIL": ("error", "NodeFail", "the task's node failed to boot"),
    "PREEMPTED": ("error", "Preempted", "the task was preempted"),
    "OUT_OF_MEMORY": ("oom", "OutOfMemory", "Slurm killed the task: out of "
                                            "memory (--mem)"),
    "FAILED": ("error", "NoResult", "the task failed"),
    "COMPLETED": ("error", "NoResult", "the task ended"),
}
# How long a task's result file may take to show up here after the task
# ended (attribute caching of a shared filesystem).
RESULT_GRACE_S = 10
POLL_S = 2.0
# After Ctrl-C and scancel: how long to wait for the tasks to end, so that
# their cells are recorded as cancelled.
CANCEL_WAIT_S = 60


class Watch:
    """A run's jobs in Slurm (`pending`: {job id: job}) until each ends."""

    def __init__(self, context, pending, finished, poll_s=POLL_S):
        self.context = context
        self.by_id = context.entries()
        self.pending = pending
        self.finished = finished        # jobs ended so far, for events
        self.total = len(context.jobs)
        self.poll_s = poll_s
        self.seen_running = set()

    def tasks(self):
        return {(self.by_id[i]["slurm"]["array_job_id"],
                 self.by_id[i]["slurm"]["array_task_id"])
                for i in self.pending}

    def arrays(self):
        return sorted({array_id for array_id, _ in self.tasks()})

    def wait(self, events=None, deadline=None):
        """Until every pending job has ended (or the deadline, a
        time.monotonic() value, has passed)."""
        events = events or self.context.events
        last_counts = None
        while self.pending and (deadline is None
                                or time.monotonic() < deadline):
            try:
                known = client.states(self.tasks())
            except UserError as exc:  # slurmctld busy or restarting
                events.log(f"slurm: {exc}; asking again")
                time.sleep(self.poll_s * 5)
                continue
            counts, changed = self._poll(known, events)
            if changed:
                self.context.save()
            if counts != last_counts and self.pending:
                events.log("slurm: " + ", ".join(
                    f"{n} {s}" for s, n in sorted(counts.items())))
                last_counts = counts
            if self.pending:
                time.sleep(self.poll_s)

    def _poll(self, known, events):
        """One look at the pending jobs' tasks: ({state label: count},
        whether run.json changed)."""
        counts, changed = {}, False
        # A group's task runs its jobs in their order: the first still
        # pending is the one running.
        claimed = set()
        for job_id, job in list(self.pending.items()):
            entry = self.by_id[job_id]
            block = entry["slurm"]
            key = (block["array_job_id"], block["array_task_id"])
            task = known.get(key)
            label = _label(task)
            counts[label] = counts.get(label, 0) + 1
            if task is not None:
                changed |= (block["state"], block["node"]) != (task.state,
                                                               task.node)
                block.update(state=task.state, reason=task.reason,
                             node=task.node or block["node"],
                             source=task.source)
            state = task.state if task else "GONE"
            if state == "RUNNING" and key not in claimed and \
                    job_id not in self.seen_running:
                self.seen_running.add(job_id)
                entry["status"] = "running"
                entry["started_at"] = entry["started_at"] or utc_now()
                changed = True
                events.start(self.finished + 1, self.total, job)
            claimed.add(key)
            if state in client.ACTIVE and not self._ended_in_task(job):
                continue
            result = finish(job, self.context.run_dir, task, block)
            # Both ends as the node side saw them, where it wrote them: a
            # poll sees a start up to POLL_S late (a short cell's end could
            # then come before it), or never (a group's cell that ended
            # between two polls).
            entry["started_at"] = _started(result) or entry.get("started_at")
            runrecord.end_entry(entry, result, finished_at=_finished(result),
                             wall_s=_wall(result))
            del self.pending[job_id]
            self.finished += 1
            changed = True
            events.finish(self.finished, self.total, job, entry)
        return counts, changed

    def _ended_in_task(self, job):
        """Whether a job whose task still runs has its final result: a
        group's cell done while the task goes on to the next (its node
        side wrote it, with its engine block, the moment it ended). Only a
        result no Slurm state could change ends it early (an `oom` one
        waits: Slurm's OUT_OF_MEMORY adds why to its message)."""
        path = JobPaths(self.context.run_dir, job.id).result
        if not path.exists():
            return False
        try:
            result = resultfile.load(str(path))
        except (OSError, ValueError, RecursionError):
            return False
        return isinstance(result, dict) and \
            "wall_s" in nodeenv.block_of(result) and \
            result.get("status") in store.DONE_STATUSES and \
            result.get("status") != "oom"

    def interrupted(self, confirm):
        """Ctrl-C while waiting: cancel the tasks only when the user says
        so (`confirm(question)`), then record how they ended (Cancelled,
        keeping what they measured); either way run.json keeps their Slurm
        ids for --resume. Returns the arrays left queued or running."""
        arrays = self.arrays()
        left = arrays
        if arrays and confirm is not None and confirm(
                f"cancel Slurm job(s) {', '.join(arrays)} (scancel)?"):
            client.cancel(arrays)
            record = self.context.record
            record.setdefault("slurm", {}).setdefault("cancelled", []).append(
                {"arrays": arrays, "at": utc_now()})
            left = []
            self.finished, self.total = 0, len(self.pending)
            try:
                self.wait(Events(), time.monotonic() + CANCEL_WAIT_S)
            except KeyboardInterrupt:
                pass  # a second Ctrl-C: --resume will record them
        self.context.save()
        return left


def _label(task):
    """A task's state as the progress line counts it."""
    if task is None:
        return "gone"
    label = task.state.lower()
    if task.state == "PENDING" and task.reason not in (None, "None",
                                                       "(null)"):
        label += f" ({task.reason})"
    return label


def _started(result):
    """When the job's node side started it, stamped as run.json stamps,
    or None."""
    at = nodeenv.block_of(result).get("started_epoch_s")
    return None if at is None else utc_stamp(at)


def _finished(result):
    """When the job ended on its node (its start there and its wall time),
    stamped as run.json stamps, or None: the watcher sees the end only at
    its next poll, up to POLL_S later."""
    block = nodeenv.block_of(result)
    at, wall = block.get("started_epoch_s"), block.get("wall_s")
    return None if at is None or wall is None else utc_stamp(at + wall)


def _wall(result):
    """Seconds the job took in its task, as the task measured them."""
    return nodeenv.block_of(result).get("wall_s")


def task_result(path):
    """(result, problem) of a task's result file. One its node side wrote
    (its engine block has the task's wall_s) was validated there before it
    was written, and is not validated again."""
    try:
        result = resultfile.load(str(path))
    except (OSError, ValueError, RecursionError):
        result = None
    if isinstance(result, dict) and "wall_s" in nodeenv.block_of(result):
        return result, None
    return store.read_result(path)


def _said(task, block):
    """What Slurm says of a task, for a message."""
    state = task.state if task else None
    detail = [f"Slurm state {task.detail or state}" if task else
              "no longer known to Slurm"]
    if task and task.reason and task.reason not in ("None", "(null)"):
        detail.append(f"reason {task.reason}")
    if task and task.node:
        detail.append(f"node {task.node}")
    return f"{', '.join(detail)}; task {block['job_id']}"


def finish(job, run_dir, task, block):
    """The final result of a job whose task has ended: the task's own
    result, unless Slurm ended the task before it was final; then the
    status and reason come from Slurm and whatever was measured stays."""
    path = JobPaths(run_dir, job.id).result
    result, problem = task_result(path)
    deadline = time.monotonic() + RESULT_GRACE_S
    while result is None and time.monotonic() < deadline:
        # A network filesystem may show the node's file a little late.
        time.sleep(1)
        result, problem = task_result(path)
    state = task.state if task else None
    said = _said(task, block)
    if result is not None and result["status"] == "oom" and \
            state == "OUT_OF_MEMORY":
        # The task saw its harness OOM-killed; Slurm says why: the task
        # went over its memory (--mem, or the partition's default).
        result["error"]["message"] += f"; Slurm: the task went over its " \
                                      f"memory limit ({said})"
        result.setdefault(nodeenv.BLOCK, dict(block, name="slurm"))
        return writer.write_result(path, result)
    if result is not None and result["status"] in store.DONE_STATUSES:
        return result
    if result is not None and state in (None, "COMPLETED"):
        return result  # the task ran to its end: its own error or timeout
    status, error_type, what = ENDINGS.get(
        state, ("error", "NoResult", "the task is gone from Slurm"))
    message = f"{what} ({said})"
    if result is None:
        if path.exists():
            kept = writer.set_aside(path)
            message += f"; its result was invalid ({problem}), kept as " \
                       f"{kept.name}"
        elif state in ("FAILED", "COMPLETED") or task is None:
            log = JobPaths(run_dir, job.id).log
            message += f"; it said: {collect.last_words(log)}"
        result = writer.synthesized(job, status, error_type, message,
                                    run_id=store.run_id_or_none(run_dir))
    else:
        result["status"] = status
        result["error"] = {"type": error_type, "message": message}
    result.setdefault(nodeenv.BLOCK, dict(block, name="slurm"))
    return writer.write_result(path, result)
