"""The fork server (harness/forkserver.py) with each native framework, in
its venv: what it imports before a fork leaves it safe to fork (one
thread once settled, or MXNet's fork-handled engine threads; no device;
its heap frozen out of the collector),
a cell run the way a cell runs makes it unsafe (its own device and
thread checks say so), and a forked child trains exactly as a process of
its own (`python -m harness run`) does: the same losses from the same
seed, step by step."""
import json
import subprocess

import pytest

from workercells import forked_trains_as_alone, small_cells, venv_python

WAIT_S = 600
FRAMEWORKS = ("jax", "mxnet", "pytorch", "tensorflow")


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_the_server_is_safe_to_fork_after_the_import_not_after_a_cell(
        root, framework):
    probe = subprocess.run(
        [venv_python(root, framework), str(root / "tests" / "fork_probe.py"),
         framework], cwd=str(root), stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True, timeout=WAIT_S)
    assert probe.returncode == 0, probe.stderr[-3000:]
    found = json.loads(probe.stdout.splitlines()[-1])
    assert found["preload"]["failed"] == {}
    assert found["preload"]["modules"]
    assert found["before"] is None, found
    assert found["after"] is not None, found
    # The heap frozen: a child's collections walk only what it makes (an
    # import leaves tens of thousands of objects; a handful were made
    # since the freeze).
    assert found["frozen"] > 20000, found
    assert found["tracked"] < 1000, found
    if framework == "jax":
        # JAX's own check: its backends started
        assert "JAX has started its backends" in found["device_held"]
    if framework == "tensorflow":
        assert "eager context" in found["device_held"]
    if framework == "pytorch":
        assert "torch.cuda.is_initialized()" in found["device_held"]


# Two cell threads everywhere (numpy's OpenBLAS starts its pool at import);
# MXNet with one too, whose engine threads start only at the first fork.
@pytest.mark.parametrize("framework, threads", [
    (framework, 2) for framework in FRAMEWORKS] + [("mxnet", 1)])
def test_a_forked_child_trains_as_a_process_of_its_own(
        root, make_cell, tmp_path, framework, threads):
    cells = small_cells(make_cell, framework, ("fcn5", "lstm32"), threads)
    forked_trains_as_alone(root, venv_python(root, framework), framework,
                           tmp_path, cells, wait_s=WAIT_S)
