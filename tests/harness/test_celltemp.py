"""A forked cell's temp dir is its own (harness/celltemp.py): its TMPDIR a
fresh folder inside the server's, the compile caches' variables that
PyTorch's import in the server pointed into the server's temp dir moved
into it, and the folder removed once the cell has ended; with real
PyTorch, a torch.compile cell forked by the server leaves nothing
compiled in the server's temp dir."""
import json
import os
import subprocess
import tempfile

import processes

from harness import celltemp, forkserver, worker
from workercells import venv_python, write_spec

WAIT_S = 600


def test_the_caches_under_the_servers_temp_dir_move_to_the_cells(tmp_path):
    shared, folder = str(tmp_path / "server"), str(tmp_path / "server" / "c")
    env = celltemp.environment({
        "TORCHINDUCTOR_CACHE_DIR": shared + "/torchinductor_me",
        "TRITON_CACHE_DIR": "/home/me/triton",  # the user's: kept
        "DATA": shared + "/data",  # not a cache: kept
        "TMPDIR": shared}, shared, folder)
    assert env == {"TORCHINDUCTOR_CACHE_DIR": folder + "/torchinductor_me",
                   "TRITON_CACHE_DIR": "/home/me/triton",
                   "DATA": shared + "/data", "TMPDIR": folder}
    # A sibling folder whose name starts like the server's is not inside.
    assert celltemp.environment(
        {"TRITON_CACHE_DIR": shared + "-other/t"}, shared, folder)[
            "TRITON_CACHE_DIR"] == shared + "-other/t"


def test_a_cells_folder_is_fresh_and_removed(tmp_path):
    first, second = celltemp.make(str(tmp_path)), celltemp.make(str(tmp_path))
    assert first != second
    assert os.path.dirname(first) == str(tmp_path)
    open(os.path.join(first, "kernel.so"), "w").close()
    celltemp.remove(first)
    assert sorted(os.listdir(str(tmp_path))) == [os.path.basename(second)]


def test_a_cell_shares_the_servers_where_none_of_its_own_can_be_made(
        monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "gone"))
    assert forkserver.own_temp_dir() == (str(tmp_path / "gone"), None)
    assert "no temp dir of its own for the cell" in capsys.readouterr().err


def test_a_forked_compile_cell_caches_nothing_in_the_servers_temp_dir(
        root, make_cell, tmp_path):
    python = venv_python(root, "pytorch")
    shared = tmp_path / "server-tmp"
    shared.mkdir()
    cell = make_cell(framework="pytorch", network="fcn-r", batch_size=2,
                     global_batch_size=2, iterations=1, warmup=1, threads=2,
                     compile="default")
    spec = write_spec(tmp_path, "a", cell)
    # As natively: no cache variable of the caller's, the server's own
    # temp dir.
    env = celltemp.without_caches(os.environ)
    env["TMPDIR"] = str(shared)
    with open(str(tmp_path / "log"), "w") as err:
        proc = processes.start(
            [python, "-s", "-m", "harness", "worker", "--fork"],
            cwd=str(root), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=err, text=True, env=env)
        out, _ = proc.communicate(worker.command_line(spec), timeout=WAIT_S)
    log = (tmp_path / "log").read_text()[-3000:]
    assert proc.returncode == 0, log
    result = json.loads((tmp_path / "a.json").read_text())
    assert result["status"] == "ok", result["error"]
    assert result["isolation"]["mode"] == "fork", result["isolation"]
    assert result["compilation"]["mode"] == "default"
    # What the server's import made (inductor's cache folder), empty: the
    # cell compiled into its own folder, which is gone.
    made = sorted(p.name for p in shared.iterdir())
    assert [name.startswith("torchinductor_") for name in made] == [True], \
        made
    assert sorted(str(p.relative_to(shared))
                  for p in shared.rglob("*")) == made, log
