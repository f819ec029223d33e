"""Each framework's default isolation (dlrepro.run.groups.assign): where
neither --isolation nor the suite names a mode, the frameworks whose
iteration times the side-by-side benchmark found equal in both modes
share a worker per group (GROUP_BY_DEFAULT) or fork each cell from a
server per key (FORK_DEFAULTS: CPU cells where fork was measured), and the
others run a process per cell, in one run; on the real command line with
the scripted harness, and as pure functions."""
import json

import pytest

from dlrepro.errors import UserError
from dlrepro.run import groups, store
from dlrepro.run.engines import ENGINES
from groupcells import job
from scripted import BENCH, invoke

LOCAL = ENGINES["local"]

NETWORKS = ("fcn5", "fcn-r")
# PyTorch's default is fork natively on the CPU, Caffe's group (it runs
# natively only with a --python of its own, as the scripted harness is
# here): one sweep with both.
MIXED = (BENCH[:2] + ["caffe"] + BENCH[1:]
         + [a for n in NETWORKS for a in ("--network", n)])


def results(run_dir):
    return {e["id"]: json.loads((run_dir / f"{e['id']}.json").read_text())
            for e in store.read_run(run_dir)["jobs"]}


def test_one_sweep_groups_caffe_and_forks_pytorch(tmp_path):
    done = invoke(*MIXED, "--out", str(tmp_path))
    assert done.returncode == 0, done.stderr
    run_dir = (tmp_path / "latest").resolve()
    record = store.read_run(run_dir)
    assert record["isolation"] == {"pytorch": "fork", "caffe": "group"}
    found = results(run_dir)
    assert {r["status"] for r in found.values()} == {"ok"}
    caffe = [r for i, r in found.items() if i.startswith("caffe-")]
    torch = [r for i, r in found.items() if i.startswith("pytorch-")]
    assert len(caffe) == len(torch) == len(NETWORKS)
    # Caffe's two cells in one worker, one after the other
    assert [r["isolation"]["mode"] for r in caffe] == ["group"] * 2
    assert sorted(r["isolation"]["position"] for r in caffe) == [1, 2]
    assert len({r["isolation"]["worker_pid"] for r in caffe}) == 1
    # PyTorch's two, each a child of one fork server
    assert [r["isolation"]["mode"] for r in torch] == ["fork"] * 2
    assert len({r["isolation"]["worker_pid"] for r in torch}) == 1
    assert sorted(record["workers"]) == sorted(
        [[i for i in found if i.startswith(f"{fw}-")]
         for fw in ("pytorch", "caffe")])


def test_fork_is_a_default_only_where_it_was_measured_against_cell():
    """Fork was measured against cell on the CPU only: natively, under
    Docker, Podman and Charliecloud for PyTorch, JAX and MXNet, under
    Docker, Podman and Charliecloud for CNTK and Caffe, natively and
    in its image for TensorFlow."""
    assert groups.default_for("tensorflow", "native", LOCAL, "cpu") == "fork"
    assert groups.default_for("tensorflow", "native", ENGINES["slurm"],
                              "cpu") == "fork"
    assert groups.default_for("tensorflow", "native", LOCAL, "gpu") == \
        "group"
    assert groups.default_for("tensorflow", "docker", LOCAL, "cpu") == \
        "fork"
    assert groups.default_for("tensorflow", "charliecloud", LOCAL,
                              "cpu") == "fork"
    assert groups.default_for("tensorflow", "charliecloud", LOCAL,
                              "gpu") == "group"
    assert groups.default_for("pytorch", "native", LOCAL, "gpu") == "cell"
    assert groups.default_for("pytorch", "docker", LOCAL, "gpu") == "cell"
    assert groups.default_for("mxnet", "docker", ENGINES["slurm"],
                              "cpu") == "fork"
    assert groups.default_for("jax", "native", ENGINES["slurm"],
                              "cpu") == "fork"
    assert groups.default_for("cntk", "docker", LOCAL, "cpu") == "fork"
    assert groups.default_for("cntk", "docker", ENGINES["slurm"],
                              "cpu") == "fork"
    assert groups.default_for("cntk", "docker", LOCAL, "gpu") == "cell"
    assert groups.default_for("cntk", "podman", LOCAL, "cpu") == "fork"
    assert groups.default_for("caffe", "podman", LOCAL, "gpu") == "group"
    assert groups.default_for("pytorch", "charliecloud", LOCAL,
                              "cpu") == "fork"
    assert groups.default_for("pytorch", "charliecloud", LOCAL,
                              "gpu") == "cell"
    assert groups.default_for("caffe", "charliecloud", LOCAL,
                              "cpu") == "fork"
    assert groups.default_for("caffe", "charliecloud", LOCAL,
                              "gpu") == "group"
    assert groups.default_for("mxnet", "charliecloud", LOCAL,
                              "gpu") == "cell"


def test_a_named_mode_overrides_every_framework_default(tmp_path):
    done = invoke(*MIXED, "--isolation", "cell", "--out", str(tmp_path))
    assert done.returncode == 0, done.stderr
    run_dir = (tmp_path / "latest").resolve()
    assert store.read_run(run_dir)["isolation"] == "cell"
    assert all("isolation" not in r for r in results(run_dir).values())
    assert not list(run_dir.glob("*.worker.log"))


def test_compare_names_the_framework_measured_under_another_mode(tmp_path):
    assert invoke(*MIXED, "--isolation", "cell",
                  "--out", str(tmp_path)).returncode == 0
    base = (tmp_path / "latest").resolve().name
    assert invoke(*MIXED, "--out", str(tmp_path)).returncode == 0
    compared = invoke("compare", "--out", str(tmp_path), "--against", base)
    assert compared.returncode == 0, compared.stderr
    assert ("different isolation modes (caffe: base cell, this run group; "
            "pytorch: base cell, this run fork)"
            in compared.stdout), compared.stdout


# As pure functions.

@pytest.mark.parametrize("runtime,executor,expected", [
    ("native", "local", {"pytorch": "fork", "mxnet": "fork", "cntk": "cell",
                         "jax": "fork", "tensorflow": "fork",
                         "caffe": "group"}),
    ("docker", "local", {"pytorch": "fork", "jax": "fork", "mxnet": "fork",
                         "caffe": "fork", "cntk": "fork",
                         "tensorflow": "fork"}),
    ("podman", "local", {"pytorch": "fork", "mxnet": "fork", "jax": "fork",
                         "caffe": "fork", "cntk": "fork",
                         "tensorflow": "fork"}),
    ("native", "slurm", {"jax": "fork", "tensorflow": "fork"}),
    ("charliecloud", "slurm", {"pytorch": "fork", "caffe": "fork",
                               "cntk": "fork", "jax": "fork",
                               "mxnet": "fork", "tensorflow": "fork"}),
    ("apptainer", "local", {"tensorflow": "cell"}),
])
def test_the_default_is_the_frameworks_where_groups_can_run(
        runtime, executor, expected):
    for framework, mode in expected.items():
        assert groups.default_for(framework, runtime,
                                  ENGINES[executor]) == mode


def test_a_named_mode_is_every_jobs_and_none_is_each_frameworks():
    jobs = [job("a", framework=framework, isolation="cell")
            for framework in ("pytorch", "jax", "caffe")]
    assert [j.isolation for j in groups.assign(jobs, "cell", "native",
                                               LOCAL)] == ["cell"] * 3
    assert [j.isolation for j in groups.assign(jobs, "group", "native",
                                               LOCAL)] == ["group"] * 3
    assert [j.isolation for j in groups.assign(jobs, None, "native",
                                               LOCAL)] == \
        ["fork", "fork", "group"]
    assert groups.summary(groups.assign(jobs, None, "native", LOCAL)) == \
        {"pytorch": "fork", "jax": "fork", "caffe": "group"}
    assert groups.summary(groups.assign(jobs, "group", "native", LOCAL)) \
        == "group"
    assert groups.summary([]) == "cell"


def test_the_suite_key_names_a_mode_and_the_flag_overrides_it():
    assert groups.mode_of(None, {}) is None
    assert groups.mode_of(None, {"isolation": "group"}) == "group"
    assert groups.mode_of("cell", {"isolation": "group"}) == "cell"
    with pytest.raises(UserError, match="unknown isolation 'proc'"):
        groups.mode_of(None, {"isolation": "proc"})


def test_cells_keep_their_place_and_a_group_runs_where_it_first_appears():
    # An --all plan, network by network: JAX's b joins JAX's worker.
    plan = [job("a", isolation="cell"), job("a", framework="jax"),
            job("b", isolation="cell"), job("b", framework="jax"),
            job("b", 2, framework="jax")]
    ordered = groups.order(plan)
    assert [j.id for j in ordered] == [
        "pytorch-a", "jax-a", "jax-b", "jax-b-p2", "pytorch-b"]
    assert groups.planned_workers(ordered) == [["jax-a", "jax-b"],
                                               ["jax-b-p2"]]
    # Cells that cannot run here (Caffe natively) start no worker.
    unrunnable = [job(n, framework="caffe")._replace(
        skip_reason="no environment") for n in "ab"]
    assert groups.planned_workers(groups.order(unrunnable + plan)) == \
        [["jax-a", "jax-b"], ["jax-b-p2"]]
    cells = [job(n, isolation="cell") for n in "abc"]
    assert groups.order(cells) == cells
    assert groups.planned_workers(cells) == []


def test_compare_line_says_which_frameworks_changed_mode():
    mixed = {"pytorch": ("cell",), "jax": ("group",)}
    assert groups.compare_line(mixed, mixed) is None
    assert groups.compare_line({"pytorch": ("cell",), "jax": ("cell",)},
                               mixed) == (
        "note: the runs were measured under different isolation modes "
        "(jax: base cell, this run group); a difference may be the "
        "process's, not the framework's")
    # Frameworks not in both runs are not compared.
    assert groups.compare_line(
        {"pytorch": ("cell",), "tensorflow": ("group",)},
        {"pytorch": ("cell",), "jax": ("group",)}) is None
    assert groups.compare_line(
        {"pytorch": ("cell",), "tensorflow": ("group",)},
        {"pytorch": ("cell",)}) is None
    assert "(base: cell, this run: group)" in groups.compare_line(
        {"pytorch": ("cell",)}, {"pytorch": ("group",)})
    # A framework measured under both modes (a resume under another one).
    assert "(pytorch: base cell, this run cell and group)" in \
        groups.compare_line({"pytorch": ("cell",)},
                            {"pytorch": ("cell", "group")})


def test_a_jobs_mode_is_its_results_then_its_entrys_then_its_runs():
    record = {"isolation": {"pytorch": "group"}}
    entry = {"spec": {"framework": "pytorch"}}
    assert groups.job_mode(entry, {"isolation": {"mode": "group"}},
                           {}) == "group"
    assert groups.job_mode(entry, {}, record) == "cell"
    assert groups.job_mode(dict(entry, isolation="cell"), None,
                           record) == "cell"
    assert groups.job_mode(entry, None, record) == "group"
