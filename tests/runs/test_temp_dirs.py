"""Natively, each process the host starts (a cell's, a group's worker, a
fork server) gets a temp dir of its own, removed once the process has
ended (dlrepro.run.runtimes.tempdirs.TempDirs), so that a run leaves
nothing in the host's temp dir: on the real command line, with the
scripted harness in every mode (a cell killed mid-cell too, as a
TensorFlow cell leaves its autograph sources when killed), and with real
PyTorch, whose torchrun makes a log folder there for every data-parallel
run and never removes it. What a SIGKILL of the sweep leaves goes with
the next run, and only what a process that has ended made."""
import os
import socket
import subprocess
import sys
import tempfile

import pytest

from cli import invoke
from dlrepro.run import runtimes, store
from dlrepro.run.runtimes import tempdirs
from harness import celltemp
from groupcells import job
from scripted import BENCH


@pytest.fixture
def host_tmp(tmp_path):
    """The temp dir `invoke` runs with, and so the one its processes'
    own are made in."""
    folder = tmp_path / "host-tmp"
    folder.mkdir()
    return folder


def left_in(folder):
    return sorted(p.name for p in folder.iterdir())


def test_each_process_gets_its_own_and_its_end_removes_it(
        monkeypatch, host_tmp, tmp_path):
    monkeypatch.setattr(tempfile, "tempdir", str(host_tmp))
    runtime = runtimes.get("native", python=sys.executable)
    first, second = job("fcn5", isolation="fork"), job("fcn8")
    for j in (first, second):
        runtime.pythons[j.placement.target] = sys.executable
    cells = [runtime.launch(j, tmp_path).env["TMPDIR"]
             for j in (first, second)]
    worker = runtime.worker_launch(
        first, tmp_path, runtime.launch(first, tmp_path)).env["TMPDIR"]
    made = cells[1:] + [worker]
    assert len(set(made)) == 2
    assert all(os.path.dirname(f) == str(host_tmp) for f in made)
    # A cell's end leaves its worker's, whose children still use it.
    runtime.cleanup(first, tmp_path)
    runtime.cleanup(second, tmp_path)
    assert left_in(host_tmp) == [os.path.basename(worker)]
    (host_tmp / worker / "left-by-a-child").write_text("")
    runtime.worker_cleanup(first, tmp_path)
    assert left_in(host_tmp) == []


def test_a_cell_compiles_into_its_own_not_where_the_caller_caches(
        monkeypatch, host_tmp, tmp_path):
    # torch.compile's cache then lives in the cell's temp dir, empty at
    # its start, as in a container.
    monkeypatch.setattr(tempfile, "tempdir", str(host_tmp))
    for name in celltemp.CACHE_VARIABLES:
        monkeypatch.setenv(name, str(tmp_path / name))
    runtime = runtimes.get("native", python=sys.executable)
    first = job("fcn5", isolation="fork")
    runtime.pythons[first.placement.target] = sys.executable
    launch = runtime.launch(first, tmp_path)
    worker = runtime.worker_launch(first, tmp_path, launch)
    for env in (launch.env, worker.env):
        assert not set(celltemp.CACHE_VARIABLES) & set(env)
        assert env["TMPDIR"].startswith(str(host_tmp))
    runtime.cleanup(first, tmp_path)
    runtime.worker_cleanup(first, tmp_path)
    assert left_in(host_tmp) == []


@pytest.mark.parametrize("isolation", ["cell", "group", "fork"])
def test_what_a_cell_leaves_goes_with_its_process_killed_or_not(
        isolation, host_tmp, tmp_path):
    # The scripted harness leaves a file in its temp dir, as a framework
    # would, in a cell that ends ok and in one it then SIGKILLs.
    done = invoke(*BENCH, "--isolation", isolation,
                  "--network", "fcn5", "--network", "fcn8",
                  "--out", str(tmp_path / "out"),
                  modes="fcn5=litter-ok,fcn8=litter-kill",
                  env=dict(os.environ, TMPDIR=str(host_tmp)))
    run_dir = (tmp_path / "out" / "latest").resolve()
    assert sorted(e["status"] for e in store.read_run(run_dir)["jobs"]) \
        == ["error", "ok"], done.stdout + done.stderr
    assert left_in(host_tmp) == []


def test_a_data_parallel_pytorch_run_leaves_nothing_behind(
        framework_python, host_tmp, tmp_path):
    framework_python("pytorch")
    done = invoke("converge", "--framework", "pytorch", "--network", "fcn-r",
                  "--synthetic", "--train-samples", "128", "--test-samples",
                  "64", "--global-batch-size", "64", "--epochs", "1",
                  "--workers", "2", "--runtime", "native", "--out",
                  str(tmp_path / "out"),
                  env=dict(os.environ, TMPDIR=str(host_tmp)))
    assert done.returncode == 0, done.stdout + done.stderr
    assert left_in(host_tmp) == []


@pytest.mark.parametrize("isolation", ["cell", "fork"])
def test_the_next_run_removes_what_a_killed_sweeps_processes_left(
        isolation, host_tmp, tmp_path):
    # fcn5 leaves a file in its temp dir, then SIGKILLs the sweep, whose
    # cleanup never runs; the next run of the same user removes it.
    env = dict(os.environ, TMPDIR=str(host_tmp))
    out = str(tmp_path / "out")
    killed = invoke(*BENCH, "--isolation", isolation, "--network", "fcn5",
                    "--network", "fcn8", "--out", out,
                    modes="fcn5=litter-ok-kill-parent", env=env)
    assert killed.returncode == -9, killed.stdout + killed.stderr
    left = left_in(host_tmp)
    assert left and all(n.startswith(tempdirs.PREFIX) for n in left)
    again = invoke(*BENCH, "--isolation", isolation, "--network", "fcn5",
                   "--network", "fcn8", "--out", out, "--resume", env=env)
    assert again.returncode == 0, again.stdout + again.stderr
    assert left_in(host_tmp) == []


def test_only_folders_whose_maker_has_ended_are_removed(host_tmp):
    ended = subprocess.run([sys.executable, "-c", "import os; "
                            "print(os.getpid())"], capture_output=True,
                           text=True, check=True)
    dead = int(ended.stdout)
    mine = tempdirs.maker(os.getpid())
    elsewhere = tempdirs.maker(dead).replace(
        socket.gethostname(), "another-node")
    folders = {
        "gone": tempdirs.PREFIX + tempdirs.maker(dead) + "x1y2z3_a",
        "live": tempdirs.PREFIX + mine + "b4c5d6e7",
        "other host": tempdirs.PREFIX + elsewhere + "f8g9h0i1",
        "other namespace": "dlrepro-tmp-{}-1-{}-".format(
            dead, socket.gethostname()) + "j2k3l4m5",
    }
    for name in folders.values():
        (host_tmp / name).mkdir()
    # Named as the ended maker's, but no folder of its: left alone.
    not_folders = [tempdirs.PREFIX + tempdirs.maker(dead) + tail
                   for tail in ("file", "symlink")]
    (host_tmp / not_folders[0]).write_text("")
    os.symlink(host_tmp / folders["live"], host_tmp / not_folders[1])
    tempdirs.remove_orphans(str(host_tmp))
    assert set(left_in(host_tmp)) == (
        set(folders.values()) - {folders["gone"]}) | set(not_folders)
