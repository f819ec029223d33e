"""One node's part of a job on several nodes (a convergence run whose spec
says "nodes" > 1), beside the node entry (dlrepro.run.node) that every
node runs.

Its node's "cluster" object (docs/multinode.md "On Slurm"), from the
node's NodeEnv: the node rank, the job's hosts, their addresses by
resolving them, the interface that holds this node's address, a base port
derived from the engine's job id (checked free on node 0, where the
rendezvous listens), and which network the harness is on.

Node 0 writes the job's result, RUN_DIR/<job>.json; node r > 0 writes a
side result, RUN_DIR/nodes/<job>.node<r>.json (its spec and log beside
it). Node 0 then waits a little for the side results and folds their
status into the job's: a node that failed (or wrote nothing) makes the job
an error with that node's reason, keeping what node 0 measured.
"""
import errno
import socket
import subprocess
import time
from pathlib import Path

from harness import networks
from harness.errors import HarnessError

from dlrepro.errors import UserError
from dlrepro.run import nodeenv, store, writer
from dlrepro.run.paths import JobPaths
# Base ports: PORT_BASE + (job id mod PORT_SLOTS) * PORT_SPAN; a framework
# may use port .. port + PORT_SPAN - 1. All of them lie below Linux's
# default ephemeral range (32768-60999), from which every outgoing
# connection of the node takes its local port: a port there may be any
# connection's, now or, in TIME_WAIT, for a minute after it closed.
PORT_BASE = 20000
PORT_SPAN = 10
PORT_SLOTS = (32768 - PORT_BASE) // PORT_SPAN
# How long node 0 waits for the other nodes' results after its own part
# ended (Slurm's KillWait, 30 s on the test cluster, bounds it after a
# SIGTERM).
FOLD_WAIT_S = 15
# The harness's rendezvous/collective timeout: a share of the job's own.
RENDEZVOUS_MAX_S = 300
RENDEZVOUS_MIN_S = 20
# Nodes' test losses after an epoch agree to this (relative) when their
# models are the same one: they were identical (difference 0) in every
# two-node run of the tests (PyTorch and TensorFlow natively, MXNet under
# Podman and Charliecloud): the same evaluation of the same weights.
REPLICA_TOLERANCE = 1e-4
# Node 0's own failures that no other node caused: they stay the job's
# reason.
OWN_FAULTS = ("PortTaken", "SetupFailed")
NETWORKS = {
    "native": "host network of node {host} (native: the node's own "
              "network namespace)",
    "podman": "host network of node {host} (podman --network host)",
    "charliecloud": "host network of node {host} (charliecloud: no "
                    "network namespace of its own)",
}


def port_of(job_id):
    """The job's base port, from its Slurm job id."""
    return PORT_BASE + (int(job_id) % PORT_SLOTS) * PORT_SPAN


def resolve(host):
    try:
        return socket.gethostbyname(host)
    except OSError as exc:
        raise UserError(f"node {host} has no address ({exc}); every node "
                        f"must resolve every other node's name")


def interface_of(address):
    """The interface holding `address` (`ip -o -4 addr`), or None."""
    try:
        out = subprocess.run(["ip", "-o", "-4", "addr", "show"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    for line in out.splitlines():
        fields = line.split()
        if len(fields) >= 4 and fields[3].split("/")[0] == address:
            return fields[1].split("@")[0]
    return None


def port_problem(port, address, host):
    """Why the job's ports cannot be used on this node, or None."""
    for candidate in range(port, port + PORT_SPAN):
        what = bind_problem(candidate)
        if what:
            return (f"port {candidate} on node {host} ({address}) {what}; "
                    f"the job's rendezvous uses ports {port}-"
                    f"{port + PORT_SPAN - 1}, derived from its Slurm job id")
    return None


def bind_problem(port):
    """Why a listener cannot bind `port` on every address here, or
    None."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    # As the frameworks' own listeners bind: c10d's TCPStore and
    # TensorFlow's gRPC server both start on a port whose last connection
    # lies in TIME_WAIT (checked), where a plain bind fails; a port that
    # a process listens on is taken for them and for this.
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(("0.0.0.0", port))
    except OSError as exc:
        return ("is taken by another process"
                if exc.errno == errno.EADDRINUSE else
                f"cannot be bound ({exc.strerror})")
    finally:
        sock.close()
    return None


def cluster_of(node, runtime_name, timeout_s):
    """This node's cluster object (the harness spec's "cluster"), from its
    NodeEnv."""
    hosts, rank = list(node.hosts), node.rank
    if not 0 <= rank < len(hosts):
        raise UserError(f"node rank {rank} is not one of the job's "
                        f"{len(hosts)} hosts ({', '.join(hosts) or 'none'})")
    addresses = [resolve(h) for h in hosts]
    host = hosts[rank]
    return {
        "nodes": len(hosts), "node_rank": rank, "hosts": hosts,
        "addresses": addresses, "coordinator": addresses[0],
        "port": port_of(node.job_id),
        "interface": interface_of(addresses[rank]),
        "network": NETWORKS.get(runtime_name, "host network of node {host}"
                                ).format(host=host),
        "timeout_s": max(RENDEZVOUS_MIN_S,
                         min(RENDEZVOUS_MAX_S, timeout_s // 3)),
    }


def node_entry(cluster, rank, result, path, run_dir):
    """One node in the job's engine block: where it was, how its part ended
    and where its result is (relative to the run folder)."""
    error = (result or {}).get("error") or {}
    # The harness's record of its cluster (the engine block may not be
    # added yet when node 0 reads the file).
    seen = (((result or {}).get("convergence") or {}).get("cluster") or
            nodeenv.block_of(result).get("cluster") or {})
    return {"rank": rank, "host": cluster["hosts"][rank],
            "address": cluster["addresses"][rank],
            "interface": seen.get("interface"),
            "status": result["status"] if result else None,
            "reason": error.get("message") if result else
            "wrote no result (its part never started, or was killed before "
            "it could write)",
            "result": str(Path(path).relative_to(run_dir))}


def replica_disagreement(results, tolerance=REPLICA_TOLERANCE):
    """Why the nodes' models differ, or None. Data parallelism keeps one
    model on every node, so every node's evaluation of it after an epoch
    must agree to floating-point noise; a node whose updates went astray
    (a lost or stale gradient exchange) would otherwise end `ok` with
    node 0's wrong curve. `results`: node 0's first, None for a node
    without a result."""
    if results[0] is None or _keeps_state_per_worker(results[0]):
        return None
    epochs = [((r or {}).get("convergence") or {}).get("per_epoch") or []
              for r in results]
    for rank, others in enumerate(epochs[1:], 1):
        for ours, theirs in zip(epochs[0], others):
            a, b = ours.get("test_loss"), theirs.get("test_loss")
            if a is None or b is None:
                continue
            if abs(a - b) > tolerance * max(abs(a), abs(b), 1e-12):
                return (f"node 0 and node {rank} hold different models after "
                        f"epoch {ours.get('epoch')}: test loss {a:.6g} vs "
                        f"{b:.6g} (relative tolerance {tolerance:g}); data "
                        f"parallelism keeps one model on every node, so this "
                        f"run's curve cannot be trusted")
    return None


def _keeps_state_per_worker(result):
    """Batch norm's running statistics stay per worker (docs/convergence.md),
    so nodes' models legitimately differ there and are not compared."""
    name = (result.get("cell") or {}).get("network")
    try:
        return networks.BatchNorm in networks.layer_kinds(networks.get(name))
    except HarnessError:  # an unknown network: nothing to compare by
        return True


def fold(path, job, cluster, run_dir, wait_s=FOLD_WAIT_S, result=None):
    """Node 0: the other nodes' outcomes into the job's result (`result`,
    not yet written, else the valid file at `path`; and its engine block's
    list of nodes), written to `path`. Returns the job's status."""
    if result is None:
        result, _problem = store.read_result(path)
    entries = [node_entry(cluster, 0, result, path, run_dir)]
    results = [result]
    if result is None:
        entries[0]["interface"] = cluster["interface"]
    deadline = time.monotonic() + wait_s
    for rank in range(1, cluster["nodes"]):
        side = JobPaths(run_dir, job.id).side(rank)
        found, _ = store.read_result(side)
        while found is None and time.monotonic() < deadline:
            time.sleep(0.5)
            found, _ = store.read_result(side)
        entries.append(node_entry(cluster, rank, found, side, run_dir))
        results.append(found)
    # Nodes that ended otherwise than node 0 did (all of them timing out
    # at the job's timeout is the job's timeout, not a node's fault).
    failed = [e for e in entries[1:] if e["status"] != "ok" and not (
        result and e["status"] == result["status"] == "timeout")]
    if result is None:
        result = writer.synthesized(
            job, "error", "NoResult",
            f"node 0 ({cluster['hosts'][0]}) wrote no result",
            run_id=store.run_id_or_none(run_dir))
    own_type = (result.get("error") or {}).get("type")
    if failed and result["status"] in ("ok", "error", "timeout") and \
            own_type not in OWN_FAULTS:
        first = failed[0]
        message = (f"node {first['rank']} ({first['host']}) "
                   f"{'ended ' + first['status'] if first['status'] else 'failed'}"
                   f": {first['reason']}")
        own_message = (result.get("error") or {}).get("message")
        if result["status"] != "ok" and own_message:
            message += f"; node 0 ({cluster['hosts'][0]}): {own_message}"
        result["status"] = "error"
        result["error"] = {"type": "NodeFailed", "message": message}
    disagreement = replica_disagreement(results)
    if disagreement and result["status"] == "ok":
        result["status"] = "error"
        result["error"] = {"type": "ReplicasDiverged",
                           "message": disagreement}
    block = dict(nodeenv.block_of(result))
    block["nodes"] = entries
    block["cluster"] = cluster
    result.pop(nodeenv.OLD_BLOCK, None)
    writer.annotated(path, nodeenv.BLOCK, block, result)
    return result["status"]
