"""A kill between a run folder's mkdir and its run.json (SIGKILL cannot be
caught, so nothing cleans up then) leaves a folder with no run in it; the
next `invoke bench` under the same results root removes it, on the real
command line (tests/bin/scripted-python). It leaves alone what may be a
run starting (a folder younger than runfolder.ABANDONED_AFTER_S), a folder
holding anything else, and folders not named as runs are."""
import os
import time

from scripted import bench


def folder(out, name, age_s, files=()):
    path = out / name
    path.mkdir(parents=True)
    for file in files:
        (path / file).write_text("")
    then = time.time() - age_s
    os.utime(path, (then, then))
    return path


def test_the_next_run_removes_a_folder_a_kill_left_empty(tmp_path):
    old = 3600  # well past runfolder.ABANDONED_AFTER_S
    empty = folder(tmp_path, "20261204T101010Z-smoke-0a1b", old)
    torn = folder(tmp_path, "20261204T101011Z-smoke-0a1c", old,
                  [".lock", ".tmp-k2j3h4.json"])
    starting = folder(tmp_path, "20261204T101012Z-smoke-0a1d", 0)
    kept = folder(tmp_path, "20261204T101013Z-smoke-0a1e", old,
                  ["notes.txt"])
    mine = folder(tmp_path, "scratch", old)
    done = bench(tmp_path, "fcn5")
    assert done.returncode == 0, done.stderr
    assert not empty.exists() and not torn.exists()
    assert starting.is_dir() and mine.is_dir()
    assert (kept / "notes.txt").exists()
    runs = [p for p in tmp_path.iterdir()
            if (p / "run.json").exists() and not p.is_symlink()]
    assert runs == [(tmp_path / "latest").resolve()]
