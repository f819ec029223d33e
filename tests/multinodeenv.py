"""What the multi-node harness tests share (test_multinode_harness_spec,
_training and _faults): the generated MNIST subset (the `mnist` fixture,
which each part imports), a node's convergence spec, and one node's
`python -m harness converge` started and awaited."""
import json
import subprocess

import pytest

import processes
from convergeenv import harness_env
from dlrepro.converge import datasets as dd
from dlrepro.converge import plan as conv_plan


# The smallest real-data run tests/backends/test_converge_training.py trains, one
# epoch.
TRAIN, TEST, BATCH = 1024, 256, 64
# Frameworks that train across nodes here (MULTI_NODE True): all but CNTK
# and Caffe.
MULTI_NODE = ("pytorch", "tensorflow", "jax", "mxnet")


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


def start_node(python, root, conv, cluster, out, log=None, env=None):
    """One node's `python -m harness converge`, as the Slurm executor
    starts it on each node; its output piped, or to the file `log`; `env`
    adds to the environment."""
    spec_path = out.with_suffix(".spec.json")
    spec_path.write_text(json.dumps({"convergence": conv, "container": None,
                                     "cluster": cluster}))
    env = harness_env(root, out, **(env or {}))
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
