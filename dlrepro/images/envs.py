"""Native per-framework virtual environments, made from the same lock files
that the framework's CPU image installs (one environment per framework:
their pins conflict, e.g. MXNet needs numpy<1.24), with uv
(dlrepro.images.uvinstall); several at once when a command needs several."""
import concurrent.futures
import contextlib
import fcntl
import functools
import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

from dlrepro import ROOT, matrix as matrix_mod, show_path
from dlrepro.errors import UserError
from dlrepro.images import uvinstall

VENVS_DIR = ROOT / ".venvs"


def venv_dir(framework, profile, root=VENVS_DIR):
    return root / f"{framework}-{profile}"


def _runs_as(python, version):
    """Whether `python` starts, is `version` and can make a venv."""
    try:
        proc = subprocess.run(
            [python, "-c", "import sys, venv; "
             "print('%d.%d' % sys.version_info[:2])"],
            capture_output=True, text=True, timeout=60)
    except OSError:
        return False
    return proc.returncode == 0 and proc.stdout.strip() == version


def python_for(version):
    """A working interpreter for `version` ("3.11") on this host, or None:
    this one, then PATH, then pyenv's versions. Each candidate is run,
    because a pyenv shim on PATH can exist without the version behind it."""
    if f"{sys.version_info[0]}.{sys.version_info[1]}" == version:
        return sys.executable
    candidates = [shutil.which(f"python{version}")]
    pyenv = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv"))
    candidates += sorted((str(p) for p in pyenv.glob(
        f"versions/{version}*/bin/python{version}")), reverse=True)
    for python in candidates:
        if python and _runs_as(python, version):
            return python
    return None


def unavailable_reason(entry, framework, profile):
    """Why this profile cannot have a native environment here (or None)."""
    if not entry["native"]:
        return (f"{framework}/{profile} runs in its image only (see its notes "
                f"in dockerfiles/matrix.toml); use --runtime docker")
    if entry["device"] != "cpu":
        return f"{framework}/{profile} is a GPU image profile; natively use cpu"
    if python_for(entry["python"]) is None:
        return (f"{framework}/{profile} needs Python {entry['python']}, which "
                f"is not on this host")
    return None


def ensure(framework, profile, entry, log=print, root=VENVS_DIR):
    """Create or refresh the environment; returns its python. Cheap when the
    lock file has not changed (a stamp holds the lock's hash)."""
    lock = matrix_mod.lock_path(framework, profile)
    if not lock.exists():
        raise UserError(f"no lock file {lock}; run `invoke pin "
                        f"--framework {framework} --profile {profile}`")
    return from_lock(lock, venv_dir(framework, profile, root),
                     entry["python"], log)


def from_lock(lock, target, version, log=print):
    """The environment `target`, made with Python `version` from the
    hash-pinned `lock`, or made again when the lock has changed (a stamp
    holds its hash); returns its python."""
    stamp = target / f".lock-{hashlib.sha256(lock.read_bytes()).hexdigest()[:16]}"
    python = target / "bin" / "python"
    if stamp.exists() and python.exists():
        return python
    with made_alone(target):
        if stamp.exists() and python.exists():  # made while we waited
            return python
        log(f"creating {show_path(target)} from {show_path(lock)}")
        shutil.rmtree(target, ignore_errors=True)
        uvinstall.make_venv(python_for(version), target)
        uvinstall.install(python, lock, log)
        stamp.touch()
    return python


def ensure_all(targets, matrix, log=print, root=VENVS_DIR):
    """ensure() for each (framework, profile) in `targets`, side by side:
    each is a download and an unpack of its own. Returns {target: python}."""
    targets = list(dict.fromkeys(targets))
    return dict(zip(targets, side_by_side(
        [functools.partial(ensure, *target, matrix_mod.entry(matrix, *target),
                           log, root) for target in targets])))


def side_by_side(makers):
    """Call each of `makers` in a thread of its own (each environment has its
    own file lock, made_alone); their results in order. The first failure
    is raised once every maker has ended, so none is cut off half-made."""
    if not makers:
        return []
    with concurrent.futures.ThreadPoolExecutor(len(makers)) as pool:
        futures = [pool.submit(maker) for maker in makers]
    return [future.result() for future in futures]


@contextlib.contextmanager
def made_alone(target):
    """Held while `target` (a folder) is made: two commands that both find
    it missing (two `invoke bench`, the test processes of `invoke test`)
    would otherwise make it at once, each removing what the other made."""
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.with_name(target.name + ".making"), "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)

