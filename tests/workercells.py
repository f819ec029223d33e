"""Fixtures every in-process test of harness.worker needs (import them by
name into the module: pytest then applies the autouse ones there), and
the spec files and standard input a worker reads."""
import io
import json
import os
import select
import subprocess
import time

import processes
import pytest

from dlrepro.run import store
from harness import worker


@pytest.fixture(autouse=True)
def restore_thread_variables(monkeypatch):
    # run_cell sets the thread variables of this process: restore them after.
    from harness.threads import THREAD_ENV_VARS
    for name in THREAD_ENV_VARS:
        monkeypatch.delenv(name, raising=False)


def write_spec(folder, name, cell, **more):
    """<name>.spec.json in `folder`, as the host writes it (`more`: further
    keys of the spec); its path."""
    path = folder / "{}.spec.json".format(name)
    spec = {"cell": cell, "container": None}
    spec.update(more)
    path.write_text(json.dumps(spec))
    return str(path)


def commands(paths):
    """A worker's standard input naming these spec files."""
    return io.StringIO("".join(worker.command_line(p) for p in paths))


class ProtocolLines(object):
    """The `event {json}` lines a worker process (self.proc) writes on its
    standard output, each waited for at most wait_s seconds; a subclass
    says in ended() what went wrong when the worker ends instead."""

    wait_s = 300
    pending = b""   # read beyond the last line returned

    def next_event(self):
        deadline = time.monotonic() + self.wait_s
        fd = self.proc.stdout.fileno()
        pending = self.pending
        while b"\n" not in pending:
            left = deadline - time.monotonic()
            assert left > 0, "no event from the worker"
            if select.select([fd], [], [], left)[0]:
                chunk = os.read(fd, 4096)
                assert chunk, self.ended()
                pending += chunk
        line, self.pending = pending.split(b"\n", 1)
        word, fields = line.decode().split(" ", 1)
        return word, json.loads(fields)


def venv_python(root, framework):
    """The Python of the framework's native CPU venv; the test skips where
    that venv is not made."""
    python = root / ".venvs" / "{}-cpu".format(framework) / "bin" / "python"
    if not python.exists():
        pytest.skip("no .venvs/{}-cpu".format(framework))
    return str(python)


def small_cells(make_cell, framework, networks, threads=2):
    """A cell per network, as small as one gets: batch 2, one warm-up and
    3 timed iterations."""
    return [make_cell(framework=framework, network=network, batch_size=2,
                      global_batch_size=2, iterations=3, warmup=1,
                      threads=threads)
            for network in networks]


def two_cells_in_one_worker(root, framework, folder, cells, *flags,
                            wait_s=600, python=None):
    """Cells a and b run by one `python -m harness worker` (`flags`: its
    options, --fork) in the framework's venv (or `python`), its standard
    error in folder/log: both results, each schema-valid and ok."""
    paths = [write_spec(folder, name, cell)
             for name, cell in zip("ab", cells)]
    with open(str(folder / "log"), "w") as err:
        proc = processes.start(
            [python or venv_python(root, framework), "-s", "-m", "harness",
             "worker", *flags], cwd=str(root), stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=err, text=True)
        out, _ = proc.communicate(
            "".join(worker.command_line(p) for p in paths), timeout=wait_s)
    log = (folder / "log").read_text()[-3000:]
    assert proc.returncode == 0, log
    assert out.count("cell-done") == 2, out + log
    results = [json.loads((folder / n).read_text())
               for n in ("a.json", "b.json")]
    for result in results:
        assert store.validation_errors(result) == [], log
        assert result["status"] == "ok", result["error"]
    return results


def forked_trains_as_alone(root, python, framework, folder, cells,
                           wait_s=600):
    """Cells a and b forked by one fork server, then each in a process of
    its own (`python -m harness run`), all with `python`: asserts that the
    server preloaded its framework, forked both (its own children, frozen
    heap inherited) and that each child's losses equal the lone process's,
    step by step. The forked results."""
    forked = two_cells_in_one_worker(root, framework, folder, cells,
                                     "--fork", wait_s=wait_s, python=python)
    for found in forked:
        isolation = found["isolation"]
        assert isolation["mode"] == "fork", isolation
        assert isolation["parent"]["preload"]["failed"] == {}, isolation
        assert isolation["parent"]["preload"]["modules"], isolation
        # what the server froze stays frozen in the child, which then
        # freezes its own model too (None: a Python before 3.7)
        frozen = isolation["parent"]["frozen_objects"]
        if frozen is not None:
            assert 0 < frozen < found["environment"]["python_gc"][
                "frozen_objects"], isolation
    isolations = [f["isolation"] for f in forked]
    assert isolations[0]["worker_pid"] == isolations[1]["worker_pid"]
    assert isolations[0]["pid"] != isolations[1]["pid"]
    for name, cell, found in zip("ab", cells, forked):
        alone = subprocess.run(
            [python, "-s", "-m", "harness", "run", "--spec",
             write_spec(folder, name + "-alone", cell), "--out",
             str(folder / (name + "-alone.json"))], cwd=str(root),
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            timeout=wait_s)
        assert alone.returncode == 0, alone.stderr[-3000:]
        alone = json.loads((folder / (name + "-alone.json")).read_text())
        assert alone["status"] == "ok", alone["error"]
        assert found["loss"]["warmup"] == alone["loss"]["warmup"]
        assert found["loss"]["per_iteration"] == \
            alone["loss"]["per_iteration"]
    return forked
