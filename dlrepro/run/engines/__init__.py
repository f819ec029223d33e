"""Where and when a run's jobs run: an Engine (engines/base.py) per
--executor value. A new engine is one package here and one line in
ENGINES."""
from dlrepro.errors import UserError
from dlrepro.run.engines.base import Context, Engine
from dlrepro.run.engines.local import LocalEngine
from dlrepro.run.engines.slurm import SlurmEngine

ENGINES = {
    "local": LocalEngine,
    "slurm": SlurmEngine,
}

__all__ = ["Context", "Engine", "ENGINES", "LocalEngine", "SlurmEngine",
           "engine_class"]


def engine_class(name):
    """The Engine class --executor `name` names; UserError when none."""
    try:
        return ENGINES[name]
    except KeyError:
        raise UserError(f"unknown executor {name!r}; valid executors: "
                        f"{', '.join(sorted(ENGINES))}")
