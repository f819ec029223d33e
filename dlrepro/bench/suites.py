"""Benchmark suites as data (benchmarks/suites/*.toml).

A suite has a name, a description, `defaults` and a list of `[[group]]`
tables. A group names networks and batch sizes, and may override any
default. Example:

    name = "smoke"
    description = "every network, one small batch"
    [defaults]
    device = "cpu"
    iterations = 5
    warmup = 2
    [[group]]
    networks = ["fcn5", "fcn8"]
    batch_sizes = [32]

Keys of `defaults` and of groups: device ("cpu" or "gpu"), threads (list of
thread counts, CPU only), gpus (list of GPU counts; the batch size is per
GPU), iterations, warmup, timeout_s, frameworks (list; default: all),
repeat (independent processes per cell; default 1, at most 1000),
clock_policy (GPU clocks: observe, disable-boost or lock=<MHz>; default
observe; the paper's GPU suites name disable-boost, the paper's method),
precision (default, fp32, tf32, bf16, fp16; default: default, the
framework's own), compile (a compile mode of the frameworks: none, default,
reduce-overhead, max-autotune, function, xla, hybridize, jit; default: each
framework's).
"""
import re
import tomllib
from pathlib import Path

from harness import networks, spec
from harness.gpu import clocks
from harness.errors import HarnessError

from dlrepro import ROOT
from dlrepro.bench.plan import MAX_REPEAT
from dlrepro.errors import UserError, read_text

SUITES_DIR = ROOT / "benchmarks" / "suites"

GROUP_KEYS = {"networks", "batch_sizes", "device", "threads", "gpus",
              "iterations", "warmup", "timeout_s", "frameworks", "repeat",
              "clock_policy", "precision", "compile"}
SUITE_NAME = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]{0,63}")
TOP_KEYS = {"name", "description", "defaults", "group", "slurm", "isolation"}
DEFAULTS = {"device": "cpu", "threads": None, "gpus": [1], "iterations": 20,
            "warmup": 5, "timeout_s": 1800, "frameworks": None, "repeat": 1,
            "clock_policy": "observe", "precision": "default",
            "compile": None}


def available():
    """{name: path} of the suites shipped in benchmarks/suites."""
    return {p.stem: p for p in sorted(SUITES_DIR.glob("*.toml"))}


def find(name_or_path):
    """A suite file from a shipped suite's name or a path to a TOML file."""
    shipped = available()
    if name_or_path in shipped:
        return shipped[name_or_path]
    path = Path(name_or_path)
    if path.suffix == ".toml" or path.exists():
        if not path.exists():
            raise UserError(f"suite file {path} does not exist")
        if not path.is_file():
            raise UserError(f"suite file {path} is not a regular file")
        return path
    raise UserError(f"unknown suite {name_or_path!r}; valid suites: "
                    f"{', '.join(shipped)} (or a path to a .toml file)")


def load(name_or_path):
    """Parse and validate a suite; returns a dict with resolved groups."""
    path = find(name_or_path)
    try:
        data = tomllib.loads(read_text(path, f"suite {path}"))
    except UnicodeDecodeError:
        raise UserError(f"suite {path} is not UTF-8 text")
    except tomllib.TOMLDecodeError as exc:
        raise UserError(f"suite {path} is not valid TOML: {exc}")
    return parse(data, path)


def parse(data, path):
    where = str(path)
    unknown = set(data) - TOP_KEYS
    if unknown:
        raise UserError(f"{where}: unknown keys {', '.join(sorted(unknown))}; "
                        f"valid: {', '.join(sorted(TOP_KEYS))}")
    if not isinstance(data.get("name"), str) or \
            not SUITE_NAME.fullmatch(data["name"]):
        # The name becomes part of a run folder's name.
        raise UserError(f"{where}: `name` must be letters, digits, '.', '_' "
                        f"or '-', not starting with '.', got "
                        f"{data.get('name')!r}")
    defaults = dict(DEFAULTS)
    defaults.update(_check_group(data.get("defaults", {}), f"{where} [defaults]",
                                 needs_networks=False))
    groups = data.get("group")
    if not isinstance(groups, list) or not groups:
        raise UserError(f"{where}: needs at least one [[group]] with networks "
                        f"and batch_sizes")
    resolved = []
    for i, group in enumerate(groups, 1):
        checked = _check_group(group, f"{where} [[group]] #{i}",
                               needs_networks=True)
        merged = dict(defaults)
        merged.update(checked)
        resolved.append(merged)
    # [slurm]: sbatch options for --executor slurm, checked by
    # dlrepro.run.engines.slurm when used; isolation: the default of
    # --isolation, checked by dlrepro.run.groups when used.
    return {"name": data["name"], "description": data.get("description", ""),
            "path": str(path), "groups": resolved,
            "slurm": data.get("slurm"), "isolation": data.get("isolation")}


def _check_group(group, where, needs_networks):
    if not isinstance(group, dict):
        raise UserError(f"{where}: must be a table")
    unknown = set(group) - GROUP_KEYS
    if unknown:
        raise UserError(f"{where}: unknown keys {', '.join(sorted(unknown))}; "
                        f"valid: {', '.join(sorted(GROUP_KEYS))}")
    if not needs_networks and {"networks", "batch_sizes"} & set(group):
        raise UserError(f"{where}: networks and batch_sizes belong in groups")
    if needs_networks:
        for key in ("networks", "batch_sizes"):
            if key not in group:
                raise UserError(f"{where}: missing `{key}`")
        _string_list(group, "networks", where)
        for name in group["networks"]:
            try:
                networks.get(name)  # a name, or a transformer's NAME@STEPS
            except HarnessError as exc:
                raise UserError(f"{where}: {exc}") from None
        _int_list(group, "batch_sizes", where)
    if "device" in group and group["device"] not in ("cpu", "gpu"):
        raise UserError(f"{where}: device must be cpu or gpu, got "
                        f"{group['device']!r}")
    for key in ("threads", "gpus"):
        if key in group:
            _int_list(group, key, where)
    for key, minimum, maximum in (
            ("iterations", 1, None), ("warmup", 0, None),
            ("timeout_s", 1, None), ("repeat", 1, MAX_REPEAT)):
        if key in group:
            _int(group[key], f"{where}: {key}", minimum, maximum)
    if "frameworks" in group:
        _string_list(group, "frameworks", where)
    if "clock_policy" in group:
        try:
            clocks.parse_policy(group["clock_policy"])
        except HarnessError as exc:
            raise UserError(f"{where}: {exc}")
    for key, check in (("precision", spec.check_precision),
                       ("compile", spec.check_compile)):
        if key in group:
            try:
                check(group[key])
            except HarnessError as exc:
                raise UserError(f"{where}: {exc}")
    return group


def _int(value, what, minimum=1, maximum=None):
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise UserError(f"{what} must be an integer >= {minimum}, got {value!r}")
    if maximum is not None and value > maximum:
        raise UserError(f"{what} must be at most {maximum}, got {value}")


def _int_list(group, key, where):
    values = group[key]
    if not isinstance(values, list) or not values:
        raise UserError(f"{where}: `{key}` must be a non-empty list of integers")
    for value in values:
        _int(value, f"{where}: {key}")


def _string_list(group, key, where):
    values = group[key]
    if not isinstance(values, list) or not values or not all(
            isinstance(v, str) for v in values):
        raise UserError(f"{where}: `{key}` must be a non-empty list of strings")
