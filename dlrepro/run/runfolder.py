"""A run folder's life: a new one made, its `latest` pointer, its lock,
what a resume finds in it (stale temps, another cell's result). run.json
itself is dlrepro.run.runrecord's; reading a folder back is
dlrepro.run.store's (the layout is written there).
"""
import errno
import fcntl
import os
import re
import secrets
import socket
import stat
import time
from contextlib import contextmanager
from pathlib import Path

from harness import resultfile
from harness.blocks import utc_now

from dlrepro.errors import UserError
from dlrepro.run.paths import LONGEST_SUFFIX, RUN_RECORD, SIDE_DIR, JobPaths
from dlrepro.run.store import (LATEST, LOCK_NAME, foreign_cell,
                               foreign_run, read_result, results_root,
                               run_id_of)
from dlrepro.run.store import held as store_held

# errno values that mean "the disk is full" rather than a bug, and those
# that mean the results cannot be written at all.
FULL_DISK = (errno.ENOSPC, errno.EDQUOT)
WRITE_FAILURES = FULL_DISK + (errno.EROFS, errno.EACCES, errno.EPERM)


def new_run_id(name):
    stamp = utc_now().replace("-", "").replace(":", "")
    return f"{stamp}-{name}-{secrets.token_hex(2)}"


def ensure_writable(out):
    """Create the results root or fail with a one-line reason."""
    out = results_root(out)
    try:
        out.mkdir(parents=True, exist_ok=True)
        probe = out / f".write-test-{os.getpid()}"
        probe.write_text("")
        probe.unlink()
    except OSError as exc:
        raise UserError(f"cannot write results to {out}: "
                        f"{exc.strerror or exc}")
    return out


# What a run folder holds beyond "<job id>": the longest name written
# beside a job's id, and the deepest folder under the run folder.
_SUFFIX_ROOM = LONGEST_SUFFIX
_SUBFOLDER = SIDE_DIR


def _limits(path):
    """(NAME_MAX, PATH_MAX) of the filesystem `path` (or the nearest folder
    above it that exists) is on."""
    probe = Path(os.path.abspath(path))
    while not os.path.isdir(probe) and probe != probe.parent:
        probe = probe.parent
    try:
        return (os.pathconf(probe, "PC_NAME_MAX"),
                os.pathconf(probe, "PC_PATH_MAX"))
    except (OSError, ValueError):
        return 255, 4096


def check_room(out, name, job_ids):
    """Refuse, before anything runs, a results root under which the files
    of a run named `name` with `job_ids` would pass the filesystem's limit
    on a name or a path: mid-run, the first file past it would fail
    (ENAMETOOLONG) with cells already measured."""
    root = Path(os.path.abspath(os.path.expanduser(results_root(out))))
    name_max, path_max = _limits(root)
    longest_id = max((len(os.fsencode(i)) for i in job_ids), default=0)
    run_folder = len(os.fsencode(new_run_id(name)))
    for part in root.parts[1:]:
        if len(os.fsencode(part)) > name_max:
            raise UserError(f"--out names a folder of {len(part)} "
                            f"characters ({part[:24]}...): over this "
                            f"filesystem's limit of {name_max} for a name")
    if max(run_folder, longest_id + _SUFFIX_ROOM) > name_max:
        raise UserError(f"a job id of {longest_id} bytes makes file names "
                        f"over this filesystem's limit of {name_max}")
    deepest = (len(os.fsencode(str(root))) + 1 + run_folder + 1
               + len(_SUBFOLDER) + 1 + longest_id + _SUFFIX_ROOM)
    if deepest >= path_max:
        raise UserError(
            f"--out is too long ({len(str(root))} characters): the run's "
            f"files under it would have paths of up to {deepest} bytes, "
            f"over this filesystem's limit of {path_max - 1}; give a "
            f"--out of at most {len(str(root)) - (deepest - path_max) - 1}")


def create_run(out, name):
    out = ensure_writable(out)
    remove_abandoned(out)
    run_dir = out / new_run_id(name)
    run_dir.mkdir()
    return run_dir


# A run folder's name (new_run_id).
_RUN_ID = re.compile(r"\d{8}T\d{6}Z-.+-[0-9a-f]{4}")
# A run folder without run.json is one being started (an instant between
# its mkdir and its run.json) or one a kill in that instant abandoned; past
# this age it is the latter.
ABANDONED_AFTER_S = 60


def remove_abandoned(out):
    """Remove the run folders under `out` that a kill between their mkdir
    and their run.json left behind: named as runs are, no run.json, held by
    no process, older than ABANDONED_AFTER_S, holding nothing but its
    `.lock` and the temp files of an atomic write cut short. Anything else
    is left."""
    now = time.time()
    for folder in Path(out).iterdir():
        try:
            if (folder.is_symlink() or not folder.is_dir()
                    or not _RUN_ID.fullmatch(folder.name)
                    or (folder / "run.json").exists()
                    or now - folder.stat().st_mtime < ABANDONED_AFTER_S
                    or store_held(folder)):
                continue
            leftovers = list(folder.iterdir())
            if any(p.name != LOCK_NAME and not p.name.startswith(
                    resultfile.TEMP_PREFIX) for p in leftovers):
                continue
            for path in leftovers:
                path.unlink()
            folder.rmdir()
        except OSError:
            continue  # another process's, or gone: not ours to insist on


def refuse_folders_for_files(run_dir):
    """A UserError in one line when a run folder's file (a result, a spec,
    a log, a temp file: `*.json`, `*.log`) is a folder or anything else
    but a regular file: resume would replace, remove or append to it."""
    for path in sorted(Path(run_dir).iterdir()):
        if path.suffix not in (".json", ".log") or path.is_symlink():
            continue
        if not path.is_file():
            what = "a folder" if path.is_dir() else "not a regular file"
            raise UserError(f"{path} is {what}; remove it, then resume "
                            f"again")


def remove_stale_temps(run_dir):
    """Remove the temp files of atomic writes cut short in `run_dir`; only
    while no one can be writing there."""
    for path in Path(run_dir).glob(f"{resultfile.TEMP_PREFIX}*.json"):
        try:
            path.unlink()
        except FileNotFoundError:
            pass


def discard_unpublished(run_dir):
    """Remove a new run folder that `latest` never named: nothing ran in
    it, so it holds no more than its lock, run.json and temp files. Left
    as it is when anything else is there."""
    run_dir = Path(run_dir)
    try:
        for path in run_dir.iterdir():
            if path.name in (LOCK_NAME, RUN_RECORD) or \
                    path.name.startswith(resultfile.TEMP_PREFIX):
                path.unlink()
        run_dir.rmdir()
    except OSError:
        pass


def point_latest(out, run_dir, kind="bench"):
    """Make <out>/latest (or latest-converge) name `run_dir`, atomically."""
    name = LATEST[kind]
    link = Path(out) / name
    tmp = Path(out) / f".{name}-{os.getpid()}"
    if tmp.is_symlink() or tmp.exists():
        tmp.unlink()
    tmp.symlink_to(Path(run_dir).name)
    os.replace(tmp, link)


@contextmanager
def locked(run_dir):
    """Hold the run folder for this process: a second process that runs or
    resumes the same folder gets a one-line error instead of measuring the
    same job at the same time. The lock is on the folder itself, which
    cannot be unlinked from under its holder as a file can; `.lock` only
    says who holds it. The kernel drops the lock when the holder dies, even
    by SIGKILL, and every process it hands the descriptor (yielded) to has
    ended: a job's processes inherit it (run.life.JobLife), so that no
    session takes the folder while a process of an earlier one, stopped or
    hung past its sweep, may still write its result there."""
    folder = os.open(run_dir, os.O_RDONLY | os.O_DIRECTORY)
    try:
        try:
            fcntl.flock(folder, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise UserError(f"{run_dir} is being run by {_holder(run_dir)}, "
                            f"or a job process it started still runs; wait "
                            f"for it to finish (or stop it) before running "
                            f"this folder")
        _describe_holder(run_dir)
        yield folder
    finally:
        os.close(folder)  # releases the lock


def _open_lock_file(run_dir, flags):
    """The descriptor of `.lock`, never through a symlink; UserError when
    it is there but not a regular file, or a hard link to another name
    (what the holder writes there would overwrite that file too)."""
    path = Path(run_dir) / LOCK_NAME
    try:
        fd = os.open(path, flags | os.O_NOFOLLOW | os.O_NONBLOCK, 0o644)
    except OSError as exc:
        if exc.errno not in (errno.ELOOP, errno.EISDIR, errno.ENXIO):
            raise
        fd = None
    if fd is None or not stat.S_ISREG(os.fstat(fd).st_mode):
        if fd is not None:
            os.close(fd)
        raise UserError(f"{path} is not a regular file; remove it, then run "
                        f"again")
    if os.fstat(fd).st_nlink > 1:
        os.close(fd)
        raise UserError(f"{path} is a hard link to another file; remove it, "
                        f"then run again")
    return fd


def _describe_holder(run_dir):
    fd = _open_lock_file(run_dir, os.O_RDWR | os.O_CREAT)
    with os.fdopen(fd, "w") as handle:
        handle.truncate()
        handle.write(f"process {os.getpid()} on {socket.gethostname()} "
                     f"since {utc_now()}\n")


def _holder(run_dir):
    """Who holds the folder, as its `.lock` says."""
    try:
        with os.fdopen(_open_lock_file(run_dir, os.O_RDONLY)) as handle:
            return handle.read(500).strip() or "another process"
    except (OSError, UnicodeDecodeError, UserError):
        return "another process"


def set_aside_if_foreign(run_dir, job_id, spec):
    """Rename a valid result at `<id>.json` that is another cell's or
    another run's to `<id>.invalid.json`, kept for a person to look at,
    before the job runs again; a line saying so, or None."""
    path = JobPaths(run_dir, job_id).result
    result, _ = read_result(path)
    problem = result and (foreign_cell(result, spec, path.name) or
                          foreign_run(result, run_id_of(run_dir), path.name))
    if not problem:
        return None
    kept = JobPaths.invalid_of(path)
    os.replace(path, kept)
    return f"{problem}: set aside as {kept.name}, to be measured again"


def full_disk_message(exc, where):
    """A one-line message for an OSError met while writing under `where`."""
    if getattr(exc, "errno", None) in FULL_DISK:
        return f"the disk under {where} is full ({exc.strerror})"
    return f"cannot write under {where}: {exc.strerror or exc}"
