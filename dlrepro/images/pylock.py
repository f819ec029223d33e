"""Lock files for Python environments: every package of the closure pinned
with `==` and its sha256, resolved by pip itself (`pip install --dry-run
--report`), so that images and native environments install exactly the same
bytes with `--require-hashes`.

A lock is resolved for a target (Python version, glibc, machine). When the
target is this host's own platform, pip resolves natively; otherwise pip
resolves for the target's tags (`--python-version`, `--platform`,
`--only-binary=:all:`), which is how the Python 3.6 and 3.7 images (CNTK,
TensorFlow 1.15) are locked from a Python 3.11 host.
"""
import json
import platform
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import NamedTuple

from dlrepro.errors import UserError
from dlrepro.matrix import PIN, check_pinned

# pip retries each index 5 times by default; an index that cannot be reached
# at all (download.pytorch.org behind some proxies) then costs ~8 s per
# package. Two retries still ride out a dropped connection.
PIP_RETRIES = 2

class Target(NamedTuple):
    """The platform a lock is for: CPython `python` ("3.7") on a C library
    `glibc` ("2.27") and `machine`."""
    python: str
    glibc: str
    machine: str = "x86_64"


def host_target():
    libc, version = platform.libc_ver()
    return Target(f"{sys.version_info[0]}.{sys.version_info[1]}",
                  version if libc == "glibc" else "", platform.machine())


def platform_tags(target):
    """The manylinux tags a system with `target.glibc` accepts, newest first
    (PEP 600 names plus the legacy aliases pip also matches)."""
    major, minor = (int(part) for part in target.glibc.split(".")[:2])
    if major != 2:
        raise UserError(f"glibc {target.glibc}: only glibc 2.x is supported")
    tags = [f"manylinux_2_{m}_{target.machine}" for m in range(minor, 4, -1)]
    for alias, m in (("manylinux2014", 17), ("manylinux2010", 12),
                     ("manylinux1", 5)):
        if m <= minor:
            tags.append(f"{alias}_{target.machine}")
    return tags


def target_args(target, no_deps=False):
    """pip options that select `target`'s wheels; none for this host."""
    if target is None or target == host_target():
        return []
    args = ["--python-version", target.python, "--implementation", "cp"]
    for tag in platform_tags(target):
        args += ["--platform", tag]
    # pip only resolves a foreign platform from wheels; with --no-deps it may
    # take a source distribution (whose metadata the host builds).
    if not no_deps:
        args.append("--only-binary=:all:")
    return args


def resolve(requirements, *, python=None, index_urls=(), pip_args=(),
            target=None, no_deps=False):
    """Resolve `requirements` to [(name, version, sha256, url)] with pip.

    `target` is the platform the closure is for (this host's by default).
    `no_deps` takes `requirements` as the whole closure: each is resolved on
    its own, and nothing else is added.

    Resolving for another Python, pip neither holds packages to their
    Requires-Python (`pip download` for that Python later does) nor
    evaluates environment markers for it (`importlib-metadata;
    python_version < "3.8"` is left out for a 3.7 target). So each pin is
    checked here against the target: a version whose Requires-Python
    excludes it is excluded by a constraint, a dependency the target's
    markers require is added, and pip resolves again until the closure fits.
    """
    for requirement in requirements:
        check_pinned(requirement, "requirements")
    exclusions, added = [], []
    for _round in range(MAX_RESOLVE_ROUNDS):
        data = _pip_report(list(requirements) + added, python or sys.executable,
                           index_urls, pip_args, target, no_deps, exclusions)
        if target is None or target == host_target():
            break  # pip resolved for its own interpreter: nothing to check
        bad = requires_python_violations(data["install"], target)
        missing = missing_requirements(data["install"], target)
        if not bad and not missing:
            break
        if no_deps:
            raise UserError(
                f"the closure written in the matrix does not fit Python "
                f"{target.python}: " + "; ".join(
                    [f"{name}=={version} requires Python {spec}"
                     for name, version, spec in bad]
                    + [f"{need} is required by {by} and missing"
                       for need, by in missing]))
        exclusions += [f"{name}<{version}" for name, version, _spec in bad]
        added += [need for need, _by in missing if need not in added]
    else:
        raise UserError(f"no closure of {' '.join(requirements)} fits Python "
                        f"{target.python} after {MAX_RESOLVE_ROUNDS} rounds "
                        f"(excluded: {', '.join(exclusions)})")
    pins = []
    for item in data["install"]:
        info = item["download_info"]
        sha = info.get("archive_info", {}).get("hashes", {}).get("sha256")
        if not sha:
            raise UserError(f"pip reported no sha256 for {info['url']}")
        pins.append((item["metadata"]["name"], item["metadata"]["version"],
                     sha, info["url"]))
    return sorted(pins, key=lambda p: p[0].lower())


MAX_RESOLVE_ROUNDS = 25


def requires_python_violations(installs, target):
    """[(name, version, Requires-Python)] of report items whose
    Requires-Python excludes `target`'s Python (read as X.Y.0, as pip
    reads --python-version X.Y)."""
    if target is None:
        return []
    # Imported here: only lock resolution needs it (a pinned host package).
    from packaging.specifiers import InvalidSpecifier, SpecifierSet
    python = f"{target.python}.0"
    bad = []
    for item in installs:
        spec = item["metadata"].get("requires_python")
        if not spec:
            continue
        try:
            fits = SpecifierSet(spec).contains(python, prereleases=True)
        except InvalidSpecifier:
            continue
        if not fits:
            bad.append((item["metadata"]["name"], item["metadata"]["version"],
                        spec))
    return bad


def target_environment(target):
    """PEP 508 marker variables of CPython `target.python` on Linux."""
    return {"python_version": target.python,
            "python_full_version": f"{target.python}.0",
            "implementation_name": "cpython",
            "implementation_version": f"{target.python}.0",
            "platform_python_implementation": "CPython",
            "sys_platform": "linux", "platform_system": "Linux",
            "os_name": "posix", "platform_machine": target.machine,
            "platform_release": "", "platform_version": "", "extra": ""}


def missing_requirements(installs, target):
    """[(requirement, required by)] that `target`'s markers make necessary
    and the closure lacks."""
    from packaging.requirements import InvalidRequirement, Requirement
    from packaging.utils import canonicalize_name
    env = target_environment(target)
    have = {canonicalize_name(i["metadata"]["name"]) for i in installs}
    missing = []
    for item in installs:
        for text in item["metadata"].get("requires_dist") or []:
            try:
                req = Requirement(text)
            except InvalidRequirement:
                continue
            if req.marker is not None and not req.marker.evaluate(env):
                continue
            if canonicalize_name(req.name) not in have:
                missing.append((f"{req.name}{req.specifier}",
                                item["metadata"]["name"]))
    return sorted(set(missing))


def _pip_report(requirements, python, index_urls, pip_args, target, no_deps,
                exclusions):
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.json"
        command = [python, "-m", "pip", "install", "--dry-run", "--quiet",
                   "--ignore-installed", "--retries", str(PIP_RETRIES),
                   "--report", str(report)]
        for url in index_urls:
            command += ["--extra-index-url", url]
        cross = target_args(target, no_deps)
        if cross:
            # pip insists on --target with platform options, even for a
            # dry run that installs nothing.
            cross += ["--target", str(Path(tmp) / "target")]
        command += cross
        if exclusions:
            constraints = Path(tmp) / "exclusions.txt"
            constraints.write_text("\n".join(exclusions) + "\n")
            command += ["-c", str(constraints)]
        if no_deps:
            command.append("--no-deps")
        command += list(pip_args) + list(requirements)
        proc = subprocess.run(command, capture_output=True, text=True)
        if proc.returncode != 0:
            lines = [line for line in proc.stderr.strip().splitlines()
                     if "is neither a file nor a directory" not in line]
            raise UserError(f"pip could not resolve {' '.join(requirements)}: "
                            f"{(lines or ['(no output)'])[-1]}")
        return json.loads(report.read_text())


def render_lock(pins, *, header, index_urls=()):
    """The text of a lock file: one `name==version --hash` per package."""
    lines = [f"# {line}" if line else "#" for line in header.splitlines()]
    lines += [f"--extra-index-url {url}" for url in index_urls]
    for name, version, sha, _url in pins:
        lines.append(f"{name}=={version} \\\n    --hash=sha256:{sha}")
    return "\n".join(lines) + "\n"


def read_lock(path):
    """[(name, version, sha256)] from a lock file written by render_lock."""
    text = Path(path).read_text().replace("\\\n", " ")
    pins = []
    for number, line in enumerate(text.splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line or line.startswith("--"):
            continue
        match = PIN.match(line)
        hashes = re.findall(r"--hash=sha256:([0-9a-f]{64})", line)
        if not match or not hashes:
            raise UserError(f"{path}: line {number} is not `name==version "
                            f"--hash=sha256:...`: {line!r}")
        pins.append((match.group(1), match.group(3), hashes[0]))
    return pins


def lock_header(framework, profile):
    return (f"{framework}-{profile}: generated by invoke pin from "
            f"dockerfiles/matrix.toml. Do not edit by hand.")


HOST_HEADER = ("Host environment lock: generated by invoke pin --host from "
               "requirements/host.in.\nDo not edit by hand.")


def lock_profile_text(framework, profile, entry):
    """The lock file text for one matrix entry (resolves with pip)."""
    target = Target(entry["python"], entry["glibc"])
    pins = resolve(entry["pip"], index_urls=entry["pip_index"], target=target,
                   no_deps=entry["pip_no_deps"])
    if entry["pip_no_deps"]:
        wanted = {_canonical(PIN.match(r).group(1)) for r in entry["pip"]}
        got = {_canonical(name) for name, *_ in pins}
        if wanted != got:
            raise UserError(f"{framework}/{profile}: pip resolved "
                            f"{sorted(got ^ wanted)} differently from the "
                            f"closure written in the matrix")
    return render_lock(pins, header=lock_header(framework, profile),
                       index_urls=entry["pip_index"])


def host_lock_text(host_in):
    """The text of requirements/host.txt from requirements/host.in."""
    requirements = []
    for line in Path(host_in).read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            requirements.append(line)
    return render_lock(resolve(requirements), header=HOST_HEADER)


def _canonical(name):
    return re.sub(r"[-_.]+", "-", name).lower()
