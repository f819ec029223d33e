"""Files a user names on the command line (--csv, --sqlite, --html): the
new file appears whole or not at all. A full disk mid-write used to leave
a 0-byte file, or a truncated one, in place of what was there."""
import os
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path

from dlrepro.errors import UserError


@contextmanager
def replacing(path, start_from_existing=False, label=None):
    """Yield a temporary path beside `path` to write; on success it
    replaces `path` in one rename, on any failure it is removed and `path`
    is left as it was. With `start_from_existing` the temporary file starts
    as a copy of `path` (a database that is added to). An OSError becomes a
    one-line UserError: "cannot write <label, else path>: <reason>"."""
    path = Path(path)
    tmp = None
    try:
        fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp",
                                    dir=path.parent)
        os.close(fd)
        tmp = Path(name)
        if start_from_existing and path.exists():
            shutil.copyfile(path, tmp)
        yield tmp
        os.chmod(tmp, _mode_for(path))
        os.replace(tmp, path)
        tmp = None
    except OSError as exc:
        raise UserError(f"cannot write {label or path}: "
                        f"{exc.strerror or exc}")
    finally:
        if tmp is not None and tmp.exists():
            tmp.unlink()


def _mode_for(path):
    """The mode of the file replaced, else what the umask gives a new one
    (mkstemp makes its file private)."""
    try:
        return path.stat().st_mode & 0o777
    except FileNotFoundError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask
