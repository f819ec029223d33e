"""Multi-node data parallelism, the harness's side (issue 12): the spec's
nodes field and cluster object, and real multi-node training on this machine:
N "node" processes of `python -m harness converge` on 127.0.0.1 / lo, each
with its own cluster object and result (docs/multinode.md)."""
import json
import math
import os
import signal
import socket
import subprocess
import time

import jsonschema
import pytest

import processes
import waits
from benchmarks.multinode_repeat import cluster as cluster_object, free_port
from dlrepro.converge import datasets as dd
from dlrepro.converge import plan as conv_plan
from harness import frameworks
from harness import spec as hspec
from harness.errors import HarnessError
from harness.frameworks import dataparallel

# The tolerance of tests/convergeenv.py and its reasoning: 2 nodes x 1
# worker see the batches of 1 node x 2 workers, gradients averaged over the
# global batch, so the curves differ only by float32 reduction order.
RELATIVE_TOLERANCE = 1e-3
# The smallest real-data run tests/test_converge_training.py trains, one
# epoch.
TRAIN, TEST, BATCH = 1024, 256, 64
# Frameworks that train across nodes here (MULTI_NODE True): all but CNTK
# and Caffe.
MULTI_NODE = ("pytorch", "tensorflow", "jax", "mxnet")

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


# --- real training: N node processes on this machine ---------------------------

@pytest.fixture(scope="module")
def mnist(tmp_path_factory):
    folder = tmp_path_factory.mktemp("data")
    return folder, dd.generate("mnist", folder, TRAIN, TEST, seed=11)


def conv_spec(framework, mnist, workers, nodes, seed=5):
    """Two threads on this machine in all: the 1-node run's workers share
    them, each of 2 "nodes" (which share this machine) takes one."""
    data_dir, checksums = mnist
    spec = conv_plan.plan([framework], ["fcn-r"], [workers],
                          global_batch=BATCH, epochs=1, seed=seed,
                          threads=2 // nodes,
                          data_dir=data_dir, checksums=checksums,
                          runtime="native", timeout=900)[0].spec
    return dict(spec, nodes=nodes)


def start_node(python, root, conv, cluster, out, log=None):
    """One node's `python -m harness converge`, as the Slurm executor
    starts it on each node; its output piped, or to the file `log`."""
    spec_path = out.with_suffix(".spec.json")
    spec_path.write_text(json.dumps({"convergence": conv, "container": None,
                                     "cluster": cluster}))
    env = dict(os.environ, PYTHONPATH=str(root))
    sink = subprocess.PIPE if log is None else open(str(log), "w")
    try:
        return processes.start([str(python), "-s", "-m", "harness",
                                "converge", "--spec", str(spec_path),
                                "--out", str(out)],
                               cwd=root, env=env, stdout=sink,
                               stderr=subprocess.STDOUT if log else sink,
                               universal_newlines=True)
    finally:
        if log is not None:
            sink.close()


def finish(process, limit):
    try:
        _, err = process.communicate(timeout=limit)
    except subprocess.TimeoutExpired:
        process.kill()
        _, err = process.communicate()
        raise AssertionError("a node ran past {} s: {}".format(limit, err))
    return process.returncode, err


# The rendezvous timeout of runs whose nodes all come: it only ever ends a
# run whose peer never comes, so a long one costs these nothing, while a
# loaded machine can take a node past 120 s to start (import the framework,
# read the data, start ps-lite's scheduler and server for MXNet).
RENDEZVOUS_S = 600


def run_nodes(python, root, conv, tmp, nodes, timeout_s=RENDEZVOUS_S,
              limit=900):
    """Results of all nodes (rank order) and the wall time."""
    port = free_port()
    outs = [tmp / "node{}.json".format(r) for r in range(nodes)]
    start = time.monotonic()
    started = [start_node(python, root, conv,
                          cluster_object(nodes, r, port, timeout_s), out)
               for r, out in enumerate(outs)]
    try:
        ends = [finish(p, limit) for p in started]
    finally:
        # One node past its limit leaves the others waiting for it (a
        # module fixture's processes outlive the test that made them).
        for p in started:
            processes.end(p)
    wall = time.monotonic() - start
    for (status, err) in ends:
        assert status == 0, err
    return [json.loads(out.read_text()) for out in outs], wall


def run_one_node(python, root, conv, tmp):
    out = tmp / "single.json"
    start = time.monotonic()
    status, err = finish(start_node(python, root, conv, None, out), 600)
    assert status == 0, err
    return json.loads(out.read_text()), time.monotonic() - start


def max_relative(a, b):
    return max(abs(x - y) / abs(x) for x, y in zip(a, b))


@pytest.fixture(scope="module", params=MULTI_NODE)
def two_ways(request, root, mnist, tmp_path_factory, framework_python):
    """1 node x 2 workers, and 2 nodes x 1 worker, of one framework."""
    framework = request.param
    python = framework_python(framework)
    tmp = tmp_path_factory.mktemp(framework)
    single, single_s = run_one_node(
        python, root, conv_spec(framework, mnist, 2, 1), tmp)
    nodes, nodes_s = run_nodes(python, root,
                               conv_spec(framework, mnist, 2, 2), tmp, 2)
    print("{}: 1 node x 2 workers {:.1f} s, 2 nodes x 1 worker {:.1f} s "
          "(wall)".format(framework, single_s, nodes_s))
    return framework, single, nodes


def test_two_nodes_train_as_one_node_with_two_workers(two_ways, schema):
    framework, single, nodes = two_ways
    for result in [single] + nodes:
        jsonschema.validate(result, schema)
        assert result["status"] == "ok", result["error"]
    base = single["convergence"]["curve"]["loss"]
    assert len(base) == TRAIN // BATCH and all(math.isfinite(v) for v in base)
    assert single["convergence"]["nodes"] == 1
    assert single["convergence"]["cluster"] is None
    for rank, result in enumerate(nodes):
        block = result["convergence"]
        assert (block["workers"], block["nodes"],
                block["workers_per_node"]) == (2, 2, 1)
        assert block["cluster"]["node_rank"] == rank
        assert block["cluster"]["interface"] == "lo"
        assert " lo" in block["cluster"]["transport"]
        curve = block["curve"]["loss"]
        assert len(curve) == len(base)
        difference = max_relative(base, curve)
        print("{} node {}: max relative loss difference {:.2e}, per "
              "iteration {:.4f} s vs {:.4f} s (1 node)".format(
                  framework, rank, difference, result["timing"]["mean_s"],
                  single["timing"]["mean_s"]))
        assert difference <= RELATIVE_TOLERANCE
    # The test split is evaluated with the same weights on every node.
    assert nodes[0]["convergence"]["final_test_accuracy"] == pytest.approx(
        single["convergence"]["final_test_accuracy"], abs=0.02)


@pytest.mark.parametrize("framework", [f for f in MULTI_NODE
                                       if f != "tensorflow"])
def test_two_nodes_of_two_workers_train_as_one_node_of_four(
        framework, root, mnist, tmp_path, framework_python):
    """Node r trains global ranks 2r and 2r+1: the batches of 1 node x 4."""
    python = framework_python(framework)
    single, single_s = run_one_node(
        python, root, conv_spec(framework, mnist, 4, 1), tmp_path)
    nodes, nodes_s = run_nodes(python, root,
                               conv_spec(framework, mnist, 4, 2), tmp_path, 2)
    base = single["convergence"]["curve"]["loss"]
    for result in [single] + nodes:
        assert result["status"] == "ok", result["error"]
    assert nodes[1]["convergence"]["workers_per_node"] == 2
    difference = max_relative(base, nodes[0]["convergence"]["curve"]["loss"])
    print("{}: 2 nodes x 2 vs 1 node x 4: max relative loss difference "
          "{:.2e}, wall {:.1f} s vs {:.1f} s".format(framework, difference,
                                                     nodes_s, single_s))
    assert difference <= RELATIVE_TOLERANCE

@pytest.mark.parametrize("two_ways", ["pytorch"], indirect=True)
def test_another_seed_moves_the_curve_beyond_the_tolerance(
        two_ways, root, mnist, tmp_path, framework_python):
    """The comparison above can fail: a real difference exceeds it."""
    framework, single, _ = two_ways
    other, _ = run_one_node(framework_python(framework), root,
                            conv_spec(framework, mnist, 2, 1, seed=6),
                            tmp_path)
    assert max_relative(single["convergence"]["curve"]["loss"],
                        other["convergence"]["curve"]["loss"]) > \
        10 * RELATIVE_TOLERANCE


# --- faults -------------------------------------------------------------------

FAULT_TIMEOUT_S = 20


@pytest.mark.parametrize("framework", MULTI_NODE)
def test_a_peer_that_never_starts_ends_the_run(framework, root, mnist,
                                               tmp_path, framework_python,
                                               schema):
    """Node 0 alone: its rendezvous waits cluster timeout_s, then the run
    ends with an error naming it (not a hang)."""
    out = tmp_path / "node0.json"
    start = time.monotonic()
    process = start_node(framework_python(framework), root,
                         conv_spec(framework, mnist, 2, 2),
                         cluster_object(2, 0, free_port(), FAULT_TIMEOUT_S),
                         out)
    status, err = finish(process, FAULT_TIMEOUT_S + 120)
    took = time.monotonic() - start
    assert status == 0, err
    result = json.loads(out.read_text())
    jsonschema.validate(result, schema)
    print("{}: lone node 0 ended after {:.1f} s: {}".format(
        framework, took, result["error"]["message"]))
    assert result["status"] == "error"
    assert "rendezvous" in result["error"]["message"]
    assert took < FAULT_TIMEOUT_S + 90


@pytest.mark.parametrize("framework", MULTI_NODE)
def test_a_taken_coordinator_port_is_a_clear_error(framework, root, mnist,
                                                   tmp_path, framework_python):
    port = free_port()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", port))
        taken.listen(1)
        out = tmp_path / "node0.json"
        process = start_node(framework_python(framework), root,
                             conv_spec(framework, mnist, 2, 2),
                             cluster_object(2, 0, port, FAULT_TIMEOUT_S), out)
        status, err = finish(process, FAULT_TIMEOUT_S + 120)
    assert status == 0, err
    result = json.loads(out.read_text())
    print("{}: taken port: {}".format(framework, result["error"]["message"]))
    assert result["status"] == "error"
    assert "{}".format(port) in result["error"]["message"]
    assert "rendezvous" in result["error"]["message"]
    assert "in use" in result["error"]["message"]


@pytest.mark.parametrize("framework", ["pytorch", "tensorflow"])
def test_a_peer_killed_mid_run_ends_node_0(framework, root, mnist, tmp_path,
                                           framework_python, schema):
    """Node 1 SIGKILLed while both train: node 0's collective fails (the
    connection closes) and its part ends `error` within seconds. JAX and
    MXNet block instead until the job's time limit (docs/multinode.md)."""
    python = framework_python(framework)
    conv = dict(conv_spec(framework, mnist, 2, 2), epochs=40)
    nodes, outs, logs = start_two_nodes(python, root, conv, tmp_path)
    # Past start-up and rendezvous, training on both; 40 epochs run far
    # longer.
    for node, log in zip(nodes, logs):
        waits.first_timed_iteration(log, node, RENDEZVOUS_S)
    lose_node(nodes[1])
    killed = time.monotonic()
    status, _ = finish(nodes[0], FAULT_TIMEOUT_S + 60)
    took = time.monotonic() - killed
    finish(nodes[1], 30)
    assert status == 0, logs[0].read_text()
    result = json.loads(outs[0].read_text())
    jsonschema.validate(result, schema)
    print("{}: node 0 ended {:.1f} s after node 1's SIGKILL: {}".format(
        framework, took, result["error"]["message"].splitlines()[0]))
    assert result["status"] == "error"
    assert took < FAULT_TIMEOUT_S + 30
    # What node 0 measured until then stays (TensorFlow's curves live in
    # the convergence process: the failed step's exception carries them).
    block = result["convergence"]
    print("{}: kept {} epochs, {} iterations".format(
        framework, len(block["per_epoch"]), block["completed_iterations"]))
    assert block["partial"] is True
    assert block["completed_iterations"] > 0
    assert len(block["curve"]["loss"]) == \
        len(block["per_epoch"]) * (TRAIN // BATCH)

def start_two_nodes(python, root, conv, folder):
    """Nodes 0 and 1 of a two-node run, as the fault tests start them (the
    rendezvous timeout FAULT_TIMEOUT_S, each node's output to its log):
    (processes, result paths, log paths)."""
    port = free_port()
    outs = [folder / "node{}.json".format(r) for r in range(2)]
    logs = [folder / "node{}.log".format(r) for r in range(2)]
    nodes = [start_node(python, root, conv,
                        cluster_object(2, r, port, FAULT_TIMEOUT_S), out, log)
             for r, (out, log) in enumerate(zip(outs, logs))]
    return nodes, outs, logs


def lose_node(process):
    """SIGKILL a node: its harness and every process under it (the
    launcher's workers too, which a launcher's death alone leaves training
    on as orphans)."""
    lost = _descendants(process.pid)
    process.kill()
    processes.signal_each(lost, signal.SIGKILL)


def _descendants(pid):
    """Every process below `pid`, children first."""
    found, level = [], [pid]
    while level:
        below = []
        for parent in level:
            below += [int(p) for p in subprocess.run(
                ["pgrep", "-P", str(parent)], stdout=subprocess.PIPE,
                universal_newlines=True).stdout.split()]
        found += below
        level = below
    return found


def _kill_launched(logs):
    """SIGKILL what the nodes' launchers started (found by the temporary
    folder their launch lines name): a launcher runs in its own session,
    and torchrun orphaned by a SIGKILLed harness was seen to outlive its
    parent-death SIGTERM, which would slow every later test."""
    for log in logs:
        text = log.read_text() if log.exists() else ""
        if "launching: " in text and " --plan " in text:
            plan = text.split("launching: ", 1)[1].split(
                " --plan ", 1)[1].split()[0]
            subprocess.run(["pkill", "-9", "-f", os.path.dirname(plan)])


@pytest.mark.parametrize("framework", ["pytorch", "jax", "mxnet"])
def test_a_peer_killed_in_epoch_2_leaves_node_0_epoch_1(
        framework, root, mnist, tmp_path, framework_python, schema):
    """Node 1 SIGKILLed as soon as node 0's workers have written epoch 1:
    node 0's result keeps epoch 1's curve (its workers wrote it as it
    grew), status error. PyTorch's node 0 fails by itself (gloo: the peer
    reset the connection); JAX's and MXNet's block on the lost peer, so
    node 0 is then stopped with SIGTERM, as srun stops a step whose node
    failed."""
    python = framework_python(framework)
    conv = dict(conv_spec(framework, mnist, 2, 2), epochs=4)
    per_epoch = TRAIN // BATCH
    nodes, outs, logs = start_two_nodes(python, root, conv, tmp_path)
    try:
        curves = waits.wait_for(lambda: waits.launched_curves(logs[0]),
                                what="node 0's launch line")

        def epoch_written():
            assert nodes[0].poll() is None, logs[0].read_text()
            seen = dataparallel.read_partial(str(curves)) or {}
            return seen.get("epochs")
        waits.wait_for(epoch_written, 60, every=0.05,
                       what="epoch 1 in node 0's curves")
        lose_node(nodes[1])
        killed = time.monotonic()
        by_itself = True
        try:
            nodes[0].wait(10 if framework == "pytorch" else 5)
        except subprocess.TimeoutExpired:
            by_itself = False
            nodes[0].send_signal(signal.SIGTERM)
        status, _ = finish(nodes[0], FAULT_TIMEOUT_S + 60)
        took = time.monotonic() - killed
        finish(nodes[1], 30)
    finally:
        for node in nodes:
            if node.poll() is None:
                node.kill()
                node.wait()
        _kill_launched(logs)
    assert status in (0, 143), logs[0].read_text()
    result = json.loads(outs[0].read_text())
    jsonschema.validate(result, schema)
    block = result["convergence"]
    message = result["error"]["message"]
    print("{}: node 0 ended {:.1f} s after node 1's SIGKILL ({}): {}; kept "
          "{} epochs, {} iterations".format(
              framework, took, "by itself" if by_itself else "SIGTERMed",
              message,
                                         len(block["per_epoch"]),
                                         block["completed_iterations"]))
    assert result["status"] == "error"
    if framework == "pytorch":
        assert by_itself, message
        # gloo names the peer that went away.
        assert "Connection reset by peer" in message or "Connection closed" \
            in message, message
    assert block["partial"] is True
    epochs = len(block["per_epoch"])
    assert 1 <= epochs < 4
    assert block["per_epoch"][0]["epoch"] == 1
    assert len(block["curve"]["loss"]) == epochs * per_epoch
    assert all(math.isfinite(v) for v in block["curve"]["loss"])
    assert block["completed_iterations"] >= epochs * per_epoch
    assert result["timing"]["per_iteration_s"]


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


# --- MXNet: the kvstore's keys hold the weights before the first gradient -----

MXNET_WORKER = """
import hashlib, json, sys
plan = json.loads(sys.argv[1])
from harness.frameworks import dataparallel
from harness.frameworks.mxnet import backend, parallel
build = backend.build_model


def perturbed(*args):
    # Node 1's own draw made different: only a broadcast from ps-lite's
    # rank 0 can give the two nodes one model.
    model = build(*args)
    if plan["node_rank"] == 1:
        for param in model.collect_params().values():
            param.set_data(param.data() * 2 + 1)
    return model


backend.build_model = perturbed
data = dataparallel.load_data(plan["data"], plan["seed"])
trainer = parallel._Trainer(plan, data)
mx = trainer.mx
params = list(trainer.model.collect_params().values())
digest = hashlib.sha1()
for param in params:
    digest.update(param.data().asnumpy().tobytes())
pending = len(trainer.trainer._params_to_init)
before = after = None
if not pending:
    # What the server holds for key 0 before any gradient: the weights.
    first = trainer.trainer._params[0]
    held = mx.nd.zeros(first.shape)
    trainer.kvstore.pull(0, out=held)
    before = bool((held == first.data()).min().asscalar())
    # After one round of gradient pushes the server, which only sums, holds
    # their sum: a pull of the key from then on returns gradients.
    trainer.kvstore.pushpull(
        0, mx.nd.ones(first.shape) * (plan["node_rank"] + 1))
    trainer.kvstore.pull(0, out=held)
    after = float(held.mean().asscalar())
print(json.dumps({"digest": digest.hexdigest(), "key_holds_weights": before,
                  "pending": pending, "key_after_gradients": after}))
"""


def test_mxnet_nodes_hold_rank_0s_weights_before_the_first_gradient(
        root, tmp_path, framework_python):
    """Every node trains from ps-lite worker 0's weights from the first
    step on, even where a node's own draw differs: the MXNet trainer
    initialises the kvstore's keys (worker 0's init, a pull into every
    node's weights) and waits, before training, instead of leaving it to
    Gluon's first step, whose forward and backward run on each node's own
    draw. And the server's side of the order: before any gradient a key
    holds the weights; after one round of pushes, their sum
    (docs/multinode.md, "Per framework", MXNet)."""
    from harness.frameworks.mxnet import parallel as mxparallel
    python = str(framework_python("mxnet"))
    port = free_port()
    env = dict(os.environ, PYTHONPATH=str(root), OMP_NUM_THREADS="1",
               MXNET_CPU_WORKER_NTHREADS="1")
    base = {"nodes": 2, "workers_per_node": 1, "network": "fcn-r",
            "device": "cpu", "workers": 2, "global_batch_size": 8,
            "epochs": 1, "seed": 3, "threads": 1,
            "data": {"source": "synthetic", "name": "mnist",
                     "train_samples": 16, "test_samples": 8}}
    processes = []
    try:
        for role in ("scheduler", "server"):
            processes.append(subprocess.Popen(
                [python, "-c", "import mxnet"],
                env=mxparallel._ps_env(env, cluster_object(2, 0, port),
                                       role)))
        workers = []
        for rank in (0, 1):
            cluster = cluster_object(2, rank, port, timeout_s=60)
            plan = dict(base, node_rank=rank, cluster=cluster)
            workers.append(subprocess.Popen(
                [python, "-s", "-c", MXNET_WORKER, json.dumps(plan)],
                cwd=root, env=mxparallel._ps_env(env, cluster, "worker"),
                stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                universal_newlines=True))
            processes.append(workers[-1])
        outs = []
        for worker in workers:
            out, err = worker.communicate(timeout=300)
            assert worker.returncode == 0, err
            outs.append(json.loads(out.splitlines()[-1]))
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
            process.wait()
    assert [o["pending"] for o in outs] == [0, 0]
    assert [o["key_holds_weights"] for o in outs] == [True, True]
    assert outs[0]["digest"] == outs[1]["digest"]
    # The sum of both nodes' gradients (1 + 2), on both.
    assert [o["key_after_gradients"] for o in outs] == [3.0, 3.0]
