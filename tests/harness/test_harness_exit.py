"""`python -m harness run` and `worker` leave without the interpreter's
teardown once their results are on disk (harness.__main__.leave), yet
still run the atexit handlers (a clock session's restore is one). Real
PyTorch in its venv; a sitecustomize on the harness's path registers an
atexit handler and starts a thread that waits for the main thread's end in
the teardown, and holds an object finalized at exit (weakref.finalize),
each writing a file when it runs."""
import json
import os
import subprocess

import pytest

import processes

MARKING = '''
import atexit, os, threading, weakref
MARKS = os.environ["EXIT_MARKS"]
ORIGIN = os.getpid()

def _mark(name):
    with open(os.path.join(MARKS, name), "w") as handle:
        handle.write("ran")

atexit.register(_mark, "atexit")


class _Held(object):
    pass


# An object of the process that started, finalized at exit: by that
# process, or (marked apart) by a process forked from it.
_HELD = _Held()
weakref.finalize(_HELD, lambda: _mark(
    "finalizer" if os.getpid() == ORIGIN else "finalizer-in-child"))
'''
# Apart: a fork server holding a second thread would not fork.
SITE = MARKING + '''

def _after_main():
    # Runs once the interpreter's teardown has stopped the main thread
    # (and, the thread being non-daemon, the teardown waits for it).
    threading.main_thread().join()
    _mark("teardown")


threading.Thread(target=_after_main).start()
'''
WAIT_S = 300


def marked_env(root, tmp_path, site_code=SITE):
    """(the PyTorch venv's python, an environment whose sitecustomize
    (`site_code`) leaves the marks, the folder they land in)."""
    python = root / ".venvs" / "pytorch-cpu" / "bin" / "python"
    if not python.exists():
        pytest.skip("no .venvs/pytorch-cpu")
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(site_code)
    marks = tmp_path / "marks"
    marks.mkdir()
    env = dict(os.environ, PYTHONPATH=f"{site}:{root}",
               EXIT_MARKS=str(marks))
    return python, env, marks


def exit_marks(root, tmp_path, make_cell, *command, stdin=None,
               site_code=SITE):
    """The marks a harness command left: a subset of {"atexit",
    "teardown", "finalizer", "finalizer-in-child"}; and its exit status."""
    python, env, marks = marked_env(root, tmp_path, site_code)
    cell = make_cell(network="fcn5", batch_size=1, global_batch_size=1,
                     iterations=2, warmup=1)
    spec = tmp_path / "cell.spec.json"
    spec.write_text(json.dumps({"cell": cell, "container": None}))
    argv = [str(python), "-m", "harness"] + [
        str(spec) if part == "SPEC" else part for part in command]
    proc = processes.start(argv, cwd=str(root), env=env,
                           stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE)
    out, err = proc.communicate(
        (stdin or "").replace("SPEC", str(spec)).encode(), timeout=WAIT_S)
    assert (tmp_path / "cell.json").exists(), err.decode()[-2000:]
    return set(os.listdir(str(marks))), proc.returncode


@pytest.mark.parametrize("command,stdin", [
    (["run", "--spec", "SPEC", "--out", "OUT"], None),
    (["worker"], '"SPEC"\n')], ids=["run", "worker"])
def test_run_and_worker_skip_the_teardown_but_not_atexit(
        root, tmp_path, make_cell, command, stdin):
    command = [str(tmp_path / "cell.json") if part == "OUT" else part
               for part in command]
    marks, status = exit_marks(root, tmp_path, make_cell, *command,
                               stdin=stdin)
    assert status == 0
    assert marks == {"atexit", "finalizer"}


def test_a_forked_cell_leaves_the_servers_finalizers_to_the_server(
        root, tmp_path, make_cell):
    # The server's object is finalized once, by the server, not again by
    # the child that ran the cell.
    marks, status = exit_marks(root, tmp_path, make_cell, "worker", "--fork",
                               stdin='"SPEC"\n', site_code=MARKING)
    isolation = json.loads((tmp_path / "cell.json").read_text())["isolation"]
    assert isolation["mode"] == "fork" and "fork_refused" not in isolation
    assert isolation["pid"] != isolation["worker_pid"]
    assert status == 0
    assert marks == {"atexit", "finalizer"}


def test_other_commands_exit_as_usual(root, tmp_path):
    python, env, marks = marked_env(root, tmp_path)
    done = subprocess.run(
        [str(python), "-m", "harness", "networks"], cwd=str(root), env=env,
        capture_output=True, timeout=WAIT_S)
    assert done.returncode == 0, done.stderr
    assert set(os.listdir(str(marks))) == {"atexit", "teardown",
                                           "finalizer"}
