"""A results root too deep for a run's files, on the real command line:
`invoke bench --out` of about 4,000 characters (or with a folder name
over the filesystem's limit) is refused when the sweep is planned, in one
line, before any folder is made or any cell runs; the longest --out that
line offers runs (tests/bin/scripted-python)."""
import re
from pathlib import Path

from scripted import BENCH, invoke


def deep(base, length):
    """A path under `base` of exactly `length` characters, in folders of
    at most 200."""
    path = str(base)
    while len(path) < length:
        path += "/" + "d" * min(200, length - len(path) - 1)
    assert len(path) == length
    return Path(path)


def test_an_out_of_4000_characters_is_refused_before_anything_runs(
        tmp_path):
    out = deep(tmp_path, 4050)
    done = invoke(*BENCH, "--network", "fcn5", "--network", "fcn8",
                  "--out", str(out))
    assert done.returncode == 2 and done.stderr.count("\n") == 1, \
        done.stderr
    found = re.fullmatch(
        r"error: --out is too long \(4050 characters\): the run's files "
        r"under it would have paths of up to \d+ bytes, over this "
        r"filesystem's limit of 4095; give a --out of at most (\d+)\n",
        done.stderr)
    assert found, done.stderr
    assert list(tmp_path.iterdir()) == []
    # The length offered is enough.
    room = deep(tmp_path, int(found.group(1)))
    done = invoke(*BENCH, "--network", "fcn5", "--network", "fcn8",
                  "--out", str(room))
    assert done.returncode == 0, done.stderr[-2000:]
    assert len(list((room / "latest").glob("pytorch-*.json"))) >= 2


def test_a_folder_name_over_the_filesystems_limit_is_refused(tmp_path):
    done = invoke(*BENCH, "--network", "fcn5", "--out",
                  str(tmp_path / ("n" * 300)))
    assert (done.returncode, done.stderr) == (
        2, f"error: --out names a folder of 300 characters ({'n' * 24}...): "
           "over this filesystem's limit of 255 for a name\n")
    assert list(tmp_path.iterdir()) == []
