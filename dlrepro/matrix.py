"""The version matrix (dockerfiles/matrix.toml): loading and validation."""
import tomllib

from . import ROOT
from .errors import UserError
from .pylock import check_pinned

MATRIX_PATH = ROOT / "dockerfiles" / "matrix.toml"
LOCKS_DIR = ROOT / "dockerfiles" / "requirements"

REQUIRED_KEYS = {
    "device": str, "base_image": str, "python": str, "cuda": str,
    "cudnn": str, "nccl": str, "framework_version": str, "pip": list,
    "pip_index": list, "apt": list, "sass": list, "ptx": str,
    "min_driver": str, "native": bool, "notes": str,
}


def load(path=MATRIX_PATH):
    """{framework: {profile: entry}}, validated; errors name file and key."""
    try:
        data = tomllib.loads(path.read_text())
    except OSError as exc:
        raise UserError(f"cannot read {path}: {exc.strerror}")
    except tomllib.TOMLDecodeError as exc:
        raise UserError(f"{path}: {exc}")
    for framework, profiles in data.items():
        for profile, entry in profiles.items():
            _validate(path, f"{framework}.{profile}", entry)
    return data


def _validate(path, where, entry):
    if not isinstance(entry, dict):
        raise UserError(f"{path}: [{where}] must be a table")
    unknown = sorted(set(entry) - set(REQUIRED_KEYS))
    if unknown:
        raise UserError(f"{path}: [{where}] has unknown keys: {', '.join(unknown)}")
    for key, kind in REQUIRED_KEYS.items():
        if key not in entry:
            raise UserError(f"{path}: [{where}] is missing {key}")
        if not isinstance(entry[key], kind):
            raise UserError(f"{path}: [{where}] {key} must be a {kind.__name__}")
    if entry["device"] not in ("cpu", "gpu"):
        raise UserError(f"{path}: [{where}] device must be cpu or gpu")
    for requirement in entry["pip"]:
        check_pinned(requirement, f"{path}: [{where}] pip")
    for package in entry["apt"]:
        if "=" not in package:
            raise UserError(f"{path}: [{where}] apt package {package!r} is not "
                            f"pinned; write name=version")


def lock_path(framework, profile):
    return LOCKS_DIR / f"{framework}-{profile}.txt"


def frameworks(matrix):
    return sorted(matrix)


def profiles(matrix, framework):
    if framework not in matrix:
        raise UserError(f"unknown framework {framework!r}; valid frameworks: "
                        f"{', '.join(sorted(matrix))}")
    return sorted(matrix[framework])


def entry(matrix, framework, profile):
    if profile not in profiles(matrix, framework):
        raise UserError(f"unknown profile {profile!r} for {framework}; valid "
                        f"profiles: {', '.join(profiles(matrix, framework))}")
    return matrix[framework][profile]


def default_profile(matrix, framework, device):
    """The profile a cell uses when none is named: `cpu` on the CPU, else
    the first GPU profile in the matrix's order (`cuda`, `gpu`)."""
    names = profiles(matrix, framework)
    if device == "cpu":
        return "cpu" if "cpu" in names else names[0]
    for name in matrix[framework]:
        if matrix[framework][name]["device"] == "gpu":
            return name
    raise UserError(f"{framework} has no GPU profile")
