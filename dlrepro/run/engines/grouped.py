"""--isolation group in the local engine: the jobs of a group (jobs with
equal process-wide fields, consecutive in groups.order) run in one
`python -m harness worker` process, fed one spec path at a time, the next
only after the worker said `cell-done`, so that each cell keeps every
promise a cell in its own process has: its run.json entry, its timeout
(the worker is stopped: SIGTERM, then SIGKILL after the grace), Ctrl-C,
and a death mid-cell, after which the rest of the group continues in a
fresh worker.

The log: the worker's standard error goes to one file per worker,
`<first job id>.worker.log`, which the worker itself writes (no pipe, no
thread on this side that could fall behind); each job's own `<id>.log`
gets a copy of the part written while it ran. The worker writes its
`cell-done` line after its log lines, so the part is complete when the
line is read, and collect's post-mortem reads the job's log as today.

--isolation fork runs here too: the worker is a fork server (`python -m
harness worker --fork`, harness/forkserver.py), one per worker key, and
each cell is a child it forks, whose pid its `cell-start` line names. A
cell's timeout stops that child (SIGTERM, SIGKILL after the grace), not
the server, which goes on with the key's next cell; a child that died
(killed, or by the OOM killer) is told by its own exit status and pid,
as a process of its own would be. Ctrl-C stops the server, which passes
the signal on to its child and says `cell-done` once the child wrote
its partial result."""
import functools
import json
import os
import queue
import signal
import subprocess
import threading
import time
from pathlib import Path

from harness.gpu import clocks
from harness import workerlines

from dlrepro.run import collect, gpu_restore, groups, writer
from dlrepro.run.events import Events
from dlrepro.run.paths import JobPaths
from dlrepro.run.process import Exit, interrupts_held

OOM = "oom"


def worker_clock_state(worker):
    """The clock-state file a worker keeps for its group: named after its
    first cell, as its log is (harness.gpu.clocks.group_state_path)."""
    first = JobPaths.first_of_worker_log(worker.log_path)
    return Path(clocks.group_state_path(
        str(JobPaths(worker.log_path.parent, first).clock_state)))


def attempt_in_group(result, worker_pid, position):
    """What a cell's `oom` in a worker was, for the result of its measure
    alone: the worker's own isolation block where it wrote the result (a
    framework's out-of-memory error), else what the host knows (the kernel
    killed the worker: its pid, and the cells fed to it, this one
    included)."""
    isolation = result.get("isolation") or {}
    return {"status": OOM,
            "worker_pid": isolation.get("worker_pid", worker_pid),
            "position": isolation.get("position", position),
            "message": (result.get("error") or {}).get("message")}


def host_isolation(job, worker, child):
    """The isolation block of a worker's cell whose result the host wrote
    (the worker, or the cell's forked child, ended without one): where the
    cell stood, as the host knows it; what only the worker could say (the
    memory it held, the fork server's imports) null. None for a fork
    server's cell that no child ran: it had no process to name."""
    if worker is None:  # it could not be started
        return None
    fed = worker.fed
    pid = worker.said_pid or worker.proc.pid
    block = {"mode": job.isolation, "position": len(fed), "worker_pid": pid,
             "cells_before": fed[:-1]}
    if job.isolation == "fork":
        if child is None:
            return None
        return dict(block, pid=child, parent={
            "pid": pid, "process_start": None, "preloaded_at": None,
            "preload": None})
    return dict(block, memory_held={
        "rss_bytes": None, "gpus": None, "framework": None,
        "note": "not known: the worker ended without this cell's result"})


class Process:
    """One running worker: its process, its protocol lines as they come,
    its log, its launch (how it is stopped and told dead), the group's
    first job (what the runtime cleans up after it by), the job ids fed to
    it and its pid as it says it (in its container's namespace, as its
    results name it)."""

    def __init__(self, proc, log_path, launch, first):
        self.proc = proc
        self.log_path = log_path
        self.launch = launch
        self.first = first
        self.fed = []
        self.said_pid = None
        self.lines = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.proc.stdout:
            self.lines.put(line)
        self.lines.put(None)

    def feed(self, spec_path):
        """Ask for the next cell (its spec, a file of the run folder, named
        as the worker sees it); False when the worker is gone."""
        seen = f"{self.launch.results_dir}/{Path(spec_path).name}"
        try:
            self.proc.stdin.write(workerlines.command_line(seen))
            self.proc.stdin.flush()
            return True
        except (BrokenPipeError, OSError, ValueError):
            return False

    def next_event(self, deadline):
        """(word, fields) of the worker's next line; ("exit", {}) at its
        end; queue.Empty once `deadline` (monotonic) has passed."""
        line = self.lines.get(timeout=max(0.0, deadline - time.monotonic()))
        if line is None:
            return "exit", {}
        word, _, rest = line.strip().partition(" ")
        try:
            fields = json.loads(rest or "{}")
        except ValueError:
            return "noise", {"line": line}
        if word == "cell-start" and isinstance(fields, dict):
            self.said_pid = fields.get("worker_pid") or self.said_pid
        return word, fields

    def log_size(self):
        try:
            return self.log_path.stat().st_size
        except OSError:
            return 0

    def end(self, processes):
        """End of input: the worker exits after its cell; killed (its
        container too) if it has not after the grace, or at a Ctrl-C
        meanwhile (run.process.Processes.stop)."""
        processes.stop(self.proc, self.launch, ask=self._close_input)

    def _close_input(self):
        try:
            self.proc.stdin.close()
        except OSError:
            pass


class Grouped:
    """Runs jobs through workers, one group per worker: `launch(job)`
    takes the place of `life.run(job)` for a job of isolation `group`.
    `processes` (run.process.Processes) says how a worker is started and
    stopped, `life` (run.life.JobLife) prepares and finishes each job."""

    def __init__(self, processes, life, events=None):
        self.processes = processes
        self.life = life
        self.events = events or Events()
        self.worker = None
        self.key = None
        # Cells fed to the current worker, this one included.
        self.position = 0
        # The worker that ran the latest cell, gone or not, and the workers
        # that have ended, whose runtime cleanup (a container's removal)
        # waits until their last cell's post-mortem is done.
        self.last = None
        self.ended = []
        # The pid of the current cell's forked child (--isolation fork),
        # as its server names it and on this host (a container's differ).
        self.child = self.child_here = None

    def launch(self, job):
        """Run `job` in the group's worker to its final result; a cell
        that runs out of memory there is measured again alone."""
        if self.worker is not None and (
                groups.worker_key(job) != self.key
                or self.worker.proc.poll() is not None):
            self.close()
        result, exit = self._in_worker(job)
        if result["status"] != OOM or job.isolation == "fork":
            # A forked child started as fresh as a process of its own:
            # its `oom` is its own.
            return result
        attempt = attempt_in_group(result, exit.pid, self.position)
        if attempt["position"] == 1:
            # The first cell of a fresh worker ran as alone as a process of
            # its own: nothing held memory before it, and a retry would
            # measure the same.
            return result
        return self._alone_after(job, attempt)

    def _in_worker(self, job):
        """(the final result, the Exit) of `job`'s cell in the worker."""
        run_dir = self.life.run_dir
        container, spec = self.life.prepare(job)
        launch = self.life.runtime.launch(job, run_dir)
        try:
            exit = self._run_cell(job, launch)
            if self.last is not None:
                self.last.fed.append(job.id)
            return self.life.finish(
                job, exit, self._told_by(launch), container, spec,
                host_isolation(job, self.last, self.child)), exit
        finally:
            with interrupts_held():
                self.life.runtime.cleanup(job, run_dir)

    def _alone_after(self, job, attempt):
        """`job` measured again in a process of its own, as --isolation
        cell runs it, after its cell ran out of memory in the worker
        (`attempt`): the worker's allocators keep what the cells before it
        took (TensorFlow never gives GPU memory back, JAX preallocates), so
        only a cell that runs out alone too is `oom`. The worker is ended
        first (its memory goes with it), and the group goes on in a fresh
        one. The result says so in its isolation block."""
        self.close()
        self.events.log(
            f"{job.id}: out of memory in its group's worker (pid "
            f"{attempt['worker_pid']}, cell {attempt['position']}); "
            f"measuring it again alone")
        result = self.life.run(job)
        return writer.annotated(
            self.life.paths(job).result, "isolation",
            {"mode": "cell", "retried_alone_after": attempt}, result)

    def close(self):
        """End the current worker, if any, check that it restored the GPU
        clocks its group held, and clean up after every worker that has
        ended."""
        worker, self.worker = self.worker, None
        if worker is not None:
            worker.end(self.processes)
            self._check_clocks(worker)
            self.ended.append(worker)
        self._clean_up_ended()

    def _check_clocks(self, worker):
        """Once `worker` has ended: restore the GPU clocks its group held
        if it could not (killed, or dead before its end)."""
        message = gpu_restore.after_group(worker_clock_state(worker))
        if message:
            self.events.log(message)

    def _clean_up_ended(self):
        ended, self.ended = self.ended, []
        # A container's removal is not cut short by a Ctrl-C.
        with interrupts_held():
            for worker in ended:
                self.life.runtime.worker_cleanup(worker.first,
                                                 self.life.run_dir)

    def _told_by(self, launch):
        """The launch whose post_mortem tells how `launch`'s cell died: its
        worker's where the runtime gives the worker one (a container's, by
        its name), else the job's own (by the worker's pid)."""
        worker = self.last
        if worker is not None and worker.launch.post_mortem is not None:
            return launch._replace(post_mortem=worker.launch.post_mortem)
        return launch

    def _start(self, job, launch):
        self._clean_up_ended()
        self.last = None
        run_dir = self.life.run_dir
        runtime = self.life.runtime
        worker_launch = runtime.worker_launch(job, run_dir, launch)
        log_path = self.life.paths(job).worker_log
        try:
            with open(log_path, "ab") as log:
                proc = subprocess.Popen(
                    worker_launch.argv, env=worker_launch.env,
                    cwd=worker_launch.cwd, stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE, stderr=log, text=True, bufsize=1,
                    start_new_session=True, pass_fds=self.life.inherited,
                    preexec_fn=functools.partial(
                        self.processes.child_setup, os.getpid()))
        except OSError:
            runtime.worker_cleanup(job, run_dir)
            raise
        self.worker = self.last = Process(proc, log_path, worker_launch, job)
        self.key = groups.worker_key(job)

    def _run_cell(self, job, launch):
        """Feed `job`'s spec to the worker (started if none runs) and wait
        for its cell to end: an Exit for collect, as if the cell had run
        in a process of its own."""
        started = time.monotonic()
        if self.worker is None:
            try:
                self._start(job, launch)
            except OSError as exc:
                return Exit(None, False, 0.0, f"{launch.argv[0]}: "
                            f"{exc.strerror or exc}")
            self.position = 0
        worker = self.worker
        self.position += 1
        offset = worker.log_size()
        self.child = self.child_here = None
        try:
            status, timed_out = self._await_cell(job, launch, worker)
        except BaseException:
            self._stop(launch)
            raise
        finally:
            self._copy_log(worker, offset, job)
        return Exit(status, timed_out, time.monotonic() - started,
                    pid=self.child_here or worker.proc.pid)

    def _await_cell(self, job, launch, worker):
        """(exit status, timed out) of the cell: 0 once it is done, the
        worker's own status once it has gone."""
        spec_path = self.life.paths(job).spec
        deadline = time.monotonic() + job.timeout_s
        late = False
        if not worker.feed(spec_path):
            return self._gone(), False
        while True:
            try:
                word, fields = worker.next_event(deadline)
            except queue.Empty:
                if not late and collect.ended_on_disk(
                        self.life.paths(job).result):
                    # The deadline passed while this side could not read
                    # (Ctrl-Z, SIGSTOP: paused), the worker meanwhile
                    # ended the cell: its `cell-done` is on its way.
                    late = True
                    deadline = time.monotonic() + self.processes.grace_s
                    continue
                if self.child is not None:
                    return self._stop_child(worker, launch), True
                return self._stop(launch), True
            if word == "cell-start" and job.isolation == "fork":
                self.child = fields.get("pid")
                self.child_here = self._here(worker, self.child)
            if word == "cell-done":
                return fields.get("returncode", 0), False
            if word == "cell-invalid":
                self._say_invalid(job, fields.get("message", ""))
                return 2, False
            if word == "exit":
                return self._gone(), False

    def _gone(self):
        """A worker that ended by itself: its status."""
        worker, self.worker = self.worker, None
        self.ended.append(worker)
        status = worker.proc.wait()
        self._check_clocks(worker)
        return status

    def _stop(self, _launch):
        """Stop the worker mid-cell as the local engine stops a cell's
        process (it ends the cell with what it measured); its status. By
        the worker's own launch, not the cell's: a container runtime's
        worker runs in the group's container, which the cell's launch does
        not name."""
        worker, self.worker = self.worker, None
        if worker is None:
            return None
        self.ended.append(worker)
        self.processes.stop(worker.proc, worker.launch)
        self._check_clocks(worker)
        return worker.proc.returncode

    def _stop_child(self, worker, launch):
        """Stop a fork server's cell (its timeout): SIGTERM to its child,
        which ends the cell as `run` does, SIGKILL after the grace; the
        server reaps it and says `cell-done`, and goes on. The child's
        exit status; the server's, should it not answer (stopped too)."""
        for signum in (signal.SIGTERM, signal.SIGKILL):
            try:
                (worker.launch.signal or os.kill)(self.child, signum)
            except (ProcessLookupError, OSError,
                    subprocess.SubprocessError):
                pass  # ended meanwhile: its `cell-done` is on its way
            deadline = time.monotonic() + self.processes.grace_s
            while True:
                try:
                    word, fields = worker.next_event(deadline)
                except queue.Empty:
                    break
                if word == "cell-done":
                    return fields.get("returncode")
                if word == "exit":
                    return self._gone()
        return self._stop(launch)

    @staticmethod
    def _here(worker, pid):
        """The host's pid of the server's child `pid`."""
        if pid is None or worker.launch.host_pid is None:
            return pid
        return worker.launch.host_pid(pid)

    def _say_invalid(self, job, message):
        # What `run` prints for a spec it refuses, so that collect's
        # post-mortem quotes it.
        with open(self.life.paths(job).log, "a") as handle:
            handle.write(f"harness: error: {message}\n")

    def _copy_log(self, worker, offset, job):
        """The part of the worker's log written during `job`'s cell, into
        the job's own log."""
        try:
            with open(worker.log_path, "rb") as source:
                source.seek(offset)
                part = source.read()
            with open(self.life.paths(job).log, "ab") as log:
                log.write(part)
        except OSError:
            pass
