"""Host-side orchestration: matrix, images, suites, sweeps, results, reports.

Runs on Python 3.11 with pinned dependencies. It starts the harness in a
subprocess (native virtual environment) or a container; it may import the
harness's pure, standard-library modules (network descriptions, result
format), never the other way round.
"""
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def show_path(path):
    """`path` relative to the repository when it is inside it (shorter in
    messages), else as it is."""
    path = Path(path)
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def git_revision():
    """The commit of this checkout ("" outside a git checkout): what a run
    and an image record as the dlrepro that made them."""
    try:
        proc = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT,
                              capture_output=True, text=True)
    except OSError:  # no git on this machine
        return ""
    return proc.stdout.strip() if proc.returncode == 0 else ""
