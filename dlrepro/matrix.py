"""The version matrix (dockerfiles/matrix.toml): loading and validation."""
import copy
import re
import tomllib

from dlrepro import ROOT
from dlrepro.errors import UserError, read_text

MATRIX_PATH = ROOT / "dockerfiles" / "matrix.toml"
LOCKS_DIR = ROOT / "dockerfiles" / "requirements"

REQUIRED_KEYS = {
    "device": str, "base_image": str, "python": str, "cuda": str,
    "cudnn": str, "nccl": str, "framework_version": str, "pip": list,
    "pip_index": list, "apt": list, "sass": list, "ptx": str,
    "min_driver": str, "native": bool, "glibc": str, "notes": str,
}
# Optional keys and their defaults (load() fills them in, so code can rely
# on every key being present).
OPTIONAL_KEYS = {
    "framework_in_base": False, "pip_no_deps": False, "build_apt": [],
    "apt_repos": [], "sources": [], "env": {},
}
APT_REPO_KEYS = ("name", "url", "suite", "key_url", "key_fingerprint")
SOURCE_KEYS = ("name", "url", "sha256")
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_FINGERPRINT = re.compile(r"^[0-9A-F]{40}$")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]*$")
_VERSION = re.compile(r"^[0-9]+(\.[0-9]+)*$")
# `name==version`, extras allowed: the one pin the matrix and the locks
# accept (here, below images, so that images.pylock reads it from the matrix
# and not the other way round).
PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(\[[^\]]*\])?==([^\s;]+)")


def check_pinned(requirement, where):
    """`requirement` must be `name==version`; anything looser is an error."""
    if not PIN.match(requirement.strip()):
        raise UserError(f"{where}: {requirement!r} is not pinned; write "
                        f"name==version")


def load(path=MATRIX_PATH):
    """{framework: {profile: entry}}, validated; errors name file and key."""
    try:
        data = tomllib.loads(read_text(path))
    except tomllib.TOMLDecodeError as exc:
        raise UserError(f"{path}: {exc}")
    for framework, profiles in data.items():
        for profile, entry in profiles.items():
            _validate(path, f"{framework}.{profile}", entry)
    return data


def _validate(path, where, entry):
    if not isinstance(entry, dict):
        raise UserError(f"{path}: [{where}] must be a table")
    unknown = sorted(set(entry) - set(REQUIRED_KEYS) - set(OPTIONAL_KEYS))
    if unknown:
        raise UserError(f"{path}: [{where}] has unknown keys: {', '.join(unknown)}")
    for key, kind in REQUIRED_KEYS.items():
        if key not in entry:
            raise UserError(f"{path}: [{where}] is missing {key}")
        if not isinstance(entry[key], kind):
            raise UserError(f"{path}: [{where}] {key} must be a {kind.__name__}")
    for key, default in OPTIONAL_KEYS.items():
        if key not in entry:
            entry[key] = copy.deepcopy(default)
        elif not isinstance(entry[key], type(default)):
            raise UserError(f"{path}: [{where}] {key} must be a "
                            f"{type(default).__name__}")
    if entry["device"] not in ("cpu", "gpu"):
        raise UserError(f"{path}: [{where}] device must be cpu or gpu")
    for key in ("python", "glibc"):
        if not _VERSION.match(entry[key]):
            raise UserError(f"{path}: [{where}] {key} must be a version such "
                            f"as 3.11, got {entry[key]!r}")
    _strings(path, where, entry, ("pip", "pip_index", "apt", "build_apt",
                                  "sass"))
    for requirement in entry["pip"]:
        check_pinned(requirement, f"{path}: [{where}] pip")
    for key in ("apt", "build_apt"):
        for package in entry[key]:
            if "=" not in package:
                raise UserError(f"{path}: [{where}] {key} package {package!r} "
                                f"is not pinned; write name=version")
    if entry["framework_in_base"] and entry["pip_no_deps"]:
        raise UserError(f"{path}: [{where}] framework_in_base and pip_no_deps "
                        f"cannot both be set")
    for number, repo in enumerate(entry["apt_repos"], 1):
        _table(path, f"{where}.apt_repos #{number}", repo, APT_REPO_KEYS)
        if not _FINGERPRINT.match(repo["key_fingerprint"]):
            raise UserError(f"{path}: [{where}.apt_repos #{number}] "
                            f"key_fingerprint must be 40 upper-case hex digits")
    for number, source in enumerate(entry["sources"], 1):
        _table(path, f"{where}.sources #{number}", source, SOURCE_KEYS)
        if not _SHA256.match(source["sha256"]):
            raise UserError(f"{path}: [{where}.sources #{number}] sha256 must "
                            f"be 64 lower-case hex digits")
        if not _NAME.match(source["name"]):
            raise UserError(f"{path}: [{where}.sources #{number}] name "
                            f"{source['name']!r} must be a plain file name")
    for name, value in entry["env"].items():
        if not isinstance(value, str) or not re.match(r"^[A-Z_][A-Z0-9_]*$", name):
            raise UserError(f"{path}: [{where}] env {name} must be an "
                            f"upper-case name with a string value")


def _strings(path, where, entry, keys):
    for key in keys:
        if not all(isinstance(item, str) for item in entry[key]):
            raise UserError(f"{path}: [{where}] {key} must be a list of strings")


def _table(path, where, table, keys):
    if not isinstance(table, dict):
        raise UserError(f"{path}: [{where}] must be a table")
    unknown = sorted(set(table) - set(keys))
    missing = [k for k in keys if k not in table]
    if unknown or missing:
        raise UserError(f"{path}: [{where}] needs exactly the keys "
                        f"{', '.join(keys)} (missing: {', '.join(missing) or 'none'}; "
                        f"unknown: {', '.join(unknown) or 'none'})")
    for key in keys:
        if not isinstance(table[key], str) or not table[key]:
            raise UserError(f"{path}: [{where}] {key} must be a non-empty string")


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
