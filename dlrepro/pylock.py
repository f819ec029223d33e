"""Lock files for Python environments: every package of the closure pinned
with `==` and its sha256, resolved by pip itself (`pip install --dry-run
--report`), so that images and native environments install exactly the same
bytes with `--require-hashes`."""
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from .errors import UserError

_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(\[[^\]]*\])?==([^\s;]+)")


def check_pinned(requirement, where):
    """`requirement` must be `name==version`; anything looser is an error."""
    if not _PIN.match(requirement.strip()):
        raise UserError(f"{where}: {requirement!r} is not pinned; write "
                        f"name==version")


def resolve(requirements, *, python=None, index_urls=(), pip_args=()):
    """Resolve `requirements` to [(name, version, sha256, url)] with pip.

    `python` is the interpreter whose platform the closure is for (the
    current one by default): the lock of a CPU image with Debian's Python 3.11
    is resolved by a Python 3.11 on the host.
    """
    for requirement in requirements:
        check_pinned(requirement, "requirements")
    python = python or sys.executable
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.json"
        command = [python, "-m", "pip", "install", "--dry-run", "--quiet",
                   "--ignore-installed", "--report", str(report)]
        for url in index_urls:
            command += ["--extra-index-url", url]
        command += list(pip_args) + list(requirements)
        proc = subprocess.run(command, capture_output=True, text=True)
        if proc.returncode != 0:
            last = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
            raise UserError(f"pip could not resolve {' '.join(requirements)}: "
                            f"{last}")
        data = json.loads(report.read_text())
    pins = []
    for item in data["install"]:
        info = item["download_info"]
        sha = info.get("archive_info", {}).get("hashes", {}).get("sha256")
        if not sha:
            raise UserError(f"pip reported no sha256 for {info['url']}")
        pins.append((item["metadata"]["name"], item["metadata"]["version"],
                     sha, info["url"]))
    return sorted(pins, key=lambda p: p[0].lower())


def render_lock(pins, *, header, index_urls=()):
    """The text of a lock file: one `name==version --hash` per package."""
    lines = [f"# {line}" if line else "#" for line in header.splitlines()]
    lines += [f"--extra-index-url {url}" for url in index_urls]
    for name, version, sha, _url in pins:
        lines.append(f"{name}=={version} \\\n    --hash=sha256:{sha}")
    return "\n".join(lines) + "\n"


def read_lock(path):
    """[(name, version, sha256)] from a lock file written by render_lock."""
    text = Path(path).read_text().replace("\\\n", " ")
    pins = []
    for number, line in enumerate(text.splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line or line.startswith("--"):
            continue
        match = _PIN.match(line)
        hashes = re.findall(r"--hash=sha256:([0-9a-f]{64})", line)
        if not match or not hashes:
            raise UserError(f"{path}: line {number} is not `name==version "
                            f"--hash=sha256:...`: {line!r}")
        pins.append((match.group(1), match.group(3), hashes[0]))
    return pins
