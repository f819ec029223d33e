"""Slurm options: what a --slurm-config file, a suite's [slurm] table and
the flags may set, merged in that order and checked with one-line errors."""
import re
import shlex
import tomllib
from pathlib import Path
from typing import NamedTuple, Optional

from dlrepro import parse
from dlrepro.errors import UserError

# Options a suite's [slurm] table or a --slurm-config file may set.
CONFIG_KEYS = {"partition", "account", "qos", "constraint", "exclusive",
               "time_limit", "array_throttle", "mem", "gpu_freq", "sbatch"}


class Options(NamedTuple):
    partition: Optional[str] = None
    account: Optional[str] = None
    qos: Optional[str] = None
    constraint: Optional[str] = None
    exclusive: bool = False
    # Slurm's --time for each task; None: the job's timeout plus margins.
    time_limit: Optional[str] = None
    array_throttle: Optional[int] = None
    mem: Optional[str] = None
    # Slurm's --gpu-freq: the clock policy where containers cannot set
    # clocks. Recorded in each result beside what telemetry saw.
    gpu_freq: Optional[str] = None
    # Further sbatch arguments, passed as they are.
    sbatch: tuple = ()


# The options a flag sets (sbatch's extra arguments come only from a file or
# a suite); the flags give them as text, options() checks and converts.
FLAGS = tuple(name for name in Options._fields if name != "sbatch")


def options(flags, suite=None, config_path=None):
    """Options from a --slurm-config file, then a suite's [slurm] table,
    then flags (None: not given); each checked with a one-line error."""
    merged = {}
    if config_path:
        merged.update(_table(_read_config(config_path), config_path))
    if suite and suite.get("slurm"):
        merged.update(_table(suite["slurm"], f"suite {suite['name']}"))
    merged.update({k: v for k, v in flags.items()
                   if v is not None and v is not False})
    if "array_throttle" in merged:
        merged["array_throttle"] = parse.count(
            merged["array_throttle"], "--array-throttle")
    if merged.get("time_limit") is not None and not re.fullmatch(
            r"[0-9:-]+", str(merged["time_limit"])):
        raise UserError(f"--time-limit: Slurm's --time format (minutes, "
                        f"MM:SS, HH:MM:SS or D-HH), got "
                        f"{merged['time_limit']!r}")
    merged["sbatch"] = tuple(merged.get("sbatch") or ())
    return Options(**{k: (str(v) if isinstance(v, (int, float))
                          and not isinstance(v, bool)
                          and k != "array_throttle" else v)
                      for k, v in merged.items()})


def _read_config(path):
    try:
        return tomllib.loads(Path(path).read_text())
    except OSError as exc:
        raise UserError(f"--slurm-config {path}: {exc.strerror or exc}")
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise UserError(f"--slurm-config {path} is not valid TOML: {exc}")


def _table(data, where):
    if not isinstance(data, dict):
        raise UserError(f"{where}: [slurm] must be a table")
    unknown = set(data) - CONFIG_KEYS
    if unknown:
        raise UserError(f"{where}: unknown Slurm options "
                        f"{', '.join(sorted(unknown))}; valid: "
                        f"{', '.join(sorted(CONFIG_KEYS))}")
    if "sbatch" not in data:
        return dict(data)
    sbatch = data["sbatch"]
    if isinstance(sbatch, str):
        sbatch = shlex.split(sbatch)
    if not isinstance(sbatch, list) or not all(isinstance(a, str)
                                               for a in sbatch):
        raise UserError(f"{where}: `sbatch` must be a list of arguments or "
                        f"one string")
    return dict(data, sbatch=sbatch)
