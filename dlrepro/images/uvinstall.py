"""Virtual environments made with uv (pinned in requirements/host.txt) from
hash-pinned lock files: the same `--require-hashes --no-deps` install pip
did, each file checked against the lock's sha256, in a fraction of pip's
time.

uv reads no pip configuration. pip's settings that say where files lie
(index-url, extra-index-url, find-links) and which certificates to trust
(cert, unless SSL_CERT_FILE is set) are read from pip itself and handed to
uv, so a lock resolves where pip would resolve it (a machine whose torch
wheel lies in a find-links folder, a mirror, a TLS-intercepting proxy).
pip's constraint files are not: every pin is exact, so a constraint could
only refuse one, and uv takes constraints for requirements when hashes are
required. An index that a lock names but this machine cannot reach
(download.pytorch.org behind some proxies) is left out, as pip skips it;
uv would stop there.

Standard library only: setup.sh runs `python -m dlrepro.images.uvinstall`
before the host's packages are installed.
"""
import ast
import functools
import os
import ssl
import subprocess
import sys
import tempfile
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

from dlrepro.errors import UserError

# pip's sections, the first one's value winning for single settings.
PIP_SECTIONS = (":env:", "install", "global")
LOCK_OPTIONS = ("--index-url", "-i", "--extra-index-url", "--find-links", "-f")
PROBE_TIMEOUT_S = 10


def uv_program():
    """The host environment's uv: the pinned one, never another on PATH."""
    uv = Path(sys.executable).parent / "uv"
    if not uv.exists():
        raise UserError(f"uv is not in the host environment ({uv.parent}); "
                        f"run ./setup.sh")
    return uv


@functools.lru_cache(maxsize=None)
def pip_settings():
    """{name: [values]} of pip's configuration (files and PIP_* variables),
    most binding section first; empty where pip cannot say."""
    try:
        proc = subprocess.run([sys.executable, "-m", "pip", "config", "list"],
                              capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.SubprocessError):
        return {}
    found = {}
    for line in proc.stdout.splitlines() if proc.returncode == 0 else []:
        key, sep, value = line.partition("=")
        section, _dot, name = key.rpartition(".")
        if sep and section in PIP_SECTIONS:
            try:
                value = ast.literal_eval(value)
            except (ValueError, SyntaxError):
                continue
            found.setdefault(name, []).append(
                (PIP_SECTIONS.index(section), str(value).split()))
    return {name: [v for _rank, values in sorted(ranked) for v in values]
            for name, ranked in found.items()}


def reachable(location, cert=None):
    """Whether an index or find-links `location` (a URL or a folder) can be
    read from here: a server that answers at all, even with an HTTP error,
    counts; one that cannot be found or connected to does not."""
    parsed = urllib.parse.urlparse(location)
    if parsed.scheme in ("", "file"):
        return Path(parsed.path if parsed.scheme else location).exists()
    try:
        context = ssl.create_default_context(cafile=cert)
        urllib.request.urlopen(location, timeout=PROBE_TIMEOUT_S,
                               context=context).close()
    except urllib.error.HTTPError:
        return True
    except (OSError, ValueError):
        return False
    return True


def _option(line):
    """(option, value) of a lock's index or find-links line, else None."""
    words = line.split() if line.startswith("-") else []
    if len(words) == 1 and "=" in words[0]:  # --extra-index-url=URL
        words = words[0].split("=", 1)
    if len(words) == 2 and words[0] in LOCK_OPTIONS:
        return words[0], words[1]
    return None


def _reachable_lock(lock, folder, cert, log):
    """`lock`, or a copy of it in `folder` without the index lines this
    machine cannot reach (pins and hashes untouched)."""
    lines, dropped = lock.read_text().splitlines(keepends=True), []
    for number, line in enumerate(lines):
        option = _option(line)
        if option and not reachable(option[1], cert):
            dropped.append(option[1])
            lines[number] = "# unreachable here: " + line
    if not dropped:
        return lock
    log(f"{lock.name}: {', '.join(dropped)} cannot be reached from here; "
        f"its files are looked for where pip's configuration says")
    copy = Path(folder) / lock.name
    copy.write_text("".join(lines))
    return copy


def uv_env():
    """uv's environment: pip's certificates unless SSL_CERT_FILE names some
    (uv's own roots otherwise), and never a Python uv downloads itself."""
    env = dict(os.environ, UV_PYTHON_DOWNLOADS="never")
    cert = pip_settings().get("cert", [None])[0]
    if cert and not env.get("SSL_CERT_FILE"):
        env["SSL_CERT_FILE"] = cert
    return env


def _source_args(cert):
    """uv options for the index, indexes and find-links pip is set to use."""
    settings, args = pip_settings(), []
    for name in ("index-url", "extra-index-url", "find-links"):
        values = settings.get(name, [])
        for value in values[:1] if name == "index-url" else values:
            if reachable(value, cert):
                args += [f"--{name}", value]
    return args


def install(python, lock, log=print):
    """Install the hash-pinned `lock` into the environment of `python`."""
    env = uv_env()
    cert = env.get("SSL_CERT_FILE")
    with tempfile.TemporaryDirectory(prefix="dlrepro-lock-") as folder:
        # Every file is checked against its hash, so any index may serve a
        # pin: uv's default would stop at the first index that names the
        # package, where pip looks in all of them. Bytecode is compiled
        # here, as pip does and uv does not by default: else every cell
        # whose process may not write it (PYTHONDONTWRITEBYTECODE, a
        # read-only environment) compiles the framework's sources at its
        # import, 3 s of each PyTorch cell on two cores
        # (docs/measurements/fork-quiet-2026-12-05).
        run([str(uv_program()), "pip", "install", "--quiet",
             "--python", str(python), "--require-hashes", "--no-deps",
             "--compile-bytecode",
             "--index-strategy", "unsafe-best-match"] + _source_args(cert)
            + ["-r", str(_reachable_lock(lock, folder, cert, log))],
            f"installing {lock.name}", env)


def make_venv(interpreter, target):
    """A new, empty virtual environment `target` for `interpreter` (without
    pip: uv installs into it)."""
    run([str(uv_program()), "venv", "--quiet", "--no-project",
         "--python", str(interpreter), str(target)],
        f"creating {target}", uv_env())


def run(command, what, env):
    proc = subprocess.run(command, capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        raise UserError(f"{what} failed: {error_line(proc.stderr)}")


def error_line(stderr):
    """uv's error on one line: its `error:` line and each cause."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    start = next((i for i, line in enumerate(lines)
                  if line.startswith("error:")), None)
    if start is None:
        return (lines or ["(no output)"])[-1]
    text = "; ".join(lines[start:]).replace("error: ", "", 1)
    return text.replace(":; ", ": ")  # "Expected:; sha256:..." reads as one


def main(argv):
    """setup.sh's step: install lock argv[1] into the environment of python
    argv[0]."""
    if len(argv) != 2:
        print("usage: python -m dlrepro.images.uvinstall PYTHON LOCK",
              file=sys.stderr)
        return 2
    try:
        install(argv[0], Path(argv[1]))
    except UserError as exc:
        print(f"setup.sh: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
