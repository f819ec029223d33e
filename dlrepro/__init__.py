"""Host-side orchestration: matrix, images, suites, sweeps, results, reports.

Runs on Python 3.11 with pinned dependencies. It starts the harness in a
subprocess (native virtual environment) or a container; it may import the
harness's pure, standard-library modules (network descriptions, result
format), never the other way round.
"""
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def show_path(path):
    """`path` relative to the repository when it is inside it (shorter in
    messages), else as it is."""
    path = Path(path)
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)
