"""An interpreter with CNTK for tests: the Python of the cntk.cpu image.

CNTK 2.7 has wheels for Python <= 3.6 only and links OpenMPI 1.10; no
current host has either, its image has both. `python()` writes a launcher
that runs the image's Python as if it were a native one: this repository
(read-only) and the temporary directory mounted at their own paths, the
caller's working directory, PYTHONPATH and PYTHONUNBUFFERED, no network,
the caller's user. Tests that run framework code as `[python, args...]`
(the CNTK backend, identity and convergence tests) therefore run CNTK's
unchanged. DLREPRO_CNTK_PYTHON names another interpreter with cntk
instead (a machine with CNTK installed).

Without an engine or the Ubuntu 18.04 base image the calling test skips,
saying what to run; with DLREPRO_REQUIRE_DOCKER set (CI) it fails.
"""
import os
import shlex
import tempfile
from pathlib import Path

from dockerenv import cntk_image_or_skip
from harness.frameworks.dataparallel import PROGRESS_ENV
from paths import ROOT

LAUNCHER = ROOT / "build" / "test-pythons" / "cntk-cpu"
PYTHON_IN_IMAGE = "/opt/venv/bin/python"
# What the tests' subprocesses are given besides their arguments.
PASSED_ENV = ("PYTHONPATH", "PYTHONUNBUFFERED", PROGRESS_ENV)
ENV_OVERRIDE = "DLREPRO_CNTK_PYTHON"


def launcher_text(tag, root, tmp, uid, gid, name="cntk"):
    """The launcher script for image `tag` of framework `name`: a plain
    function of its arguments, its comment naming the helper module that
    wrote it."""
    argv = ["docker", "run", "--rm", "--interactive", "--init",
            "--network", "none", "--label", f"org.dlrepro.test={name}env",
            "--user", f"{uid}:{gid}",
            "--volume", f"{root}:{root}:ro", "--volume", f"{tmp}:{tmp}",
            "--env", f"HOME={tmp}"]
    for variable in PASSED_ENV:
        argv += ["--env", variable]
    quoted = " ".join(shlex.quote(a) for a in argv)
    # exec: the docker client is the process the caller signals, and it
    # passes SIGTERM on to the harness (a timeout writes a partial result).
    return ("#!/bin/sh\n"
            f"# Written by tests/{name}env.py: the Python of the {name} image,\n"
            "# run as if it were native. Regenerated on every test session.\n"
            f'exec {quoted} --workdir "$PWD" {shlex.quote(tag)} '
            f'{PYTHON_IN_IMAGE} "$@"\n')


def image_python(name, image_or_skip, override_env):
    """A path to run framework `name`'s image Python with: the interpreter
    `override_env` names, else a launcher for the image `image_or_skip()`
    returns (which skips the calling test, or fails it in CI, when the image
    cannot be had)."""
    given = os.environ.get(override_env)
    if given:
        return Path(given)
    tag = image_or_skip()
    launcher = LAUNCHER.with_name(f"{name}-cpu")
    text = launcher_text(tag, ROOT, Path(tempfile.gettempdir()).resolve(),
                         os.getuid(), os.getgid(), name)
    if not launcher.exists() or launcher.read_text() != text:
        launcher.parent.mkdir(parents=True, exist_ok=True)
        tmp = launcher.with_suffix(".tmp")
        tmp.write_text(text)
        tmp.chmod(0o755)
        os.replace(tmp, launcher)
    return launcher


def python():
    """A path to run CNTK's Python with (skips the calling test, or fails
    it in CI, when the image cannot be had)."""
    return image_python("cntk", cntk_image_or_skip, ENV_OVERRIDE)
