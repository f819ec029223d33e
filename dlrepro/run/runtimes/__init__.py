"""Where a cell's harness process runs: a native virtual environment or a
container. Both speak the same small interface so that the sweep does not
care which it drives:

  runtime.name                   "native" or "docker"
  runtime.check()                raise UserError when the runtime cannot work
                                 at all (no engine, no usable Python)
  runtime.prepare(targets, log)  make each (framework, profile) ready (venv,
                                 image); returns {target: None or the reason
                                 it cannot run here}
  runtime.launch(cell, run_dir, cell_id) -> Launch
                                 how to start the harness for one cell whose
                                 spec is run_dir/<cell_id>.spec.json and whose
                                 result must land at run_dir/<cell_id>.json
"""
import importlib
from typing import Callable, NamedTuple, Optional

from dlrepro.errors import UserError

RUNTIMES = {
    "native": "dlrepro.run.runtimes.native",
    "docker": "dlrepro.run.runtimes.docker",
}


class Launch(NamedTuple):
    argv: list
    env: Optional[dict] = None
    cwd: Optional[str] = None
    # Called on timeout or interrupt instead of signalling the client process
    # (a container must be stopped through the engine). None: SIGTERM the
    # child, then SIGKILL after a grace period.
    stop: Optional[Callable[[], None]] = None
    # Called after the process exits: extra facts for a cell that ended
    # without a result file (e.g. the container was OOM-killed).
    post_mortem: Optional[Callable[[], Optional[str]]] = None
    cleanup: Optional[Callable[[], None]] = None


def get(name, **options):
    try:
        module = RUNTIMES[name]
    except KeyError:
        raise UserError(f"unknown runtime {name!r}; valid runtimes: "
                        f"{', '.join(sorted(RUNTIMES))}")
    return importlib.import_module(module).Runtime(**options)
