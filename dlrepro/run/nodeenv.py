"""Where a process runs one job, or one node's part of it, as one object:
the engine that started the process fills a NodeEnv, and everything on the
node side (the node entry, dlrepro.run.node; the cluster object; the
runtimes) reads that object and never the engine's own variables.

Slurm fills it from SLURM_* (SlurmEngine.node_env: engines/slurm/environment.py); a run on
this host is local(). A Kubernetes engine would fill the same fields from
its pod: the job's name as `job_id`, the indexed job's completion index as
`task` and `rank`, the pods' hostnames (a headless service) as `hosts`,
and the variables its frameworks read as `variables`.
"""
import socket
from types import MappingProxyType
from typing import Mapping, NamedTuple, Optional, Tuple

NO_VARIABLES = MappingProxyType({})


class NodeEnv(NamedTuple):
    # The engine that started this process ("local", "slurm").
    engine: str
    # The engine's id of the job this process is part of (Slurm: the job
    # id, the base of a multi-node job's ports).
    job_id: Optional[str] = None
    # The submission the job came in (Slurm: the array job id).
    array_id: Optional[str] = None
    # Which of the submission's jobs this is (Slurm: the array task id).
    task: Optional[int] = None
    # This node's index among the job's nodes, and the job's nodes'
    # hostnames in that order.
    rank: int = 0
    hosts: Tuple[str, ...] = ()
    # This node's name as the engine knows it.
    node: Optional[str] = None
    partition: Optional[str] = None
    # The GPUs this process was given (a CUDA_VISIBLE_DEVICES list).
    gpus: Optional[str] = None
    # The engine's own variables, name -> value: what a result records as
    # the allocation, and what a runtime passes into the harness of a job
    # on several nodes (frameworks detect their cluster from them).
    variables: Mapping[str, str] = NO_VARIABLES

    @property
    def nodes(self):
        """How many nodes the job runs on."""
        return max(len(self.hosts), 1)


def local():
    """This host, one node, no engine variables."""
    host = socket.gethostname()
    return NodeEnv(engine="local", hosts=(host,), node=host)


LOCAL = local()


# The result's block of where its job ran, written by the node entry (or by
# the engine's watcher for a job whose node side wrote none): the engine's
# name and its ids, the node, the allocation, the job's window on the node.
# Results before it was engine-neutral kept it under "slurm".
BLOCK = "engine"
OLD_BLOCK = "slurm"


def block_of(result):
    """A result's engine block ({} where it has none), under either key."""
    result = result or {}
    return result.get(BLOCK) or result.get(OLD_BLOCK) or {}

