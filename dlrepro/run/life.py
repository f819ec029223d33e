"""One job's life here, from prepared to its final result, written once
for every place a job runs: the local engine, the grouped runner, and the
node entry a remote engine (Slurm) starts on its nodes.

    unrunnable(job)  a job that cannot run here ends at once
    prepare(job)     its old result gone, its spec file written
    run(job)         prepare, launch its process, wait, finish
    finish(...)      its final result from its ended process (or from its
                     worker's word): collected, GPU clocks restored, written

The pipeline makes one for a run and hands it to the engine in the
Context; the node entry makes its own. Neither passes callbacks."""
import json
from pathlib import Path

from harness import resultfile

from dlrepro import matrix as matrix_mod
from dlrepro.run import collect, gpu_restore, store, writer
from dlrepro.run.paths import JobPaths
from dlrepro.run.process import interrupts_held

STACK_KEYS = ("framework_version", "python", "cuda", "cudnn", "nccl", "sass",
              "ptx", "min_driver")


def spec_file(job, container, matrix):
    """What the harness is told: the job's spec plus facts it cannot know
    itself."""
    entry = matrix_mod.entry(matrix, *job.placement.target)
    extra = {"profile_choice": job.profile_choice} if job.profile_choice \
        else {}
    return {
        **extra,
        job.spec_key: job.spec,
        "container": container,
        # Relative to the result file, so it lands on the host side of a
        # container's mount: the GPU clock state to restore after a crash.
        "clock_state": JobPaths.clock_state_name(job.id),
        "stack": {key: entry[key] for key in STACK_KEYS},
    }


def _holds(path, spec):
    """Whether the spec file says `spec` already: a Slurm task finds the
    one its submitter wrote, and does not write it a second time."""
    try:
        return json.loads(path.read_text()) == json.loads(
            resultfile.dumps(spec))
    except (OSError, ValueError):
        return False


run_id_in = store.run_id_or_none


class JobLife:
    """Jobs of one run taken here from prepared to their final results.

    `runtime`: what they run in; `run_dir`: where their files go;
    `processes` (run.process.Processes): how a process is run and stopped;
    `cannot`: {runtime target: (reason it is unsupported, setup failure)}
    found while preparing the runtime; `write`: whether the host writes a
    result it changed (False on a node, whose entry adds where the job ran
    and writes it once); `run_id`: the run's, which every spec file and so
    every result carries (run.json's in `run_dir` where not given: a node's
    part of a job on several nodes writes into a folder below the run's);
    `held`: the descriptor that holds the run folder (runfolder.locked),
    which every process a job starts here inherits (`inherited`): the
    folder stays locked while one of them lives, so that a later session
    never takes it while a process of this one may still write there."""

    def __init__(self, runtime, run_dir, matrix, processes, cannot=None,
                 write=True, run_id=None, held=None):
        self.runtime = runtime
        self.inherited = () if held is None else (held,)
        self.run_id = run_id or run_id_in(run_dir)
        self.run_dir = Path(run_dir)
        self.matrix = matrix
        self.processes = processes
        self.cannot = cannot or {}
        self.write = write

    def paths(self, job):
        return JobPaths(self.run_dir, job.id)

    def unrunnable(self, job):
        """A job that cannot run here ends at once: `unsupported` (its own
        skip reason, or the runtime's) or `error` (its setup failed). Its
        result, written; None when it can run."""
        reason, failure = self.cannot.get(job.placement.target, (None, None))
        return writer.unrunnable(self.run_dir, job, reason, failure)

    def prepare(self, job, extra=None):
        """Before a job starts: its old result gone (a retried job must
        never be judged by it), its spec file written (with `extra`'s
        keys: a multi-node job's "cluster"). (container, spec)."""
        paths = self.paths(job)
        if paths.result.exists():
            paths.result.unlink()
        container = self.runtime.describe(job.placement.target)
        # The run's id goes into the result, which then belongs to this run.
        spec = dict(spec_file(job, container, self.matrix),
                    **({"run_id": self.run_id} if self.run_id else {}),
                    **(extra or {}))
        if not _holds(paths.spec, spec):
            resultfile.write_atomic(str(paths.spec), spec)
        return container, spec

    def run(self, job, extra=None):
        """Run one job here to its final result, in its own process (a
        node's part of a job on several nodes: `extra` adds its "cluster"
        to the spec file)."""
        container, spec = self.prepare(job, extra)
        launch = self.runtime.launch(job, self.run_dir)
        try:
            exit = self.processes.run(launch, self.paths(job).log,
                                      job.timeout_s, self.inherited)
            return self.finish(job, exit, launch, container, spec)
        finally:
            # A container's removal is not cut short by a Ctrl-C.
            with interrupts_held():
                self.runtime.cleanup(job, self.run_dir)

    def finish(self, job, exit, launch, container, spec, isolation=None):
        """A job's final result once its process ended (`exit`, an Exit),
        or once a group's worker said its cell was done: collected, its
        GPU clocks restored, written when the host changed it. A worker's
        cell whose result the host writes gets `isolation`, where the
        cell stood in its worker."""
        result_path = self.paths(job).result
        result, changed = collect.collect(job, self.run_dir, exit, launch,
                                          container, self.run_id)
        if isolation and not result.get("isolation"):
            result["isolation"] = isolation
            changed = True
        # A harness killed mid-job cannot restore the GPU clocks it
        # changed: the host does, from the state file it left on this side.
        message = gpu_restore.after_cell(result_path, spec["clock_state"])
        if message:
            result["warnings"].append(message)
            changed = True
        if changed and self.write:
            writer.write_result(result_path, result)
        return result
