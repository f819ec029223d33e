"""--repeat with --isolation group: each process of a group runs in a
worker of its own and takes the group's cells in its own order
(dlrepro.run.groups.order and permutation), on the real command line with
the fake harness's worker (tests/bin/scripted-python), and the ordering
itself as pure functions."""
import json
import os
import random
import signal
from pathlib import Path

from dlrepro.run import groups, store
from groupcells import alive, job
from paths import SCRIPTED
from scripted import invoke, start
from waits import text_of, wait_for

import fake_harness

NETWORKS = ("fcn5", "fcn8", "fcn-r")
# Five iterations: a slow cell (one second a step) is long enough to be
# caught mid-cell and short enough to be run twice by a test.
GROUP = ["bench", "--framework", "pytorch", "--runtime", "native",
         "--python", SCRIPTED, "--iterations", "5", "--warmup", "1",
         "--threads", "1", "--isolation", "group",
         *[a for n in NETWORKS for a in ("--network", n)]]


def job_id(network, process):
    suffix = f"-p{process}" if process > 1 else ""
    return f"pytorch-cpu-{network}-cpu-b16-t1{suffix}"


def result(run_dir, network, process):
    return json.loads((Path(run_dir) / f"{job_id(network, process)}.json")
                      .read_text())


def workers(run_dir, processes):
    """{worker pid: [(position, network, process, status)] in position
    order} over every job of the run."""
    found = {}
    for process in range(1, processes + 1):
        for network in NETWORKS:
            cell = result(run_dir, network, process)
            isolation = cell["isolation"]
            found.setdefault(isolation["worker_pid"], []).append(
                (isolation["position"], network, process, cell["status"]))
    return {pid: sorted(cells) for pid, cells in found.items()}


def order_of(cells):
    return [network for _position, network, _process, _status in cells]


def expected(process, seed=0):
    return groups.permutation(NETWORKS, seed, process)


def test_each_process_of_a_group_has_a_worker_and_its_own_order(tmp_path):
    done = invoke(*GROUP, "--repeat", "3", "--out", str(tmp_path))
    assert done.returncode == 0, done.stderr
    run_dir = (tmp_path / "latest").resolve()
    found = workers(run_dir, 3)
    assert len(found) == 3
    by_process = {}
    for cells in found.values():
        # one process per worker, every cell once, positions 1..3, all ok
        assert len({process for _p, _n, process, _s in cells}) == 1
        assert [c[0] for c in cells] == [1, 2, 3]
        assert {c[3] for c in cells} == {"ok"}
        by_process[cells[0][2]] = order_of(cells)
    assert by_process == {p: expected(p) for p in (1, 2, 3)}
    # process 1 in plan order, process 2 reversed: the first and the last
    # cells trade places
    assert by_process[1] == list(NETWORKS)
    assert by_process[2] == list(reversed(NETWORKS))
    # run.json says which worker takes which jobs, in which order
    assert store.read_run(run_dir)["workers"] == [
        [job_id(n, p) for n in expected(p)] for p in (1, 2, 3)]
    # what each cell had before it is in its result
    last = result(run_dir, by_process[2][-1], 2)["isolation"]
    assert last["cells_before"] == [job_id(n, 2) for n in by_process[2][:-1]]


def test_a_dry_run_lists_the_jobs_in_the_order_the_workers_take_them():
    done = invoke(*GROUP, "--repeat", "2", "--dry-run")
    assert done.returncode == 0, done.stderr
    listed = [line.split()[0] for line in done.stdout.splitlines()
              if line.startswith("  pytorch-")]
    assert listed == [job_id(n, p) for p in (1, 2) for n in expected(p)]


def test_without_group_isolation_repeat_keeps_the_plan_order(tmp_path):
    cell = GROUP[:GROUP.index("--isolation")] + GROUP[
        GROUP.index("--isolation") + 2:] + ["--isolation", "cell"]
    done = invoke(*cell, "--repeat", "2", "--out", str(tmp_path))
    assert done.returncode == 0, done.stderr
    run_dir = (tmp_path / "latest").resolve()
    assert [e["id"] for e in store.read_run(run_dir)["jobs"]] == \
        [job_id(n, p) for n in NETWORKS for p in (1, 2)]
    assert result(run_dir, "fcn5", 2).get("isolation") is None


def second_worker_is_under_way(run_dir):
    """Process 2's worker (its log named after its first job, fcn-r-p2)
    has finished that cell and begun the slow fcn8-p2."""
    log = Path(run_dir) / f"{job_id('fcn-r', 2)}.worker.log"
    return (fake_harness.SLOW_STEP in text_of(log)
            and (Path(run_dir) / f"{job_id('fcn-r', 2)}.json").exists())


def test_a_kill_mid_group_and_resume_measure_nothing_twice_in_order(
        tmp_path):
    proc = start(*GROUP, "--repeat", "2", "--out", str(tmp_path),
                 modes="fcn8=slow")
    run_dir = wait_for(lambda: (tmp_path / "latest").exists() and
                       (tmp_path / "latest").resolve())
    wait_for(lambda: second_worker_is_under_way(run_dir),
             what="fcn8-p2 under way in the second worker")
    os.kill(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=60)
    first_worker = result(run_dir, "fcn5", 1)["isolation"]["worker_pid"]
    second_worker = result(run_dir, "fcn-r", 2)["isolation"]["worker_pid"]
    wait_for(lambda: not alive(second_worker),
             what="the orphaned worker's end")
    kept = {(n, p): result(run_dir, n, p) for n, p in
            [(n, 1) for n in NETWORKS] + [("fcn-r", 2)]}

    again = invoke(*GROUP, "--repeat", "2", "--out", str(tmp_path),
                   "--resume", modes="fcn8=slow")
    assert again.returncode == 0, again.stderr
    assert "4 of 6 jobs already done" in again.stdout + again.stderr
    # nothing finished is measured again
    assert {key: result(run_dir, *key) for key in kept} == kept
    # the rest of process 2 runs in a fresh worker, in process 2's order
    rest = [result(run_dir, n, 2) for n in ("fcn8", "fcn5")]
    assert [r["status"] for r in rest] == ["ok", "ok"]
    assert [r["isolation"]["position"] for r in rest] == [1, 2]
    pids = {r["isolation"]["worker_pid"] for r in rest}
    assert len(pids) == 1 and pids.isdisjoint({first_worker, second_worker})
    statuses = {e["id"]: e["status"]
                for e in store.read_run(run_dir)["jobs"]}
    assert set(statuses.values()) == {"ok"} and len(statuses) == 6
    assert store.read_run(run_dir)["workers"][1] == [
        job_id(n, 2) for n in ("fcn-r", "fcn8", "fcn5")]


# The ordering as pure functions.

def planned(networks, repeat, **fields):
    """Jobs as bench.plan makes them: cell by cell, its processes in
    turn."""
    return [job(n, p, **fields) for n in networks
            for p in range(1, repeat + 1)]


def ids(jobs):
    return [j.id for j in jobs]


def test_order_puts_each_process_of_a_group_together_in_its_permutation():
    nets = ["a", "b", "c", "d", "e"]
    ordered = groups.order(planned(nets, 3))
    assert sorted(ids(ordered)) == sorted(ids(planned(nets, 3)))
    assert [j.process for j in ordered] == [1] * 5 + [2] * 5 + [3] * 5
    assert [j.spec["network"] for j in ordered[:5]] == nets
    assert [j.spec["network"] for j in ordered[5:10]] == nets[::-1]
    assert [j.spec["network"] for j in ordered[10:]] == \
        groups.permutation(nets, 0, 3)
    assert [len(g) for g in groups.form(ordered)] == [5, 5, 5]


def test_the_permutation_is_the_seeds_and_the_processes_alone():
    nets = list("abcdefgh")
    assert groups.permutation(nets, 0, 1) == nets
    assert groups.permutation(nets, 0, 2) == nets[::-1]
    third = groups.permutation(nets, 0, 3)
    assert sorted(third) == nets and third == groups.permutation(nets, 0, 3)
    drawn = nets[:]
    random.Random("0:3").shuffle(drawn)
    assert third == drawn                # as the docs say
    assert groups.permutation(nets, 1, 3) != third
    assert groups.permutation(nets, 0, 4) != third
    assert nets == list("abcdefgh")     # the input is left as it was


def test_a_shuffle_never_repeats_the_first_two_orders_from_three_cells():
    nets = ["a", "b", "c"]
    for seed in range(50):
        for process in (3, 4, 5):
            order = groups.permutation(nets, seed, process)
            assert sorted(order) == nets
            assert order not in (nets, nets[::-1])
    assert sorted(groups.permutation(["a", "b"], 0, 3)) == ["a", "b"]


def test_order_gathers_each_group_from_anywhere_in_the_plan():
    # An --all plan takes the frameworks in turn: pytorch's c, after
    # tensorflow's cells, still joins pytorch's workers.
    jobs = (planned(["a", "b"], 2) + planned(["a", "b"], 2,
                                             framework="tensorflow")
            + planned(["c"], 2))
    ordered = groups.order(jobs)
    assert ids(ordered) == [
        "pytorch-a", "pytorch-b", "pytorch-c",
        "pytorch-c-p2", "pytorch-b-p2", "pytorch-a-p2",
        "tensorflow-a", "tensorflow-b", "tensorflow-b-p2", "tensorflow-a-p2"]
    assert [ids(g) for g in groups.form(ordered)] == [
        ["pytorch-a", "pytorch-b", "pytorch-c"],
        ["pytorch-c-p2", "pytorch-b-p2", "pytorch-a-p2"],
        ["tensorflow-a", "tensorflow-b"],
        ["tensorflow-b-p2", "tensorflow-a-p2"]]


def test_a_larger_repeat_keeps_the_earlier_processes_orders():
    nets = list("abcdef")
    two = groups.order(planned(nets, 2))
    four = groups.order(planned(nets, 4))
    assert ids(four[:12]) == ids(two)


def test_without_repeat_the_order_is_the_plan():
    jobs = planned(["a", "b", "c"], 1) + planned(["a"], 1, seed=7)
    assert groups.order(jobs) == jobs
    assert [ids(g) for g in groups.form(jobs)] == [
        ["pytorch-a", "pytorch-b", "pytorch-c"], ["pytorch-a"]]


def test_an_all_frameworks_plan_runs_each_frameworks_cells_in_one_worker():
    """The plan takes the frameworks in turn, suite group by suite group;
    grouped, each framework's cells are gathered into its worker."""
    common = ["bench", "--framework", "pytorch", "--framework", "tensorflow",
              "--runtime", "native", "--network", "fcn5", "--network",
              "alexnet", "--dry-run"]
    listed = {}
    for mode in ("cell", "group"):
        done = invoke(*common, "--isolation", mode)
        assert done.returncode == 0, done.stderr
        listed[mode] = [line.split()[0].split("-cpu-")[0:2]
                        for line in done.stdout.splitlines()
                        if line.startswith("  ")]
    frameworks = {mode: [f for f, _n in cells]
                  for mode, cells in listed.items()}
    assert frameworks["cell"] == ["pytorch", "tensorflow"] * 2
    assert frameworks["group"] == ["pytorch"] * 2 + ["tensorflow"] * 2
