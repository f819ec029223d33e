"""Where and when a run's jobs run: an Engine (engines/base.py) per
--executor value. A new engine is one package here and one line in
ENGINES."""
from dlrepro.run.engines.base import Context, Engine
from dlrepro.run.engines.local import LocalEngine
from dlrepro.run.engines.slurm import SlurmEngine

ENGINES = {
    "local": LocalEngine,
    "slurm": SlurmEngine,
}

__all__ = ["Context", "Engine", "ENGINES", "LocalEngine", "SlurmEngine"]
