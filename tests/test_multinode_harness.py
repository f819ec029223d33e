"""Multi-node data parallelism, the harness's side (issue 12): the spec's
nodes field and cluster object, and real multi-node training on this machine:
N "node" processes of `python -m harness converge` on 127.0.0.1 / lo, each
with its own cluster object and result (docs/multinode.md)."""
import pytest

from harness import spec as hspec
from harness.errors import HarnessError

CONV = {"framework": "pytorch", "profile": "cpu", "network": "fcn-r",
        "device": "cpu", "workers": 2, "global_batch_size": 8,
        "epochs": 1, "seed": 0, "threads": None, "runtime": "native",
        "clock_policy": "observe", "target_loss": None,
        "data": {"source": "synthetic"}}


def cluster_object(nodes, rank, port, timeout_s=None):
    """What the Slurm executor writes per node, on this machine's loopback."""
    cluster = {"nodes": nodes, "node_rank": rank,
               "hosts": ["node{}".format(r) for r in range(nodes)],
               "addresses": ["127.0.0.1"] * nodes,
               "coordinator": "127.0.0.1", "port": port, "interface": "lo",
               "network": "loopback of the test machine (one host)"}
    if timeout_s is not None:
        cluster["timeout_s"] = timeout_s
    return cluster


# --- the spec ------------------------------------------------------------------

def test_nodes_is_optional_and_splits_the_workers():
    assert hspec.validate_convergence(CONV)["nodes"] == 1
    assert hspec.validate_convergence(dict(CONV, nodes=2))["nodes"] == 2
    with pytest.raises(HarnessError, match="^2 workers do not split evenly "
                       "over 3 nodes; workers is the total, a multiple of "
                       "nodes$"):
        hspec.validate_convergence(dict(CONV, nodes=3, global_batch_size=6))
    with pytest.raises(HarnessError, match="^nodes must be an integer >= 1"):
        hspec.validate_convergence(dict(CONV, nodes=0))


def test_the_cluster_object_is_checked():
    two = hspec.validate_convergence(dict(CONV, nodes=2))
    one = hspec.validate_convergence(CONV)
    assert hspec.validate_cluster(None, one) is None
    with pytest.raises(HarnessError, match="^a multi-node run needs its "
                       "cluster \\(the Slurm executor writes it\\)$"):
        hspec.validate_cluster(None, two)
    good = cluster_object(2, 1, 29500)
    assert hspec.validate_cluster(good, two)["timeout_s"] == 300
    assert hspec.validate_cluster(dict(good, timeout_s=20), two)[
        "timeout_s"] == 20
    for bad, message in (
            (dict(good, nodes=3), "cluster.nodes is 3, the convergence spec "
                                  "asks for 2 nodes"),
            (dict(good, node_rank=2), "cluster.node_rank must be below nodes"),
            (dict(good, hosts=["a"]), "cluster.hosts must list 2 names"),
            (dict(good, addresses=["127.0.0.1", "n2"]),
             "cluster.addresses must be IPv4 addresses, got 'n2'"),
            (dict(good, coordinator="10.0.0.9"),
             "cluster.coordinator must be the address of rank 0"),
            (dict(good, port=65530), "cluster.port must be an integer in "
                                     "1..65526"),
            (dict(good, interface=""), "cluster.interface must be"),
            (dict(good, network=None), "cluster.network must say"),
            (dict(good, timeout_s=0), "cluster.timeout_s must be a positive"),
            (dict(good, extra=1), "cluster fields: missing none, unknown "
                                  "\\['extra'\\]")):
        with pytest.raises(HarnessError, match="^" + message):
            hspec.validate_cluster(bad, two)
