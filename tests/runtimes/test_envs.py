"""dlrepro.images.envs: an environment is made by one command at a time,
with uv from a hash-pinned lock, and a lock whose hash does not match its
file is refused."""
import base64
import hashlib
import os
import subprocess
import sys
import zipfile

import processes
import waits
from paths import ROOT

# Holds made_alone(target) and logs "<name> in", then (once `go` exists)
# "<name> out".
HOLDER = """
import sys, time
from pathlib import Path
from dlrepro.images import envs
target, log, name = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
with envs.made_alone(target):
    with open(log, "a") as out:
        out.write(name + " in\\n")
    while not (target.parent / "go").exists():
        time.sleep(0.01)
    with open(log, "a") as out:
        out.write(name + " out\\n")
"""


def _start(target, log, name):
    return processes.start([sys.executable, "-c", HOLDER, str(target),
                            str(log), name], cwd=ROOT,
                           env=dict(os.environ, PYTHONPATH=str(ROOT)))


def _blocked_on_a_lock(pid):
    # /proc/locks lists a waiting lock request as "N: -> FLOCK ... PID ...".
    with open("/proc/locks") as locks:
        return any("->" in line and line.split()[5] == str(pid)
                   for line in locks)


def test_a_second_maker_waits_for_the_first(tmp_path):
    target, log = tmp_path / "pytorch-cpu", tmp_path / "log"
    first = _start(target, log, "first")
    waits.wait_for(lambda: log.exists() and "first in" in log.read_text(),
                   60)
    second = _start(target, log, "second")
    waits.wait_for(lambda: _blocked_on_a_lock(second.pid), 60,
                   what="the second maker waiting for the first")
    (tmp_path / "go").touch()
    assert first.wait(60) == 0 and second.wait(60) == 0
    assert log.read_text().split("\n") == [
        "first in", "first out", "second in", "second out", ""]


# Environments made with uv from a lock, hermetically: pip's configuration
# is only what these variables say (no files), its index an empty folder and
# its find-links a folder holding a wheel made here, so no network is used.
MAKER = """
import sys
from pathlib import Path
from dlrepro.errors import UserError
from dlrepro.images import envs
try:
    print(envs.from_lock(Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]))
except UserError as exc:
    print(exc, file=sys.stderr)
    sys.exit(2)
"""
VERSION = "{}.{}".format(*sys.version_info[:2])


def _wheel(folder, name="dlrepro_probe", version="1.0"):
    """A one-module wheel, built here; returns its sha256."""
    dist = f"{name}-{version}.dist-info"
    files = {f"{name}.py": "VALUE = 41\n",
             f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: {name}\n"
                                 f"Version: {version}\n",
             f"{dist}/WHEEL": "Wheel-Version: 1.0\nGenerator: test_envs\n"
                              "Root-Is-Purelib: true\nTag: py3-none-any\n"}
    record = [f"{path},sha256={_b64(text.encode())},{len(text.encode())}"
              for path, text in files.items()] + [f"{dist}/RECORD,,"]
    files[f"{dist}/RECORD"] = "\n".join(record) + "\n"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as archive:
        for name_in, text in files.items():
            archive.writestr(name_in, text)
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _b64(data):
    digest = hashlib.sha256(data).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def _lock(tmp_path, sha256):
    # The index the lock names cannot be reached (nothing listens on port
    # 9), as download.pytorch.org cannot from some machines: pip skips it,
    # and so must the uv install.
    lock = tmp_path / "probe.txt"
    lock.write_text("--extra-index-url http://127.0.0.1:9/simple\n"
                    f"dlrepro-probe==1.0 \\\n    --hash=sha256:{sha256}\n")
    return lock


def _pip_env(tmp_path):
    (tmp_path / "index").mkdir(exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    return dict(env, PYTHONPATH=str(ROOT), PIP_CONFIG_FILE=os.devnull,
                PIP_INDEX_URL=(tmp_path / "index").as_uri(),
                PIP_FIND_LINKS=str(tmp_path / "wheels"))


def _make(tmp_path, lock, target):
    return subprocess.run([sys.executable, "-c", MAKER, str(lock),
                           str(target), VERSION], capture_output=True,
                          text=True, cwd=ROOT, env=_pip_env(tmp_path),
                          timeout=600)


def test_an_environment_is_made_with_uv_from_a_lock(tmp_path):
    lock = _lock(tmp_path, _wheel(tmp_path / "wheels"))
    target = tmp_path / "probe-cpu"
    made = _make(tmp_path, lock, target)
    assert made.returncode == 0, made.stderr
    *said, python = made.stdout.splitlines()
    assert python == str(target / "bin" / "python")
    # Compiled at install, as pip does, before anything imported it: a
    # cell that may not write bytecode would compile it at every import.
    assert list(target.glob("lib/python*/site-packages/__pycache__/"
                            "dlrepro_probe.*.pyc")), "no bytecode"
    assert said[-1] == ("probe.txt: http://127.0.0.1:9/simple cannot be "
                        "reached from here; its files are looked for where "
                        "pip's configuration says")
    assert subprocess.run([python, "-c", "import dlrepro_probe as p; "
                           "assert p.VALUE == 41"], timeout=120).returncode == 0
    installer = next(target.glob("lib/python*/site-packages/"
                                 "dlrepro_probe-1.0.dist-info/INSTALLER"))
    assert installer.read_text().strip() == "uv"
    stamp = hashlib.sha256(lock.read_bytes()).hexdigest()[:16]
    assert (target / f".lock-{stamp}").exists()


def test_a_tampered_lock_is_refused_in_one_line(tmp_path):
    sha256 = _wheel(tmp_path / "wheels")
    lock = _lock(tmp_path, sha256[::-1])
    target = tmp_path / "probe-cpu"
    made = _make(tmp_path, lock, target)
    assert made.returncode == 2
    assert len(made.stderr.splitlines()) == 1, made.stderr
    assert "installing probe.txt failed" in made.stderr
    assert "hash" in made.stderr.lower() and "Traceback" not in made.stderr
    assert not list(target.glob("**/dlrepro_probe.py"))
    assert not list(target.glob(".lock-*"))
    # setup.sh's step, the same install for the host environment.
    setup = subprocess.run(
        [sys.executable, "-m", "dlrepro.images.uvinstall",
         str(target / "bin" / "python"), str(lock)], capture_output=True,
        text=True, cwd=ROOT, env=_pip_env(tmp_path), timeout=600)
    assert setup.returncode == 2
    assert len(setup.stderr.splitlines()) == 1, setup.stderr
    assert setup.stderr.startswith("setup.sh: installing probe.txt failed")


# Makes two environments with envs.side_by_side (what ensure_all, `invoke
# env` and `invoke bench --runtime native` do), each from its own lock.
BOTH = """
import sys
from pathlib import Path
from dlrepro.images import envs
first, second = (Path(arg) for arg in sys.argv[1:3])
made = envs.side_by_side([
    lambda: envs.from_lock(first, first.with_suffix(""), sys.argv[3]),
    lambda: envs.from_lock(second, second.with_suffix(""), sys.argv[3])])
print(*made)
"""


def test_environments_are_made_side_by_side(tmp_path):
    sha256 = _wheel(tmp_path / "wheels")
    first, second = tmp_path / "first.txt", tmp_path / "second.txt"
    for lock in (first, second):
        lock.write_text(f"dlrepro-probe==1.0 \\\n    --hash=sha256:{sha256}\n")
    # Another command is making the first: the second is made meanwhile,
    # not after it.
    log = tmp_path / "log"
    holder = _start(tmp_path / "first", log, "holder")
    waits.wait_for(lambda: log.exists() and "holder in" in log.read_text(),
                   60)
    both = processes.start([sys.executable, "-c", BOTH, str(first),
                            str(second), VERSION], cwd=ROOT,
                           env=_pip_env(tmp_path))
    waits.wait_for(lambda: list((tmp_path / "second").glob(".lock-*")), 300,
                   what="the second environment made")
    assert not (tmp_path / "first").exists()
    assert both.poll() is None  # still waiting to make the first
    (tmp_path / "go").touch()
    assert holder.wait(60) == 0 and both.wait(300) == 0
    assert list((tmp_path / "first").glob(".lock-*"))
