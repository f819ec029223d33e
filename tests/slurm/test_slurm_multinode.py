"""Convergence across Slurm nodes against a REAL two-node cluster
(.ci/slurm-nodes.sh: nodes n1 and n2, each slurmd in its own network
namespace; clients reach it with SLURM_CONF=/etc/slurm-nodes/slurm.conf).
`invoke converge --executor slurm --nodes 2` on the real command line, the
native runtime with the PyTorch and TensorFlow venvs: 2 nodes x 1 worker
trains the same loss curve as 1 node x 2 workers; faults are made for real
(a node's harness killed, a node's part stopped before it starts, the
rendezvous port taken on n1) and end with a status and a reason inside the
job's limits.

Without the cluster the tests skip, saying so, unless
DLREPRO_REQUIRE_SLURM_NODES is set (CI sets it), in which case they fail.
They need root (ip netns) like the cluster itself.
"""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import processes
import waits
from dlrepro.run import cluster as node_cluster
from harness.frameworks import dataparallel
from convergeenv import RELATIVE_TOLERANCE, _max_relative
from paths import INVOKE, ROOT
from slurmnodes import ADDRESSES, NODES, node_pids, slurm_env

# Every test here: the two-node cluster or a skip.
pytestmark = pytest.mark.usefixtures("slurm_nodes")

# The smallest training that still gives a curve: 4 iterations an epoch.
TINY = ["--network", "fcn-r", "--synthetic", "--train-samples", "256",
        "--test-samples", "64", "--global-batch-size", "64",
        "--runtime", "native"]


def _converge(out, *args, timeout=600):
    return subprocess.run([INVOKE, "converge", "--out", str(out), *TINY,
                           *args], cwd=ROOT, capture_output=True, text=True,
                          env=slurm_env(), timeout=timeout)


def _start(out, *args):
    return subprocess.Popen([INVOKE, "converge", "--out", str(out), *TINY,
                             *args], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env=slurm_env())


def _result(out, job_id):
    run_dir, = [p for p in Path(out).iterdir()
                if p.is_dir() and not p.is_symlink()]
    return run_dir, json.loads((run_dir / f"{job_id}.json").read_text())


def _an_epoch_written(out, job_id):
    """Wait until node 0's workers have written an epoch into their curves
    (the file its log's launch line names)."""
    def node_0_log():
        found = [p for p in Path(out).glob(f"*/{job_id}.log")
                 if not p.parent.is_symlink()]
        return found[0] if found else None
    log = waits.wait_for(node_0_log, what=f"{job_id}.log")
    curves = waits.wait_for(lambda: waits.launched_curves(log),
                            what=f"the launch line in {log}")
    waits.wait_for(lambda: (dataparallel.read_partial(str(curves)) or {}
                            ).get("epochs"), 180, what=f"an epoch in {curves}")


# --- what is refused before anything runs ---------------------------------------

def test_nodes_need_slurm_and_not_docker(tmp_path):
    out = _converge(tmp_path, "--framework", "pytorch", "--workers", "2",
                    "--nodes", "2")
    assert out.returncode == 2
    assert out.stderr.strip() == ("error: --nodes 2 needs --executor slurm "
                                  "(the local executor runs on this host "
                                  "only); nothing was run")
    argv = [INVOKE, "converge", "--out", str(tmp_path), "--framework",
            "pytorch", "--network", "fcn-r", "--synthetic", "--workers", "2",
            "--nodes", "2", "--executor", "slurm", "--runtime", "docker"]
    out = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True,
                         env=slurm_env())
    assert out.returncode == 2
    assert len(out.stderr.strip().splitlines()) == 1
    assert out.stderr.startswith("error: --nodes 2 cannot use the docker "
                                 "runtime: its containers live in the "
                                 "Docker daemon's network namespace")
    assert not list(tmp_path.iterdir())


# --- the same curve on 2 nodes x 1 worker as on 1 node x 2 ----------------------

@pytest.mark.parametrize("framework", ["pytorch", "tensorflow"])
def test_two_nodes_equal_one_node_two_workers(framework, tmp_path):
    one = _converge(tmp_path / "one", "--framework", framework,
                    "--workers", "2", "--epochs", "2")
    assert one.returncode == 0, one.stdout + one.stderr
    started = time.monotonic()
    two = _converge(tmp_path / "two", "--framework", framework,
                    "--workers", "2", "--nodes", "2", "--epochs", "2",
                    "--executor", "slurm", "--timeout", "300")
    assert two.returncode == 0, two.stdout + two.stderr
    assert time.monotonic() - started < 300
    _, a = _result(tmp_path / "one", f"{framework}-fcn-r-w2")
    run_dir, b = _result(tmp_path / "two", f"{framework}-fcn-r-w2-n2")
    assert (a["status"], b["status"]) == ("ok", "ok"), b.get("error")
    assert b["convergence"]["nodes"] == 2
    assert b["convergence"]["workers_per_node"] == 1
    loss_a = a["convergence"]["curve"]["loss"]
    loss_b = b["convergence"]["curve"]["loss"]
    assert len(loss_a) == len(loss_b) == 8
    assert _max_relative(loss_a, loss_b) <= RELATIVE_TOLERANCE, \
        (loss_a, loss_b)
    # Both nodes, their addresses and interfaces, and the network used.
    nodes = b["engine"]["nodes"]
    assert [(n["rank"], n["host"], n["address"], n["interface"], n["status"])
            for n in nodes] == [(0, "n1", ADDRESSES[0], "eth0", "ok"),
                                (1, "n2", ADDRESSES[1], "eth0", "ok")]
    assert (run_dir / nodes[1]["result"]).exists()
    cluster = b["convergence"]["cluster"]
    assert cluster["hosts"] == list(NODES)
    assert cluster["addresses"] == list(ADDRESSES)
    assert cluster["interface"] == "eth0"
    assert cluster["network"].startswith("host network of node n1")
    assert cluster["transport"]
    # 1x2 and 2x1 are different cells of one run folder's kind: --resume
    # in the two-node folder keeps its job and runs nothing again.
    again = _converge(tmp_path / "two", "--framework", framework,
                      "--workers", "2", "--nodes", "2", "--epochs", "2",
                      "--executor", "slurm", "--timeout", "300", "--resume")
    assert again.returncode == 0, again.stdout + again.stderr
    assert "submitted" not in again.stdout


# --- faults -------------------------------------------------------------------

def test_a_node_killed_mid_run_ends_the_job_with_its_reason(tmp_path):
    proc = _start(tmp_path, "--framework", "pytorch", "--workers", "2",
                  "--nodes", "2", "--epochs", "200", "--executor", "slurm",
                  "--timeout", "240")
    started = time.monotonic()
    try:
        waits.wait_for(lambda: node_pids("n2", "harness converge"), 120,
                       every=0.2, what="n2's harness")
        # An epoch on both nodes first (they step together): node 0's curve
        # is kept.
        _an_epoch_written(tmp_path, "pytorch-fcn-r-w2-n2")
        for pid in node_pids("n2", "-m harness converge"):
            os.kill(pid, signal.SIGKILL)
        output, _ = proc.communicate(timeout=240)
    finally:
        if proc.poll() is None:
            proc.kill()
    took = time.monotonic() - started
    assert took < 240, output
    run_dir, result = _result(tmp_path, "pytorch-fcn-r-w2-n2")
    assert result["status"] == "error", output
    assert result["error"]["type"] == "NodeFailed"
    assert result["error"]["message"].startswith("node 1 (n2) ended error"), \
        result["error"]
    # Node 0's own result is the job's (its block, its log, the nodes),
    # with what node 0's workers measured before the loss: they write
    # their curves as they grow (docs/multinode.md), 12 s of training
    # at 4 iterations an epoch is several epochs.
    block = result["convergence"]
    print("node 0 kept {} epochs, {} iterations measured, in progress: "
          "{}".format(len(block["per_epoch"]), block["completed_iterations"],
                      block["in_progress"]))
    assert block["partial"] is True
    epochs = len(block["per_epoch"])
    assert 1 <= epochs < 200
    assert [e["epoch"] for e in block["per_epoch"]] == list(
        range(1, epochs + 1))
    assert len(block["curve"]["loss"]) == len(block["curve"]["seconds"]) \
        == 4 * epochs
    assert all(v is not None for v in block["curve"]["loss"])
    assert block["completed_iterations"] >= 4 * epochs
    assert len(result["timing"]["per_iteration_s"]) == \
        block["completed_iterations"] - 1
    assert block["final_train_loss"] == block["per_epoch"][-1]["train_loss"]
    assert (run_dir / "pytorch-fcn-r-w2-n2.log").read_text()
    assert result["engine"]["nodes"][0]["status"] == "error"
    nodes = result["engine"]["nodes"]
    assert nodes[1]["status"] == "error"
    assert "pytorch-fcn-r-w2-n2: error" in output


def test_a_node_that_never_starts_ends_the_job_with_the_reason(tmp_path):
    proc = _start(tmp_path, "--framework", "pytorch", "--workers", "2",
                  "--nodes", "2", "--epochs", "2", "--executor", "slurm",
                  "--timeout", "60")
    started = time.monotonic()
    stopped = []
    try:
        # n2's part is stopped as soon as it shows: its harness never
        # joins the rendezvous.
        while not stopped and time.monotonic() - started < 120:
            for pid in node_pids("n2", "dlrepro.run.node slurm"):
                os.kill(pid, signal.SIGSTOP)
                stopped.append(pid)
            time.sleep(0.02)
        assert stopped, "n2's part never showed"
        output, _ = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
        processes.signal_each(stopped, signal.SIGCONT)
    took = time.monotonic() - started
    # The job's own timeout (60 s) plus Slurm's kill wait, not its --time.
    assert took < 180, output
    run_dir, result = _result(tmp_path, "pytorch-fcn-r-w2-n2")
    assert result["status"] == "error", output
    message = result["error"]["message"]
    assert message.startswith("node 1 (n2) failed: wrote no result"), message
    # Node 0's own reason names the rendezvous (or the peer) it waited for.
    assert "node 0 (n1)" in message
    nodes = result["engine"]["nodes"]
    assert nodes[1]["status"] is None
    assert not node_pids("n2", "dlrepro.run.node slurm")


def test_a_taken_port_ends_the_job_with_the_reason(tmp_path):
    # The job's id follows a throwaway job's (the executor's `sbatch
    # --test-only` takes one id first): the ports those next ids derive
    # are taken on n1 before the run.
    probe = subprocess.run(["sbatch", "--parsable", "--wrap", "true",
                            "--output", "/dev/null"], capture_output=True,
                           text=True, env=slurm_env(), check=True)
    last = int(probe.stdout.strip().split(";")[0])
    taken = [node_cluster.port_of(last + k) + 3 for k in (1, 2, 3)]
    holder = subprocess.Popen(
        ["ip", "netns", "exec", "n1", sys.executable, "-c",
         "import socket, sys\n"
         "held = []\n"
         "for port in sys.argv[1:]:\n"
         "    s = socket.socket(); s.bind(('0.0.0.0', int(port)))\n"
         "    s.listen(); held.append(s)\n"
         "print('held', flush=True)\n"
         "sys.stdin.read()  # held until the test closes its end",
         *map(str, taken)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        out = _converge(tmp_path, "--framework", "pytorch", "--workers",
                        "2", "--nodes", "2", "--epochs", "2",
                        "--executor", "slurm", "--timeout", "120",
                        timeout=300)
    finally:
        holder.stdin.close()
        holder.wait(timeout=60)
    run_dir, result = _result(tmp_path, "pytorch-fcn-r-w2-n2")
    assert result["status"] == "error", out.stdout
    assert result["error"]["type"] == "PortTaken"
    port = result["engine"]["cluster"]["port"]
    assert port + 3 in taken
    assert result["error"]["message"].startswith(
        f"port {port + 3} on node n1 (10.213.0.11) is taken by another "
        f"process; the job's rendezvous uses ports {port}-{port + 9}")
    assert result["engine"]["nodes"][0]["status"] == "error"
    assert "pytorch-fcn-r-w2-n2: error" in out.stdout
