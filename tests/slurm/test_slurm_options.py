"""The Slurm executor's pure parts, no cluster needed: Slurm's task ranges,
where options come from, and the arrays jobs are grouped into."""
import json
import socket

import pytest

from dlrepro.bench import plan
from dlrepro.errors import UserError
from dlrepro.run.engines import slurm
from dlrepro.run.engines.slurm import client, submit
from waits import wait_for


@pytest.mark.parametrize("text, indices", [
    ("3", [3]), ("0-3", [0, 1, 2, 3]), ("0-7%2", list(range(8))),
    ("[1,3-4]", [1, 3, 4]), ("[0-2%1]", [0, 1, 2]),
])
def test_task_ranges_as_slurm_writes_them(text, indices):
    assert client.task_ids(text) == indices


def test_flags_over_suite_over_config_file(tmp_path):
    config = tmp_path / "cluster.toml"
    config.write_text('partition = "a"\naccount = "x"\ntime_limit = 90\n'
                      'sbatch = "--reservation=r --nice=5"\n')
    suite = {"name": "s", "slurm": {"partition": "b", "array_throttle": 2}}
    options = slurm.options({"partition": "c", "qos": None,
                             "exclusive": False}, suite, config)
    assert options.partition == "c"
    assert options.account == "x"
    assert options.time_limit == "90"
    assert options.array_throttle == 2
    assert options.exclusive is False
    assert options.sbatch == ("--reservation=r", "--nice=5")


@pytest.mark.parametrize("text, says", [
    ('nodes = 3\n', "unknown Slurm options nodes"),
    ('sbatch = [1, 2]\n', "`sbatch` must be a list"),
    ('partition = \n', "not valid TOML"),
])
def test_bad_config_files_are_one_line(tmp_path, text, says):
    config = tmp_path / "cluster.toml"
    config.write_text(text)
    with pytest.raises(UserError, match=says):
        slurm.options({}, None, config)


def test_a_missing_config_file(tmp_path):
    with pytest.raises(UserError, match="--slurm-config"):
        slurm.options({}, None, tmp_path / "nope.toml")


def _job(network, threads, device="cpu", gpus=0):
    cell = {"framework": "pytorch", "profile": "cpu", "network": network,
            "dataset": "synthetic", "batch_size": 8, "global_batch_size": 8,
            "device": device, "gpus": gpus, "threads": threads,
            "iterations": 2, "warmup": 1, "runtime": "native", "seed": 0,
            "clock_policy": "observe"}
    return plan.job_for(cell, 60)


def test_jobs_asking_for_the_same_resources_share_an_array():
    jobs = [_job("fcn5", 1), _job("fcn8", 1), _job("lstm", 2),
            _job("alexnet", None, "gpu", 2)]
    groups = {a.resources: [j.spec["network"] for j in a.jobs]
              for a in submit.arrays(jobs)}
    assert groups == {("--cpus-per-task=1",): ["fcn5", "fcn8"],
                      ("--cpus-per-task=2",): ["lstm"],
                      ("--gpus=2",): ["alexnet"]}


def test_time_limit_defaults_to_the_timeout_plus_margins():
    options = slurm.Options(partition="p", exclusive=True,
                                    gpu_freq="high")
    [array] = submit.arrays([_job("fcn5", 1)])
    args = submit.sbatch_args(options, array, None, 60)
    assert "--time=12" in args  # 60 s + 30 s grace + 600 s, in minutes
    assert {"--partition=p", "--exclusive", "--gpu-freq=high",
            "--no-requeue", "--cpus-per-task=1"} <= set(args)


# --- multi-node convergence jobs (converge --nodes) ----------------------------

def _converge_jobs(workers, nodes, executor="slurm", runtime="native",
                   threads=None):
    from dlrepro.converge import plan as conv_plan
    return conv_plan.plan(["pytorch"], ["fcn-r"], workers, global_batch=64,
                          epochs=1, synthetic=True, runtime=runtime,
                          nodes=nodes, executor=executor, threads=threads)


def test_a_multi_node_job_is_its_own_cell_with_a_task_per_node(tmp_path):
    one, = _converge_jobs([2], 1)
    two, = _converge_jobs([2], 2)
    assert (one.id, two.id) == ("pytorch-fcn-r-w2", "pytorch-fcn-r-w2-n2")
    assert "nodes" not in one.spec and two.spec["nodes"] == 2
    groups = {a.resources: [j.id for j in a.jobs]
              for a in submit.arrays([one, two])}
    assert groups == {("--cpus-per-task=2",): [one.id],
                      ("--nodes=2", "--ntasks-per-node=1",
                       "--cpus-per-task=1"): [two.id]}
    arrays = submit.arrays([one, two])
    single = submit.script(tmp_path, tmp_path / "s.json", arrays[0])
    multi = submit.script(tmp_path, tmp_path / "s.json", arrays[1])
    assert "-m dlrepro.run.node slurm" in single and "srun" not in single
    assert "srun --kill-on-bad-exit=1 --nodes=2 --ntasks=2 " \
           "--ntasks-per-node=1 " in multi
    assert "-m dlrepro.run.node slurm" in multi
    # Threads are the total: each node gets its share.
    four, = _converge_jobs([4], 2, threads=4)
    [array] = submit.arrays([four])
    assert "--cpus-per-task=2" in array.resources


@pytest.mark.parametrize("nodes, executor, runtime, workers, says", [
    (2, "local", "native", [2], "--nodes 2 needs --executor slurm"),
    (2, "slurm", "docker", [2], "--nodes 2 cannot use the docker runtime"),
    (2, "slurm", "native", [1, 2], "--workers 1 is not a multiple of "
                                   "--nodes 2"),
    (0, "slurm", "native", [2], "--nodes"),
])
def test_nodes_are_checked_before_anything_runs(nodes, executor, runtime,
                                                workers, says):
    with pytest.raises(UserError) as error:
        _converge_jobs(workers, nodes, executor, runtime)
    assert says in str(error.value)
    assert "\n" not in str(error.value)


def test_the_port_comes_from_the_job_id():
    from dlrepro.run import cluster as slurmnode
    assert slurmnode.port_of(0) == 20000
    assert slurmnode.port_of(17) == 20170
    assert slurmnode.port_of(17 + slurmnode.PORT_SLOTS) == 20170
    # Below Linux's default ephemeral range, where outgoing connections
    # take their local ports.
    assert max(slurmnode.port_of(i) for i in range(4000)) + 9 < 32768


def _in_time_wait(port):
    """Whether /proc/net/tcp shows a socket on local `port` in TIME_WAIT
    (state 06)."""
    mark = f":{port:04X}"
    with open("/proc/net/tcp") as table:
        for line in table.readlines()[1:]:
            fields = line.split()
            if fields[1].endswith(mark) and fields[3] == "06":
                return True
    return False


def test_a_port_in_time_wait_is_free_one_listened_on_is_not():
    from dlrepro.run import cluster
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    port = listener.getsockname()[1]
    client = socket.create_connection(("127.0.0.1", port))
    served, _ = listener.accept()
    assert cluster.bind_problem(port) == "is taken by another process"
    listener.close()
    # The served side closes first, so its socket on `port` waits in
    # TIME_WAIT once the client has closed too: what a rendezvous leaves
    # behind on its port.
    served.close()
    assert client.recv(1) == b""
    client.close()
    wait_for(lambda: _in_time_wait(port), 30, 0.05,
             what=f"port {port} in TIME_WAIT")
    plain = socket.socket()
    with pytest.raises(OSError):   # what the check did before
        plain.bind(("0.0.0.0", port))
    plain.close()
    assert cluster.bind_problem(port) is None


def test_podman_and_charliecloud_give_a_multi_node_job_the_nodes_network(
        tmp_path, monkeypatch):
    from dlrepro.run.runtimes import charliecloud, podman
    from dlrepro.run.engines.slurm.environment import from_slurm
    # The engine's variables come from the node the runtime is given,
    # not from this process's environment.
    monkeypatch.setenv("SLURM_JOB_ID", "6")
    node = from_slurm({"SLURM_JOB_ID": "5", "SLURM_NODEID": "0"})
    one, = _converge_jobs([2], 1, runtime="podman")
    two, = _converge_jobs([2], 2, runtime="podman")
    runtime = podman.Runtime()
    runtime.node = node
    argv = runtime.run_argv(one, str(tmp_path), "tag", "name")
    assert argv[argv.index("--network") + 1] == "none"
    assert "SLURM_JOB_ID=5" not in argv
    argv = runtime.run_argv(two, str(tmp_path), "tag", "name")
    assert argv[argv.index("--network") + 1] == "host"
    assert argv[argv.index("SLURM_JOB_ID=5") - 1] == "--env"
    ch = charliecloud.Runtime(ch_run="ch-run")
    ch.node = node
    ch.records = {one.placement.target: {"path": str(tmp_path / "img")}}
    argv = ch.launch(one, tmp_path).argv
    assert "--net" in argv[:6] and "ip link set lo up" in " ".join(argv)
    argv = ch.launch(two, tmp_path).argv
    assert "--net" not in argv[:6] and "lo up" not in " ".join(argv)
    assert "--set-env=SLURM_JOB_ID=5" in argv
    assert "--set-env=SLURM_JOB_ID=6" not in argv


def _fold(tmp_path, own, side):
    """Node 0's result `own` and node 1's `side` ((status, type, message)
    or None: none written) folded as node 0 folds them."""
    from harness import resultfile
    from dlrepro.run import cluster as slurmnode, writer
    from dlrepro.run.paths import JobPaths
    job, = _converge_jobs([2], 2)
    cluster = {"nodes": 2, "node_rank": 0, "hosts": ["n1", "n2"],
               "addresses": ["10.0.0.1", "10.0.0.2"], "interface": "eth0",
               "coordinator": "10.0.0.1", "port": 29500, "network": "x"}
    tmp_path.mkdir()
    path = tmp_path / f"{job.id}.json"
    resultfile.write_atomic(str(path), writer.synthesized(job, *own))
    if side:
        (tmp_path / "nodes").mkdir()
        resultfile.write_atomic(
            str(JobPaths(tmp_path, job.id).side(1)),
            writer.synthesized(job._replace(id=job.id + ".node1"), *side))
    status = slurmnode.fold(path, job, cluster, tmp_path, wait_s=0)
    result = json.loads(path.read_text())
    assert result["status"] == status
    return result


def test_node_zero_folds_the_other_nodes_into_the_jobs_result(tmp_path):
    result = _fold(tmp_path / "a", ("error", "Terminated", "signal 15"),
                   ("error", "Killed", "killed by SIGKILL"))
    assert result["error"] == {
        "type": "NodeFailed", "message": "node 1 (n2) ended error: killed "
                                         "by SIGKILL; node 0 (n1): signal 15"}
    assert [(n["rank"], n["host"], n["status"], n["result"])
            for n in result["engine"]["nodes"]] == [
        (0, "n1", "error", "pytorch-fcn-r-w2-n2.json"),
        (1, "n2", "error", "nodes/pytorch-fcn-r-w2-n2.node1.json")]
    result = _fold(tmp_path / "b", ("error", "Rendezvous", "1/2 joined"),
                   None)
    assert result["error"]["message"].startswith(
        "node 1 (n2) failed: wrote no result")
    # The job's own timeout on every node stays a timeout; node 0's own
    # setup fault stays its reason.
    result = _fold(tmp_path / "c", ("timeout", "Timeout", "stopped"),
                   ("timeout", "Timeout", "stopped"))
    assert (result["status"], result["error"]["type"]) == ("timeout",
                                                           "Timeout")
    result = _fold(tmp_path / "d", ("error", "PortTaken", "port 29500"),
                   None)
    assert result["error"]["type"] == "PortTaken"


# --- the nodes of a multi-node job hold one model ------------------------------

def _node_result(network, test_losses):
    return {"cell": {"network": network},
            "convergence": {"per_epoch": [
                {"epoch": i + 1, "test_loss": loss}
                for i, loss in enumerate(test_losses)]}}


def test_nodes_whose_models_agree_pass():
    from dlrepro.run import cluster as slurmnode
    results = [_node_result("fcn-r", [2.30, 1.90]),
               _node_result("fcn-r", [2.30 * (1 + 1e-7), 1.90])]
    assert slurmnode.replica_disagreement(results) is None


def test_a_node_whose_model_went_astray_is_named():
    # What a Podman two-node MXNet run once did: node 0 ended `ok` with a
    # curve far from node 1's (test loss 7.3 against 2.6).
    from dlrepro.run import cluster as slurmnode
    results = [_node_result("alexnet-r", [2.6, 7.3]),
               _node_result("alexnet-r", [2.6, 2.6]), None]
    reason = slurmnode.replica_disagreement(results)
    assert reason is not None and "node 0 and node 1" in reason
    assert "epoch 2" in reason and "7.3 vs 2.6" in reason


def test_batch_norm_networks_are_not_compared():
    # Their running statistics stay per worker: nodes' models differ there
    # by design.
    from dlrepro.run import cluster as slurmnode
    results = [_node_result("resnet-56", [2.6, 7.3]),
               _node_result("resnet-56", [2.6, 2.6])]
    assert slurmnode.replica_disagreement(results) is None
