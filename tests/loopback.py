"""Several "nodes" of the harness on this machine's loopback: the cluster
object the Slurm executor writes per node, a free range of ports for it,
and MXNet's traces of its workers' first steps (test_multinode_harness_*.py
and docs/measurements/multinode-mxnet-2026-12-02/multinode_repeat.py).
Standard library and harness only."""
import json
import socket
from pathlib import Path

from harness import spec as hspec
# Each MXNet worker's first steps, key by key, to trace_path(PREFIX, rank)
# (TRACE_ENV names PREFIX).
from harness.frameworks.mxnet.parallel import (  # noqa: F401
    TRACE_ENV, trace_path)


def free_port(span=hspec.CLUSTER_PORTS):
    """A base port whose `span` ports are free now (the frameworks may use
    port..port+span-1)."""
    for _ in range(50):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            base = probe.getsockname()[1]
        if base + span < 65536 and all(_free(base + i) for i in range(span)):
            return base
    raise RuntimeError("no free port range")


def _free(port):
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def cluster(nodes, rank, port, timeout_s=None):
    """The cluster object the Slurm executor writes per node, on this
    machine's loopback."""
    described = {"nodes": nodes, "node_rank": rank,
                 "hosts": ["node{}".format(r) for r in range(nodes)],
                 "addresses": ["127.0.0.1"] * nodes,
                 "coordinator": "127.0.0.1", "port": port, "interface": "lo",
                 "network": "loopback of the test machine (one host)"}
    if timeout_s is not None:
        described["timeout_s"] = timeout_s
    return described


def first_steps(prefix, nodes=2):
    """The MXNet workers' traces of their first steps, per node (empty
    where there is none)."""
    traced = []
    for rank in range(nodes):
        path = Path(trace_path(prefix, rank))
        traced.append([json.loads(line) for line in
                       path.read_text().splitlines()] if path.exists()
                      else [])
    return traced


def trace_lines(traced):
    """Per step and key: both nodes' own gradient sums, the pulled sums
    (which must equal their total), the largest pulled magnitude and
    each node's weights' largest magnitude after the step."""
    lines = []
    for steps in zip(*traced):
        for keys in zip(*(step["keys"] for step in steps)):
            own = [k["own_gradient"]["sum"] for k in keys]
            lines.append(
                "  step {} key {} {}: own sums {} (total {:.6g}), pulled "
                "sums {}, pulled max {}, weights max {}".format(
                    steps[0]["step"], keys[0]["key"], keys[0]["name"],
                    " ".join("{:.6g}".format(v) for v in own), sum(own),
                    " ".join("{:.6g}".format(k["pulled_sum"]["sum"])
                             for k in keys),
                    " ".join("{:.3g}".format(k["pulled_sum"]["max_abs"])
                             for k in keys),
                    " ".join("{:.3g}".format(k["weights_after"]["max_abs"])
                             for k in keys)))
    return lines
