"""Which GPU profile a cell uses when `--profile` names none: the one made
for the GPUs found.

Per framework, the preference order is the matrix's order of its GPU
profiles (dockerfiles/matrix.toml: pytorch cuda; tensorflow cuda, tf1,
tf1-ngc; jax cuda; mxnet cuda, ngc; cntk gpu; caffe cuda, nvcaffe): the
first whose compatibility gate (harness.gpu.compat, the same check a cell
makes before its framework starts) admits every GPU found and the driver
is chosen. A verdict of machine code or PTX the driver can JIT-compile
admits; an architecture with neither, or a driver older than the stack
needs, refuses. When every profile is refused, the framework's cells are
`unsupported` with each profile's reason. Without GPUs to look at (no
NVML here, or the cells run elsewhere: Slurm) the first GPU profile is
taken, and the choice says so.

Pure functions over the matrix and NVML's view of the GPUs
(dlrepro.hostinfo.gpus).
"""
from typing import NamedTuple, Optional

from harness.gpu import compat

from dlrepro import matrix as matrix_mod
from dlrepro.errors import UserError
from dlrepro.run.life import STACK_KEYS


class Choice(NamedTuple):
    framework: str
    profile: str                # the chosen profile, or the first refused
    admitted: bool              # False: every profile refused
    reason: str                 # why this profile (or why none)
    refused: dict               # profile -> why not, for those passed over
    gpus: tuple                 # what the choice looked at

    def as_record(self):
        """What a result's `compatibility.profile_choice` keeps."""
        return {"profile": self.profile, "admitted": self.admitted,
                "reason": self.reason, "refused": dict(self.refused),
                "gpus": [describe(g) for g in self.gpus]}


def stack(entry):
    """A matrix entry's kernels and versions, as the gate reads them."""
    return {key: entry[key] for key in STACK_KEYS}


def gpu_profiles(m, framework):
    names = [name for name in matrix_mod.profiles(m, framework)
             if m[framework][name]["device"] == "gpu"]
    if not names:
        raise UserError(f"{framework} has no GPU profile")
    return names


def describe(gpu):
    return (f"{gpu.get('name') or 'GPU'} (sm_"
            f"{(gpu.get('compute_capability') or '?').replace('.', '')}, "
            f"driver {gpu.get('driver_version') or '?'})")


def _verdict(entry, gpus):
    """(admitted, reason) of one profile on every GPU found."""
    for gpu in gpus:
        check = compat.check(gpu.get("compute_capability"),
                             gpu.get("driver_version"), stack(entry))
        if check["verdict"] in compat.BLOCKING:
            return False, f"{check['reason']} on {describe(gpu)}"
    check = compat.check(gpus[0].get("compute_capability"),
                         gpus[0].get("driver_version"), stack(entry))
    return True, f"{check['verdict']}: {check['reason']}"


def choose(m, framework, gpus, where=None):
    """The Choice for `framework` on `gpus` (NVML device dicts with
    compute_capability and driver_version). `where` names why no GPUs are
    looked at (the cells run elsewhere), when they are not."""
    names = gpu_profiles(m, framework)
    gpus = tuple(gpus)
    if not gpus:
        why = where or "no GPU is visible here (NVML)"
        return Choice(framework, names[0], True,
                      f"the first GPU profile: {why}", {}, gpus)
    refused = {}
    for name in names:
        admitted, reason = _verdict(m[framework][name], gpus)
        if admitted:
            return Choice(framework, name, True, reason, refused, gpus)
        refused[name] = reason
    listing = "; ".join(f"{name}: {why}" for name, why in refused.items())
    return Choice(framework, names[0], False,
                  f"no {framework} GPU profile runs here ({listing})",
                  refused, gpus)


def format_records(records):
    """Lines for a dry run from {framework: Choice.as_record()}: each
    framework's profile and why, and the profiles passed over."""
    lines = []
    for framework, record in records.items():
        head = record["profile"] if record["admitted"] else "none"
        lines.append(f"  {framework}: {head} ({record['reason']})")
        if record["admitted"]:
            lines += [f"    passed over {name}: {why}"
                      for name, why in record["refused"].items()]
    return lines
