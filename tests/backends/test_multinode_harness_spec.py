"""Multi-node data parallelism, the harness's side (issue 12), no training:
the spec's nodes field and cluster object, which frameworks run across
nodes, a node without its cluster, TensorFlow's Slurm resolver
(docs/multinode.md). Real training: test_multinode_harness_training.py and
_faults.py."""
import json
import os
import subprocess

import jsonschema
import pytest

from loopback import cluster as cluster_object, free_port
from multinodeenv import MULTI_NODE, conv_spec, finish, mnist, start_node
from harness import frameworks
from harness import spec as hspec
from harness.errors import HarnessError


CONV = {"framework": "pytorch", "profile": "cpu", "network": "fcn-r",
        "device": "cpu", "workers": 2, "global_batch_size": 8,
        "epochs": 1, "seed": 0, "threads": None, "runtime": "native",
        "clock_policy": "observe", "target_loss": None,
        "data": {"source": "synthetic"}}


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



# --- which frameworks run across nodes: decided before any framework loads -----

def test_frameworks_declare_multi_node_support():
    """The parallel modules import no framework: the host's Python reads
    their contract (CNTK and Caffe without their images)."""
    refusals = dict((name, frameworks.multi_node_refusal(
        frameworks.load(name, "parallel"), 2, 1, "cpu"))
        for name in frameworks.NAMES)
    assert [n for n, r in sorted(refusals.items()) if r is None] == \
        sorted(MULTI_NODE)
    assert refusals["cntk"].startswith("CNTK's data parallelism is one MPI "
                                       "job started by mpirun")
    assert "ssh or Slurm's srun" in refusals["cntk"]
    assert refusals["caffe"].startswith("Caffe 1.0's data parallelism is one "
                                        "machine's GPUs")
    for name in frameworks.NAMES:
        module = frameworks.load(name, "parallel")
        # One node is never refused on this ground.
        assert frameworks.multi_node_refusal(module, 1, 2, "cpu") is None
    tf = frameworks.load("tensorflow", "parallel")
    assert frameworks.multi_node_refusal(tf, 2, 2, "cpu").startswith(
        "2 workers per node asked for: TensorFlow's MultiWorkerMirrored"
        "Strategy runs one replica per worker process on the CPU")
    assert frameworks.transport(tf, "cpu", "eth0").startswith(
        "gRPC over eth0")


def test_a_refused_layout_ends_unsupported_with_the_reason(
        root, mnist, tmp_path, framework_python, schema):
    """2 nodes x 2 TensorFlow CPU workers: a result, status unsupported,
    before TensorFlow starts a server."""
    out = tmp_path / "node0.json"
    conv = conv_spec("tensorflow", mnist, 4, 2)
    status, err = finish(start_node(framework_python("tensorflow"), root,
                                    conv, cluster_object(2, 0, free_port()),
                                    out), 300)
    assert status == 0, err
    result = json.loads(out.read_text())
    jsonschema.validate(result, schema)
    assert result["status"] == "unsupported"
    assert result["error"]["message"].startswith("2 workers per node asked "
                                                 "for: TensorFlow's")
    block = result["convergence"]
    assert (block["nodes"], block["workers_per_node"]) == (2, 2)
    assert block["cluster"]["node_rank"] == 0
    assert block["cluster"]["transport"].startswith("gRPC over lo")


def test_nodes_without_a_cluster_exit_2_in_one_line(root, mnist, tmp_path,
                                                     framework_python):
    out = tmp_path / "node0.json"
    status, err = finish(start_node(framework_python("pytorch"), root,
                                    conv_spec("pytorch", mnist, 2, 2), None,
                                    out), 120)
    assert status == 2
    assert err.splitlines() == ["harness: error: a multi-node run needs its "
                                "cluster (the Slurm executor writes it)"]
    assert not out.exists()


SLURM_CHECK = """
import json, sys
from harness.errors import HarnessError
from harness.frameworks import dataparallel
from harness.frameworks.tensorflow import parallel
cluster = json.loads(sys.argv[1])
try:
    print(json.dumps(parallel.cluster_workers(cluster)))
except HarnessError as exc:
    print(json.dumps(str(exc)))
"""


@pytest.mark.parametrize("hosts, nodelist, rank, expected", [
    (["n1", "n2"], "n[1-2]", 1, [["10.0.0.1:7000", "10.0.0.2:7000"], 1]),
    # Slurm ranks n2 before n10, SlurmClusterResolver sorts n10 first.
    (["n2", "n10"], "n[2,10]", 0, "Slurm's step (SlurmClusterResolver: "
     "workers ['n10', 'n2'], this task 0) does not match the cluster object "
     "(hosts ['n2', 'n10'], node_rank 0): one task per node, nodes in rank "
     "order"),
])
def test_tensorflow_reads_slurms_step_through_its_resolver(
        hosts, nodelist, rank, expected, root, framework_python):
    """Under Slurm, TensorFlow's SlurmClusterResolver reads the step's
    variables; its node names become the cluster object's addresses."""
    cluster = dict(cluster_object(2, rank, 7000), hosts=hosts,
                   addresses=["10.0.0.1", "10.0.0.2"], coordinator="10.0.0.1")
    env = dict(os.environ, PYTHONPATH=str(root), SLURM_PROCID=str(rank),
               SLURM_STEP_NUM_TASKS="2", SLURM_STEP_NODELIST=nodelist,
               SLURM_STEP_TASKS_PER_NODE="1(x2)")
    proc = subprocess.run(
        [str(framework_python("tensorflow")), "-s", "-c", SLURM_CHECK,
         json.dumps(dict(cluster, timeout_s=20))],
        cwd=root, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        universal_newlines=True)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout.splitlines()[-1]) == expected
