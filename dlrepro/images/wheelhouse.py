"""Wheelhouses: exactly the locked files of an image, downloaded on the host.

`make` downloads every file of a profile's lock (pip checks each sha256) and
the matrix's `sources` into wheelhouse/<framework>-<profile>/, with a
manifest; a build context carries them and the image installs with
--no-index --require-hashes, so the build needs no network.
"""
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import urllib.request
from pathlib import Path

from harness.resultfile import write_atomic

from dlrepro import ROOT, matrix as matrix_mod, show_path
from dlrepro.images import pylock
from dlrepro.errors import UserError

DEFAULT_ROOT = ROOT / "wheelhouse"


def folder(framework, profile, root=DEFAULT_ROOT):
    return Path(root) / f"{framework}-{profile}"


def sha256_file(path):
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _manifest_path(house):
    return house / "MANIFEST.json"


def files(framework, profile, entry, root=DEFAULT_ROOT):
    """{relative path: sha256} of a complete wheelhouse for the current lock,
    or None when it is missing or stale (then run make)."""
    house = folder(framework, profile, root)
    lock = matrix_mod.lock_path(framework, profile)
    try:
        manifest = json.loads(_manifest_path(house).read_text())
    except (OSError, ValueError):
        return None
    if manifest.get("lock_sha256") != sha256_file(lock):
        return None
    listed = manifest.get("files", {})
    for rel, info in listed.items():
        path = house / rel
        if not path.is_file() or path.stat().st_size != info["size"]:
            return None
    return {rel: info["sha256"] for rel, info in listed.items()}


def make(framework, profile, entry, root=DEFAULT_ROOT, log=print):
    """Download exactly the locked files (and the matrix's `sources`) into
    wheelhouse/<framework>-<profile>/, checking every sha256. Incremental:
    files already there are kept when their hash matches."""
    house = folder(framework, profile, root)
    lock = matrix_mod.lock_path(framework, profile)
    if not lock.exists():
        raise UserError(f"no lock file {lock}; run `invoke pin --framework "
                        f"{framework} --profile {profile}`")
    wanted = {sha: (name, version) for name, version, sha in pylock.read_lock(lock)}
    wheels = house / "wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    target = pylock.Target(entry["python"], entry["glibc"])
    log(f"wheelhouse: downloading {len(wanted)} locked files for "
        f"{framework}/{profile} into {show_path(house)}")
    command = [sys.executable, "-m", "pip", "download", "--progress-bar",
               "off", "--disable-pip-version-check", "--retries",
               str(pylock.PIP_RETRIES), "--no-deps", "--require-hashes",
               "--dest", str(wheels), "-r", str(lock)]
    # The lock is the whole closure, so --no-deps; for a foreign platform pip
    # then also accepts the source distributions a lock may pin.
    command += pylock.target_args(target, no_deps=True)
    proc = _download(command, f"wheelhouse {framework}/{profile}",
                     len(wanted))
    if proc.returncode != 0:
        lines = [line for line in proc.stderr.splitlines()
                 if "is neither a file nor a directory" not in line]
        raise UserError(f"wheelhouse for {framework}/{profile}: pip download "
                        f"failed: {(lines or ['(no output)'])[-1].strip()}")
    files = {}
    for path in sorted(wheels.iterdir()):
        sha = sha256_file(path)
        if sha in wanted:
            files[f"wheels/{path.name}"] = {"sha256": sha,
                                            "size": path.stat().st_size}
        else:
            # A file of an older lock: not part of this image.
            path.unlink()
    missing = [f"{n}=={v}" for sha, (n, v) in wanted.items()
               if sha not in {info["sha256"] for info in files.values()}]
    if missing:
        raise UserError(f"wheelhouse for {framework}/{profile}: pip did not "
                        f"deliver {', '.join(missing)} with the locked hashes")
    for source in entry["sources"]:
        path = fetch_source(source, house / "sources", log)
        files[f"sources/{path.name}"] = {"sha256": source["sha256"],
                                         "size": path.stat().st_size}
    write_atomic(str(_manifest_path(house)),
                 {"lock_sha256": sha256_file(lock), "files": files})
    return house


def _download(command, what, count):
    """Run pip download, its lines shown as progress (a file's size when pip
    names it, each file saved: dlrepro.images.transfer); the finished
    process, its stderr kept for the error line."""
    from dlrepro.images import transfer
    with transfer.progress(what, unit="file", count=count) as shown:
        proc = subprocess.Popen(command, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        errors = []
        reader = threading.Thread(target=lambda: errors.append(
            proc.stderr.read()), daemon=True)
        reader.start()
        for line in proc.stdout:
            transfer.pip_line(line, shown)
        proc.wait()
        reader.join()
    return subprocess.CompletedProcess(command, proc.returncode, "",
                                       "".join(errors))


def fetch_source(source, folder, log=print):
    """Download `source` ({name, url, sha256}) into `folder`, checked."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / source["name"]
    if path.exists() and sha256_file(path) == source["sha256"]:
        return path
    log(f"wheelhouse: fetching {source['url']}")
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".tmp-")
    try:
        with os.fdopen(fd, "wb") as out, urllib.request.urlopen(
                source["url"], timeout=120) as response:
            shutil.copyfileobj(response, out)
        got = sha256_file(tmp)
        if got != source["sha256"]:
            raise UserError(f"{source['url']}: sha256 {got} does not match the "
                            f"matrix's {source['sha256']}")
        # mkstemp's 0600 would reach the build context as it is: apt's
        # unprivileged downloader could not read a .deb installed from it.
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except OSError as exc:
        raise UserError(f"cannot fetch {source['url']}: {exc}")
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return path
