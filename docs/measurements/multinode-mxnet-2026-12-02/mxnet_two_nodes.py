"""What mxnet_first_update.py and mxnet_kvstore_stress.py share:
two MXNet "nodes" on one machine, started as harness/frameworks/mxnet/
parallel.py starts them (a ps-lite scheduler and server, one worker per
node on 127.0.0.1), each worker running the calling script's own worker
mode with a plan of synthetic data. Standard library only: the scripts run
in the MXNet venv, where the host's packages are not.
"""
import json
import os
import socket
import subprocess
import sys
import time


def plan(rank, port, network="fcn-r", global_batch=64):
    """Node `rank`'s plan, as the harness hands it to parallel._Trainer."""
    cluster = {"nodes": 2, "node_rank": rank, "hosts": ["node0", "node1"],
               "addresses": ["127.0.0.1"] * 2, "coordinator": "127.0.0.1",
               "port": port, "interface": "lo", "timeout_s": 60,
               "network": "loopback"}
    return {"nodes": 2, "node_rank": rank, "workers_per_node": 1,
            "cluster": cluster, "network": network, "device": "cpu",
            "workers": 2, "global_batch_size": global_batch, "epochs": 1,
            "seed": 5, "threads": 1,
            "data": {"source": "synthetic", "name": "mnist",
                     "train_samples": 1024, "test_samples": 64}}


def free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def run(env, folder, index, worker_argv, logs, network="fcn-r"):
    """One launch: the scheduler, the server and both workers, worker
    `rank` running `worker_argv(rank, plan_path)` with its output to the
    open file `logs[rank]`; the workers' exit codes (everything left is
    killed)."""
    from harness.frameworks.mxnet import parallel
    port = free_port()
    services, workers = [], []
    for role in ("scheduler", "server"):
        services.append(subprocess.Popen(
            [sys.executable, "-c", "import mxnet"],
            env=parallel._ps_env(env, plan(0, port, network)["cluster"],
                                 role)))
    for rank in (0, 1):
        the_plan = plan(rank, port, network)
        path = os.path.join(folder, "plan{}-{}.json".format(index, rank))
        with open(path, "w") as handle:
            json.dump(the_plan, handle)
        workers.append(subprocess.Popen(
            worker_argv(rank, path), stdout=logs[rank], stderr=subprocess.STDOUT,
            env=parallel._ps_env(env, the_plan["cluster"], "worker")))
    try:
        return [w.wait(600) for w in workers]
    finally:
        for process in workers + services:
            if process.poll() is None:
                process.kill()
            process.wait()


def loaded(count, launch):
    """launch() with `count` busy-looping processes beside it (CI's shared
    cores); (its return value, wall seconds)."""
    burners = [subprocess.Popen([sys.executable, "-c", "while True: pass"])
               for _ in range(count)]
    started = time.monotonic()
    try:
        return launch(), time.monotonic() - started
    finally:
        for burner in burners:
            burner.kill()
            burner.wait()
