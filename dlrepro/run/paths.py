"""The run folder's names, written once. Every module that opens a file of
a run folder asks this one for its name (tests/repo/test_paths.py fails when a
suffix below is spelled anywhere else in dlrepro/), as submitit's
`JobPaths` does for its jobs.

    <run>/run.json                      the run's record (store reads it,
                                        runfolder writes it)
    <run>/<job>.json                    the job's result (harness schema v1)
    <run>/<job>.spec.json               what the harness was asked to run
    <run>/<job>.log                     the job's stdout and stderr
    <run>/<job>.invalid.json            an invalid result set aside
    <run>/<job>.clock-state.json        the GPU clocks a cell changed, to
                                        restore after a crash
    <run>/<job>.worker.log              a group's worker's log, named after
                                        its first job
    <run>/<job>.worker.clock-state.json the clocks a group's worker holds
                                        (harness.gpu.clocks.group_state_path)
    <run>/nodes/<job>.node<r>.json      node r's side result of a job on
                                        several nodes
    <run>/convergence.json              a convergence run's summary
"""
from pathlib import Path, PurePosixPath

RUN_RECORD = "run.json"
CONVERGENCE_SUMMARY = "convergence.json"
# Side results of the nodes r > 0 of a job on several nodes.
SIDE_DIR = "nodes"
RESULT = ".json"
SPEC = ".spec.json"
LOG = ".log"
INVALID = ".invalid.json"
CLOCK_STATE = ".clock-state.json"
WORKER_LOG = ".worker.log"
# The glob of every clock-state file of a run, cells' and workers'.
CLOCK_STATE_GLOB = "*" + CLOCK_STATE
# The longest name written beside a job's id: a side job's clock state,
# "<id>.node<rank>.clock-state.json", the rank given four digits.
LONGEST_SUFFIX = len(".node9999" + CLOCK_STATE)


class JobPaths:
    """One job's files in a folder: the host's run folder (a Path), or the
    same folder as a container sees it (`JobPaths("/results", id)`: its
    names are POSIX paths whatever the host)."""

    def __init__(self, folder, job_id):
        self.folder = Path(folder)
        self.job_id = job_id

    def _named(self, suffix):
        return self.folder / f"{self.job_id}{suffix}"

    @property
    def result(self):
        return self._named(RESULT)

    @property
    def spec(self):
        return self._named(SPEC)

    @property
    def log(self):
        return self._named(LOG)

    @property
    def invalid(self):
        return self._named(INVALID)

    @property
    def clock_state(self):
        return self._named(CLOCK_STATE)

    @property
    def worker_log(self):
        return self._named(WORKER_LOG)

    def side(self, rank):
        """Node `rank`'s side result of a job on several nodes."""
        return self.folder / SIDE_DIR / f"{self.job_id}.node{rank}{RESULT}"

    def sides(self):
        """Every file of the other nodes' parts of this job, results or
        not (a resubmitted job's from its earlier try)."""
        return (self.folder / SIDE_DIR).glob(f"{self.job_id}.node*")

    @staticmethod
    def invalid_of(result):
        """Where an invalid result file `result` is set aside."""
        result = Path(result)
        return result.with_name(result.name[:-len(RESULT)] + INVALID)

    # Names relative to the folder: what run.json's entries and the spec
    # file record, so they hold wherever the folder is seen from.
    @staticmethod
    def result_name(job_id):
        return f"{job_id}{RESULT}"

    @staticmethod
    def log_name(job_id):
        return f"{job_id}{LOG}"

    @staticmethod
    def clock_state_name(job_id):
        return f"{job_id}{CLOCK_STATE}"

    @staticmethod
    def side_job_id(job_id, rank):
        """The id of node `rank`'s part of a job on several nodes."""
        return f"{job_id}.node{rank}"

    @staticmethod
    def first_of_worker_log(path):
        """The first job of the worker whose log is `path`."""
        return Path(path).name[:-len(WORKER_LOG)]


def seen_in(folder, job_id):
    """`job_id`'s names in `folder` as a process inside a container sees
    it: POSIX strings."""
    folder = PurePosixPath(str(folder))
    return {"spec": str(folder / f"{job_id}{SPEC}"),
            "result": str(folder / f"{job_id}{RESULT}")}


def run_record(run_dir):
    return Path(run_dir) / RUN_RECORD
