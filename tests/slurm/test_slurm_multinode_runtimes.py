"""Convergence across the REAL two-node test cluster (.ci/slurm-nodes.sh)
under the container runtimes: `invoke converge --nodes 2 --executor slurm
--runtime podman|charliecloud` on the real command line, in the image the
runtime tests use (the Docker tests' MXNet CPU image: Podman loads it from
the Docker engine, Charliecloud runs the conversion that
test_charliecloud_runtime.py makes, through the same fixture). MXNet
trains across the nodes with kvstore dist_sync (scheduler and server on
node 0). 2 nodes x 1 worker must give the loss curve of 1 node x 2 workers
(the local executor, the same runtime), and the result must record both
nodes, their addresses, the interface and the containers' network; the run
folder's files must be the invoking user's and no container may be left.

Without the cluster, the runtimes' binaries or the image these tests skip,
saying what to run, unless DLREPRO_REQUIRE_SLURM_NODES /
DLREPRO_REQUIRE_RUNTIMES / DLREPRO_REQUIRE_DOCKER are set (CI sets them),
in which case they fail. They need root, like the cluster.
"""
import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

import waits
from dlrepro.run import paths
from dlrepro.run.runtimes import docker as docker_runtime

from runtimeenv import (FRAMEWORK, INVOKE, binary_or_skip, cli_env,
                        docker_image)
from convergeenv import RELATIVE_TOLERANCE, _max_relative
from slurmnodes import ADDRESSES, NODES, SLURM_CONF, node_pids

# Every test here: the two-node cluster or a skip.
pytestmark = pytest.mark.usefixtures("slurm_nodes")

# The smallest training test_slurm_multinode.py uses: 4 iterations an epoch.
TINY = ["--framework", FRAMEWORK, "--network", "fcn-r", "--synthetic",
        "--train-samples", "256", "--test-samples", "64",
        "--global-batch-size", "64", "--workers", "2"]
NETWORKS = {"podman": "podman --network host",
            "charliecloud": "charliecloud: no network namespace of its own"}


@pytest.fixture(params=["podman", "charliecloud"])
def runtime(request):
    """The runtime, its binaries there and its image ready as the runtime
    tests make it (never a copy of their own)."""
    if request.param == "podman":
        binary_or_skip("podman")
        docker_image()
    else:
        request.getfixturevalue("converted")
    return request.param


def _argv(out, runtime, args):
    return INVOKE + ["converge", "--out", str(out), *TINY, "--runtime",
                     runtime, *args]


def _converge(root, out, runtime, *args, timeout=600):
    return subprocess.run(_argv(out, runtime, args), cwd=root,
                          capture_output=True, text=True,
                          env=cli_env(SLURM_CONF=SLURM_CONF),
                          timeout=timeout)


def _container_harness(node):
    """The harness inside a container on `node` (not the podman client,
    whose command line holds the harness's too)."""
    found = []
    for pid in node_pids(node, "harness converge"):
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if argv[:4] == [docker_runtime.PYTHON_IN_CONTAINER.encode(), b"-s",
                        b"-m", b"harness"]:
            found.append(pid)
    return found


def _run_dir(out):
    run_dir, = [p for p in Path(out).iterdir()
                if p.is_dir() and not p.is_symlink()]
    return run_dir


def _podman_containers(word):
    proc = subprocess.run(["podman", "ps", "-a", "--filter", f"name={word}",
                           "--format", "{{.Names}}"], capture_output=True,
                          text=True)
    return proc.stdout.split()


def test_two_nodes_equal_one_node_two_workers_in_containers(runtime, root,
                                                            tmp_path):
    started = time.monotonic()
    one = _converge(root, tmp_path / "one", runtime, "--epochs", "2")
    assert one.returncode == 0, one.stdout + one.stderr
    one_s = time.monotonic() - started
    started = time.monotonic()
    two = _converge(root, tmp_path / "two", runtime, "--epochs", "2",
                    "--nodes", "2", "--executor", "slurm", "--timeout", "300")
    two_s = time.monotonic() - started
    assert two.returncode == 0, two.stdout + two.stderr
    print(f"{runtime}: 1 node x 2 {one_s:.1f} s, 2 nodes x 1 {two_s:.1f} s")
    assert two_s < 300
    a = json.loads((_run_dir(tmp_path / "one") /
                    f"{FRAMEWORK}-fcn-r-w2.json").read_text())
    run_dir = _run_dir(tmp_path / "two")
    job = f"{FRAMEWORK}-fcn-r-w2-n2"
    b = json.loads((run_dir / f"{job}.json").read_text())
    assert (a["status"], b["status"]) == ("ok", "ok"), b.get("error")
    loss_a = a["convergence"]["curve"]["loss"]
    loss_b = b["convergence"]["curve"]["loss"]
    assert len(loss_a) == len(loss_b) == 8
    difference = _max_relative(loss_a, loss_b)
    print(f"{runtime}: max relative loss difference {difference:.2g}")
    assert difference <= RELATIVE_TOLERANCE, (loss_a, loss_b)
    assert b["convergence"]["nodes"] == 2
    assert b["convergence"]["workers_per_node"] == 1
    # Both nodes, their addresses and interfaces.
    nodes = b["engine"]["nodes"]
    assert [(n["rank"], n["host"], n["address"], n["interface"], n["status"])
            for n in nodes] == [(0, "n1", ADDRESSES[0], "eth0", "ok"),
                                (1, "n2", ADDRESSES[1], "eth0", "ok")]
    side = json.loads((run_dir / nodes[1]["result"]).read_text())
    # Each node's harness ran in the same image under this runtime, on its
    # own node's network, and says so (the "network" line).
    for result, rank in ((b, 0), (side, 1)):
        seen = result["convergence"]["cluster"]
        assert seen["node_rank"] == rank
        assert seen["hosts"] == list(NODES)
        assert seen["addresses"] == list(ADDRESSES)
        assert seen["interface"] == "eth0"
        assert seen["network"] == (f"host network of node {NODES[rank]} "
                                   f"({NETWORKS[runtime]})")
        assert "kvstore dist_sync" in seen["transport"]
        assert "over eth0" in seen["transport"]
        container = result["environment"]["container"]
        assert container["runtime"] == runtime
        assert container["image_id"] == \
            a["environment"]["container"]["image_id"]
    # The run folder is the invoking user's, whatever ran in it.
    for path in [run_dir, *run_dir.rglob("*")]:
        info = path.lstat()
        assert (info.st_uid, info.st_gid) == (os.getuid(), os.getgid()), path
    if runtime == "podman":
        # Both nodes' containers are gone (named after the run folder).
        assert not _podman_containers(run_dir.name)


def test_a_node_killed_in_its_container_ends_the_job_and_leaves_none(
        root, tmp_path):
    """Podman: node 1's harness SIGKILLed inside its container. Its part
    ends error, srun ends node 0's part (whose container podman stops:
    conmon is not a child of the Slurm step), the job ends NodeFailed with
    node 1's reason within seconds, and no container is left on either
    node. (Charliecloud's processes are the step's own, as natively:
    measured by hand, docs/multinode.md.)"""
    binary_or_skip("podman")
    docker_image()
    proc = subprocess.Popen(
        _argv(tmp_path, "podman", ["--epochs", "200", "--nodes", "2",
                                   "--executor", "slurm", "--timeout",
                                   "240"]),
        cwd=root, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True, env=cli_env(SLURM_CONF=SLURM_CONF))
    try:
        # The bound covers the job's wait in the queue: the two-node
        # cluster is shared with the other test processes' jobs (in CI
        # once more than 120 s).
        harness = waits.wait_while_running(
            proc, lambda: _container_harness("n2"), 600,
            what="n2's harness")
        # Iterations under way (ps-lite is up: a step needs both nodes).
        waits.wait_while_running(proc, lambda: waits.said_first_timed(
            *Path(tmp_path).glob("*/**/*.log")), 300,
            what="a timed iteration")
        for pid in harness:
            os.kill(pid, signal.SIGKILL)
        killed = time.monotonic()
        output, _ = proc.communicate(timeout=240)
    finally:
        if proc.poll() is None:
            proc.kill()
    print(f"podman: ended {time.monotonic() - killed:.1f} s after the kill")
    assert time.monotonic() - killed < 60, output
    run_dir = _run_dir(tmp_path)
    result = json.loads((run_dir / f"{FRAMEWORK}-fcn-r-w2-n2.json"
                         ).read_text())
    assert result["status"] == "error", output
    assert result["error"]["type"] == "NodeFailed"
    assert result["error"]["message"].startswith(
        "node 1 (n2) ended error: the harness was killed by SIGKILL"), \
        result["error"]
    assert "the container exited with status 137" in \
        result["error"]["message"]
    assert [n["status"] for n in result["engine"]["nodes"]] == ["error",
                                                               "error"]
    assert not _podman_containers(run_dir.name)
    assert not node_pids("n1", "harness converge")
    assert not node_pids("n2", "harness converge")


def test_side_nodes_containers_are_apart_between_runs(tmp_path):
    """Node r > 0 runs in RUN/nodes: two runs' node-1 containers of the
    same job must have different names in one store (podman's, shared by
    the test cluster's nodes), or one run's launch removes the other's live
    container as a leftover."""
    job = f"{FRAMEWORK}-fcn-r-w2-n2.node1"
    names = {docker_runtime.container_name(
        tmp_path / run / paths.SIDE_DIR, job) for run in ("r1", "r2")}
    assert len(names) == 2
    assert docker_runtime.container_name(tmp_path / "r1", job[:-6]) not in \
        names
