"""Fixtures every in-process test of harness.worker needs (import them by
name into the module: pytest then applies the autouse ones there), and
the spec files and standard input a worker reads."""
import io
import json

import pytest

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
