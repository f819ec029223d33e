"""Slurm's side of a node: its NodeEnv, filled from the SLURM_* variables
Slurm gives each task (the one place on the host side that reads them).
An sbatch script runs the node entry on every node of a job:

    python -m dlrepro.run.node slurm RUN_DIR SUBMISSION_JSON

which asks the Slurm engine (SlurmEngine.node_env, this from_slurm) for
this node's NodeEnv.
"""
import re
from types import MappingProxyType

from dlrepro.run.nodeenv import NodeEnv

# "prefix[ranges]rest": one bracket group of a host list item.
_GROUP = re.compile(r"([^\[]*)\[([^\]]*)\](.*)$")


def from_slurm(environ):
    """The NodeEnv of a Slurm task whose environment is `environ`."""
    task = environ.get("SLURM_ARRAY_TASK_ID")
    return NodeEnv(
        engine="slurm",
        job_id=environ.get("SLURM_JOB_ID"),
        array_id=environ.get("SLURM_ARRAY_JOB_ID"),
        task=int(task) if task is not None else None,
        rank=int(environ.get("SLURM_NODEID", "0")),
        hosts=tuple(expand_hostlist(environ.get("SLURM_JOB_NODELIST", ""))),
        node=environ.get("SLURMD_NODENAME"),
        partition=environ.get("SLURM_JOB_PARTITION"),
        gpus=environ.get("CUDA_VISIBLE_DEVICES",
                         environ.get("SLURM_JOB_GPUS")),
        variables=MappingProxyType({
            k: v for k, v in sorted(environ.items())
            if k.startswith("SLURM")}))


def expand_hostlist(text):
    """Slurm's compressed host list ("n[1-3,7],gpu[01-02]-ib") as host
    names in its order, as `scontrol show hostnames` gives them. What is
    not a range is kept as written."""
    hosts = []
    for item in _top_level_items(text):
        hosts += _expand_item(item)
    return hosts


def _top_level_items(text):
    """`text` split at the commas outside brackets."""
    items, depth, start = [], 0, 0
    for at, char in enumerate(text):
        depth += {"[": 1, "]": -1}.get(char, 0)
        if char == "," and depth == 0:
            items.append(text[start:at])
            start = at + 1
    items.append(text[start:])
    return [item.strip() for item in items if item.strip()]


def _expand_item(item):
    match = _GROUP.match(item)
    if match is None:
        return [item]
    prefix, ranges, rest = match.groups()
    tails = _expand_item(rest) if rest else [""]
    return [prefix + number + tail
            for number in _numbers(ranges) for tail in tails]


def _numbers(ranges):
    """"1-3,07" -> 1 2 3 07: a range keeps its lower bound's zero padding."""
    for part in ranges.split(","):
        low, dash, high = part.strip().partition("-")
        if not (dash and low.isdigit() and high.isdigit()):
            yield part.strip()
            continue
        for number in range(int(low), int(high) + 1):
            yield str(number).zfill(len(low))

