"""Dockerfiles from the matrix: Jinja2 templates (dockerfiles/templates),
deterministic output. Same inputs, byte-identical text: no clock, no
environment, labels and variables in sorted order. Nothing here touches
Docker, so rendering is a plain function (tests render every profile)."""
import hashlib
import json
import re
from typing import NamedTuple

import jinja2

from dlrepro import ROOT, matrix as matrix_mod
from dlrepro.images import pylock
from dlrepro.errors import UserError

TEMPLATES_DIR = ROOT / "dockerfiles" / "templates"
BASE_TEMPLATE = "base.Dockerfile.j2"
LABEL_PREFIX = "org.dlrepro."
# Every image installs the lock the same way: exactly the locked files, no
# resolver, no cache left in the layer.
PIP_FLAGS = ("--no-cache-dir --disable-pip-version-check --no-deps "
             "--require-hashes")
WHEELS_IN_IMAGE = "/tmp/dlrepro/wheels"
CA_IN_IMAGE = "/tmp/dlrepro/ca-bundle.pem"


class Recipe(NamedTuple):
    """Everything a build context holds besides the wheelhouse."""
    dockerfile: str
    requirements: str    # the lock file's text
    bootstrap: str       # lock lines that must be installed first ("" if none)
    templates: tuple     # the template files used, for the recipe hash


def _fail(message):
    raise UserError(f"template: {message}")


def _double_quoted(value):
    # A JSON string is a valid double-quoted Dockerfile word: \" and \\ are
    # the only escapes either needs for these values.
    return json.dumps(str(value), ensure_ascii=False)


def environment(templates_dir=None):
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(templates_dir or TEMPLATES_DIR)),
        undefined=jinja2.StrictUndefined, keep_trailing_newline=True,
        autoescape=False)
    env.filters["dq"] = _double_quoted
    env.tests["startswith"] = lambda value, prefix: str(value).startswith(prefix)
    env.tests["endswith"] = lambda value, suffix: str(value).endswith(suffix)
    env.globals["fail"] = _fail
    return env


def template_files(framework, templates_dir=None):
    templates_dir = templates_dir or TEMPLATES_DIR
    part = templates_dir / f"{framework}.Dockerfile.j2"
    if not part.exists():
        raise UserError(f"no template for {framework}: expected {part}")
    return (templates_dir / BASE_TEMPLATE, part)


def static_labels(framework, profile, entry, base, lock_sha256):
    """Labels every build of this recipe carries (OCI names where OCI has
    one). Build-time facts (recipe hash, creation time, base image ID) are
    added by dlrepro.images.build."""
    return {
        "org.opencontainers.image.title": f"dlrepro-{framework}-{profile}",
        "org.opencontainers.image.description":
            f"{framework} {entry['framework_version']} ({profile} profile) "
            f"for the dlrepro benchmark harness",
        "org.opencontainers.image.version": entry["framework_version"],
        "org.opencontainers.image.base.name": base,
        LABEL_PREFIX + "framework": framework,
        LABEL_PREFIX + "profile": profile,
        LABEL_PREFIX + "device": entry["device"],
        LABEL_PREFIX + "framework-version": entry["framework_version"],
        LABEL_PREFIX + "python": entry["python"],
        LABEL_PREFIX + "cuda": entry["cuda"],
        LABEL_PREFIX + "cudnn": entry["cudnn"],
        LABEL_PREFIX + "nccl": entry["nccl"],
        LABEL_PREFIX + "sass": ",".join(entry["sass"]),
        LABEL_PREFIX + "ptx": entry["ptx"],
        LABEL_PREFIX + "min-driver": entry["min_driver"],
        LABEL_PREFIX + "lock-sha256": lock_sha256,
    }


def bootstrap_text(lock_text):
    """The lock's own pin of pip, to be installed before everything else:
    the pip of an old distribution (Ubuntu 18.04's is 9.0) cannot install
    manylinux2010 wheels."""
    blocks = re.split(r"\n(?=[^\s#-])", lock_text)
    pips = [b.strip() for b in blocks
            if re.match(r"^pip==", b.strip(), re.IGNORECASE)]
    return "\n".join(pips) + "\n" if pips else ""


def render(framework, profile, entry, lock_text, *, base=None,
           wheelhouse=True, ca_bundle=False, templates_dir=None):
    """The Recipe of one image.

    `base` is the FROM reference (default: the matrix's base_image; images
    passes the locked `tag@digest` or an override). `wheelhouse`: install
    from the wheels in the build context with --no-index; otherwise from the
    package index (network at build time). `ca_bundle`: the context carries
    ca-bundle.pem for pip (the install stage only).
    """
    base = base or entry["base_image"]
    bootstrap = bootstrap_text(lock_text)
    flags = PIP_FLAGS
    if wheelhouse:
        flags += f" --no-index --find-links {WHEELS_IN_IMAGE}"
    if ca_bundle:
        flags += f" --cert {CA_IN_IMAGE}"
    files = template_files(framework, templates_dir)
    lock_sha = hashlib.sha256(lock_text.encode()).hexdigest()
    context = {
        "framework": framework, "profile": profile, "entry": entry,
        "base": base, "wheelhouse": wheelhouse, "ca_bundle": ca_bundle,
        "bootstrap": bool(bootstrap), "pip_flags": flags,
        "labels": static_labels(framework, profile, entry, base, lock_sha),
    }
    try:
        text = environment(templates_dir).get_template(files[1].name).render(
            context)
    except jinja2.TemplateError as exc:
        raise UserError(f"rendering {framework}/{profile}: {exc}")
    # One trailing newline, no trailing spaces: byte-stable output.
    lines = [line.rstrip() for line in text.splitlines()]
    dockerfile = "\n".join(lines).strip("\n") + "\n"
    return Recipe(dockerfile, lock_text, bootstrap, files)


def render_profile(framework, profile, matrix=None, *, locks_dir=None,
                   **options):
    """render() for a matrix profile, reading its lock file."""
    matrix = matrix if matrix is not None else matrix_mod.load()
    entry = matrix_mod.entry(matrix, framework, profile)
    lock = (locks_dir / f"{framework}-{profile}.txt" if locks_dir
            else matrix_mod.lock_path(framework, profile))
    if not lock.exists():
        raise UserError(f"no lock file {lock}; run `invoke pin --framework "
                        f"{framework} --profile {profile}`")
    lock_text = lock.read_text()
    pylock.read_lock(lock)  # a malformed lock fails here, named
    return render(framework, profile, entry, lock_text, **options)
