"""The node's environment as one object: Slurm fills it from SLURM_* in one
place (dlrepro.run.engines.slurm.environment), the node entry and the runtimes read it, and
nothing else on the host side reads SLURM_*. No cluster needed: the node
entry runs here as a Slurm task would, with a Slurm task's variables and
the scripted harness."""
import json
import os
import re
import subprocess
import sys

import pytest

from dlrepro.bench import plan
from dlrepro.run import cluster, node, nodeenv
from dlrepro.run.engines.slurm.environment import expand_hostlist, from_slurm
from paths import ROOT

SCRIPTED = str(ROOT / "tests" / "bin" / "scripted-python")

TASK = {"SLURM_ARRAY_JOB_ID": "41", "SLURM_ARRAY_TASK_ID": "0",
        "SLURM_JOB_ID": "42", "SLURMD_NODENAME": "n1",
        "SLURM_JOB_NODELIST": "n1", "SLURM_JOB_PARTITION": "debug",
        "SLURM_JOB_GPUS": "0,1", "PATH": "/bin"}


def test_a_slurm_task_fills_the_node_environment():
    env = from_slurm(TASK)
    assert env == nodeenv.NodeEnv(
        engine="slurm", job_id="42", array_id="41", task=0, rank=0,
        hosts=("n1",), node="n1", partition="debug", gpus="0,1",
        variables={k: v for k, v in TASK.items() if k.startswith("SLURM")})
    assert env.nodes == 1
    assert list(env.variables) == sorted(env.variables)
    assert "PATH" not in env.variables


def test_a_node_of_several():
    env = from_slurm(dict(TASK, SLURM_NODEID="1",
                          SLURM_JOB_NODELIST="n[1-2]",
                          CUDA_VISIBLE_DEVICES="3"))
    assert (env.rank, env.hosts, env.nodes) == (1, ("n1", "n2"), 2)
    # What the process was given, before what the job was.
    assert env.gpus == "3"


def test_what_slurm_leaves_out_stays_unknown():
    env = from_slurm({})
    assert (env.job_id, env.task, env.rank, env.hosts, env.nodes,
            dict(env.variables)) == (None, None, 0, (), 1, {})


@pytest.mark.parametrize("text, hosts", [
    ("n1", ["n1"]),
    ("n[1-3]", ["n1", "n2", "n3"]),
    ("n[1-2,7],gpu5", ["n1", "n2", "n7", "gpu5"]),
    ("gpu[08-10]", ["gpu08", "gpu09", "gpu10"]),
    ("rack[1-2]-n[1-2]", ["rack1-n1", "rack1-n2", "rack2-n1", "rack2-n2"]),
    ("a[1-2]-ib,b", ["a1-ib", "a2-ib", "b"]),
    ("", []),
])
def test_slurm_host_lists_expand_as_scontrol_expands_them(text, hosts):
    assert expand_hostlist(text) == hosts


def test_a_local_run_is_one_node_without_engine_variables():
    env = nodeenv.local()
    assert (env.engine, env.rank, env.nodes, dict(env.variables)) == (
        "local", 0, 1, {})


def test_the_cluster_comes_from_the_node_environment():
    env = from_slurm(dict(TASK, SLURM_NODEID="1", SLURM_JOB_ID="17",
                          SLURM_JOB_NODELIST="localhost,localhost"))
    found = cluster.cluster_of(env, "native", 90)
    assert (found["nodes"], found["node_rank"], found["hosts"],
            found["port"], found["timeout_s"]) == (
        2, 1, ["localhost", "localhost"], 20170, 30)
    assert found["network"] == ("host network of node localhost (native: "
                                "the node's own network namespace)")


def test_a_rank_outside_the_host_list_is_one_line():
    env = from_slurm(dict(TASK, SLURM_NODEID="2",
                          SLURM_JOB_NODELIST="n[1-2]"))
    with pytest.raises(Exception, match="node rank 2 is not one of the "
                                        "job's 2 hosts \\(n1, n2\\)"):
        cluster.cluster_of(env, "native", 90)


def test_the_result_says_where_it_ran():
    block = node.where(from_slurm(TASK))
    assert {k: v for k, v in block.items() if k != "placement"} == {
        "name": "slurm", "job_id": "41_0", "array_job_id": "41", "array_task_id": 0,
        "slurm_job_id": "42", "node": "n1", "partition": "debug",
        "allocation": {k: v for k, v in sorted(TASK.items())
                       if k.startswith("SLURM")}}
    assert block["placement"]["gpus"] == "0,1"


def test_only_the_slurm_filling_reads_slurm_variables():
    """Runtimes, the node entry and the cluster object get what they need
    from the NodeEnv; a variable's name in code is a read."""
    readers = []
    for path in sorted((ROOT / "dlrepro").rglob("*.py")):
        if path.name == "environment.py" and path.parent.name == "slurm":
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if re.search(r"""["']SLURM""", line):
                readers.append(f"{path.relative_to(ROOT)}:{number}")
    assert readers == []


def _task(tmp_path, environ, modes="fcn5=ok", python=SCRIPTED):
    """Run the node entry as Slurm runs a one-node job's task."""
    cell = {"framework": "pytorch", "profile": "cpu", "network": "fcn5",
            "dataset": "synthetic", "batch_size": 8, "global_batch_size": 8,
            "device": "cpu", "gpus": 0, "threads": 1, "iterations": 3,
            "warmup": 1, "runtime": "native", "seed": 0,
            "clock_policy": "observe"}
    job = plan.job_for(cell, 60)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    submission = tmp_path / "submit-0.json"
    submission.write_text(json.dumps({
        "runtime": "native", "runtime_options": {"python": python},
        "gpu_freq": "high", "jobs": [{
            "id": job.id, "kind": job.kind, "spec": job.spec,
            "timeout_s": job.timeout_s, "placement": list(job.placement),
            "mounts": [str(m) for m in job.mounts]}]}))
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM")}
    proc = subprocess.run(
        [sys.executable, "-m", "dlrepro.run.node", "slurm", str(run_dir),
         str(submission)], cwd=ROOT, capture_output=True, text=True,
        timeout=120, env=dict(env, DLREPRO_FAKE_MODES=modes, **environ))
    return proc, run_dir / f"{job.id}.json"


def test_the_node_entry_runs_a_one_node_job_as_a_slurm_task(tmp_path):
    proc, path = _task(tmp_path, TASK)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(path.read_text())
    assert result["status"] == "ok"
    block = result["engine"]
    assert block["name"] == "slurm" and "slurm" not in result
    assert (block["job_id"], block["array_task_id"], block["slurm_job_id"],
            block["node"], block["partition"]) == ("41_0", 0, "42", "n1",
                                                   "debug")
    assert block["allocation"]["SLURM_JOB_GPUS"] == "0,1"
    assert block["gpu_freq"]["asked"] == "high"
    assert "node_rank" not in block and "cluster" not in block


def test_a_setup_failure_names_the_node(tmp_path):
    proc, path = _task(tmp_path, TASK, python=str(tmp_path / "nopython"))
    assert proc.returncode == 0, proc.stderr
    result = json.loads(path.read_text())
    assert (result["status"], result["error"]["type"]) == ("error",
                                                           "SetupFailed")
    assert result["error"]["message"].startswith(
        f"on node n1: --python {tmp_path / 'nopython'}: no such interpreter")
    assert result["engine"]["job_id"] == "41_0"
