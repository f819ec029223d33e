"""A job: one harness process that ends in one result file.

Bench cells and convergence runs are both jobs; what differs between them
is their kind (run/kinds.py). Everything else (run folders, runtimes,
engines, collection, resume, progress) treats them alike.
"""
from typing import NamedTuple, Optional

from dlrepro.run.kinds import KINDS


class Placement(NamedTuple):
    """What a runtime needs to know to start a job: its image or
    environment, its device and how much of the host it gets."""
    framework: str
    profile: str
    device: str
    threads: Optional[int]
    gpus: int
    clock_policy: str

    @property
    def target(self):
        return (self.framework, self.profile)


class Job(NamedTuple):
    id: str
    kind: str
    # The harness's spec: a cell (bench) or a convergence spec. Two jobs
    # with equal specs measure the same thing (resume relies on it).
    spec: dict
    timeout_s: int
    placement: Placement
    # Host folders the job reads, mounted read-only (a convergence run's
    # data).
    mounts: tuple = ()
    # Why the job cannot run on this host: it is recorded `unsupported`
    # without starting anything.
    skip_reason: Optional[str] = None
    # How a GPU cell's profile was chosen (dlrepro.bench.gpuprofile), for
    # its result; not part of what it measures.
    profile_choice: Optional[dict] = None
    # Which process of its cell the job is (--repeat: 1..N); with
    # --isolation group each process of a group has a worker of its own.
    process: int = 1
    # "cell" (a process of its own) or "group" (a worker shared with the
    # jobs of equal process-wide fields): dlrepro.run.groups.assign.
    isolation: str = "cell"

    @property
    def type(self):
        """The job's kind (run/kinds.py): what differs between kinds."""
        return KINDS[self.kind]

    @property
    def harness_command(self):
        return self.type.harness_command

    @property
    def spec_key(self):
        return self.type.spec_key

    @property
    def nodes(self):
        """How many nodes the job spans (a multi-node convergence run)."""
        return self.type.nodes(self.spec)
