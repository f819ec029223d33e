"""Multi-node data parallelism, the harness's side (issue 12): faults of
real multi-node runs on this machine: a peer that never starts, a taken
coordinator port, a peer SIGKILLed mid-run or in epoch 2
(docs/multinode.md)."""
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
from loopback import cluster as cluster_object, free_port
from multinodeenv import (BATCH, MULTI_NODE, RENDEZVOUS_S, TRAIN, conv_spec,
                          finish, mnist, start_node)
from harness.frameworks import dataparallel


# --- faults -------------------------------------------------------------------

FAULT_TIMEOUT_S = 20
# A lone node's rendezvous cannot succeed however long it waits: a short
# timeout ends the same story sooner.
LONE_TIMEOUT_S = 6


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
                         cluster_object(2, 0, free_port(), LONE_TIMEOUT_S),
                         out)
    status, err = finish(process, LONE_TIMEOUT_S + 120)
    took = time.monotonic() - start
    assert status == 0, err
    result = json.loads(out.read_text())
    jsonschema.validate(result, schema)
    print("{}: lone node 0 ended after {:.1f} s: {}".format(
        framework, took, result["error"]["message"]))
    assert result["status"] == "error"
    assert "rendezvous" in result["error"]["message"]
    assert took < LONE_TIMEOUT_S + 90


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
    """(Long because the scenario is one story: two nodes, a kill, then
    what each side kept.) Node 1 SIGKILLed as soon as node 0's workers have written epoch 1:
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
