"""The two-node Slurm cluster the multi-node tests use (.ci/slurm-nodes.sh:
nodes n1 and n2, each in its own network namespace; clients reach it with
SLURM_CONF): its constants, its environment, the module fixture that
skips (or fails, with DLREPRO_REQUIRE_SLURM_NODES) without it, and the
processes in a node's namespace."""
import os
import shutil
import subprocess
from pathlib import Path

import pytest

import needs

SLURM_CONF = "/etc/slurm-nodes/slurm.conf"
NODES = ("n1", "n2")
ADDRESSES = ("10.213.0.11", "10.213.0.12")


def slurm_env():
    return dict(os.environ, SLURM_CONF=SLURM_CONF)


@pytest.fixture(scope="module")
def slurm_nodes():
    """The two-node cluster or a skip: a module asks for it with
    pytestmark (usefixtures)."""
    reason = None
    if shutil.which("sinfo") is None:
        reason = "no Slurm client commands (sinfo) on PATH"
    elif not Path(SLURM_CONF).exists():
        reason = f"no {SLURM_CONF}"
    else:
        proc = subprocess.run(["sinfo", "-h", "-N", "-o", "%N %T"],
                              text=True, capture_output=True, timeout=30,
                              env=slurm_env())
        states = dict(line.split()[:2] for line in proc.stdout.splitlines()
                      if len(line.split()) >= 2)
        if proc.returncode != 0 or not all(
                states.get(n, "").rstrip("*") in ("idle", "mixed",
                                                  "allocated")
                for n in NODES):
            reason = (f"nodes n1 and n2 not up (sinfo: "
                      f"{(proc.stderr or proc.stdout).strip() or 'nothing'})")
    if reason is not None:
        needs.missing(reason, ".ci/slurm-nodes.sh",
                      "DLREPRO_REQUIRE_SLURM_NODES")


def node_pids(node, needle):
    """Processes in a node's network namespace whose command line holds
    `needle`."""
    proc = subprocess.run(["ip", "netns", "pids", node], text=True,
                          capture_output=True)
    found = []
    for pid in proc.stdout.split():
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if needle in b" ".join(argv).decode(errors="replace"):
            found.append(int(pid))
    return found
