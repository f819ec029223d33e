"""The Slurm engine, split by concern: options.py (options and their TOML
merge), client.py (Slurm's commands and their parsers), submit.py (arrays,
sbatch arguments and scripts, submission), watch.py (waiting, Ctrl-C, how
Slurm-ended tasks end), environment.py (a node's NodeEnv from SLURM_*),
engine.py (the Engine). Node side: dlrepro.run.node and run.cluster."""
from dlrepro.run.engines.slurm.client import largest_node, live_line
from dlrepro.run.engines.slurm.engine import SlurmEngine
from dlrepro.run.engines.slurm.options import Options, options

__all__ = ["SlurmEngine", "Options", "options", "largest_node", "live_line"]
