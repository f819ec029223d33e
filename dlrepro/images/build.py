"""Framework images: build, labels, base-image lock (the wheelhouse is
dlrepro.images.wheelhouse, save/load dlrepro.images.archive).

An image's tag derives from the hash of its recipe (matrix entry, the
templates it uses, the Dockerfile rendered from them, its lock file, its
base image reference and the base's local image ID), e.g.
dlrepro/pytorch:cpu-0123456789ab. A build whose tag
already exists is a no-op, so `ensure` is cheap enough to call before every
sweep.

Builds are offline by default: `wheelhouse.make` downloads exactly the
locked files on the host (pip checks every sha256), the build context carries
them, and the image installs with --no-index --require-hashes, with the
build's network off when the recipe needs no apt packages. A build from the
package index instead (`wheelhouse=False`) may be given a CA bundle and the
host's proxy variables; both stay in the throwaway install stage.
"""
import hashlib
import json
import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import NamedTuple, Optional

from harness.blocks import utc_now

from dlrepro import ROOT, git_revision, matrix as matrix_mod, show_path
from dlrepro.images import render, transfer
from dlrepro.images import wheelhouse as wheelhouse_mod
from dlrepro.errors import UserError
# Re-exported: callers reach the engine and the bases through this module.
from dlrepro.images.bases import (  # noqa: F401
    BASE_LOCK_PATH, BASE_OVERRIDES_ENV, Substitution, base_for,
    base_reference, check_overrides, lock_bases, matrix_bases,
    parse_overrides, read_base_lock, resolve_base, setting_for,
    substituted_base, substitution, write_base_lock)
from dlrepro.images.engine import (  # noqa: F401
    NATIVE_HINT, engine, first_line, local_image)

BUILD_DIR = ROOT / "build"
PREFIX_ENV = "DLREPRO_IMAGE_PREFIX"
DEFAULT_PREFIX = "dlrepro"
# Bump when the recipe hash's inputs change meaning.
RECIPE_FORMAT = 1
LABEL_RECIPE = render.LABEL_PREFIX + "recipe"
PROXY_VARIABLES = ("HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "http_proxy",
                   "https_proxy", "no_proxy")


class BuildFailed(UserError):
    """The engine ran the recipe and it failed: a broken recipe, not an
    image that merely cannot be had on this machine."""


# --- names -------------------------------------------------------------------

def prefix():
    return os.environ.get(PREFIX_ENV) or DEFAULT_PREFIX


def image_repository(framework, name_prefix=None):
    return f"{name_prefix or prefix()}/{framework}"



class Plan(NamedTuple):
    framework: str
    profile: str
    entry: dict
    base: str                # the FROM reference (name or name@digest)
    base_id: Optional[str]   # the base's local image ID, None if not present
    recipe_hash: str
    tag: str
    lock_path: Path


def targets(matrix, frameworks=(), profile=None, every=False):
    """The (framework, profile) pairs a build-like task acts on: the named
    frameworks' `profile` (default cpu), or with `every` all frameworks
    (unless named) and all their profiles (unless one is named)."""
    if not frameworks and not every:
        raise UserError("name a framework (--framework NAME) or give --all")
    names = list(frameworks) or matrix_mod.frameworks(matrix)
    pairs = []
    for framework in names:
        profiles = matrix_mod.profiles(matrix, framework)
        if profile:
            if profile in profiles or not every:
                matrix_mod.entry(matrix, framework, profile)
                pairs.append((framework, profile))
        elif every:
            pairs += [(framework, name) for name in profiles]
        else:
            pairs.append((framework, "cpu" if "cpu" in profiles else profiles[0]))
    if not pairs:
        raise UserError(f"no framework has a profile {profile!r}")
    return pairs


# --- base substitution -------------------------------------------------------------
# One setting says which base each matrix base is replaced by on this
# machine (a registry that cannot be reached, a local stand-in, a mirror):
# DLREPRO_BASE_OVERRIDES="FROM=TO[,FROM=TO]". build, bench, converge, save
# and render all read it through `substituted_base`, so an image that
# `invoke build` made is the image `invoke bench` looks for. A command's
# --base-image values are a per-command form of the same mapping (FROM=TO),
# or a plain REF that replaces whatever base its targets have.

def plan(framework, profile, matrix, *, base_image=None, locked=False,
         base_lock=BASE_LOCK_PATH, client=None, name_prefix=None):
    """What `build` would make, and under which tag (asks the engine for the
    base's image ID; builds nothing). `base_image` None: the base that
    DLREPRO_BASE_OVERRIDES substitutes, else the matrix's."""
    entry = matrix_mod.entry(matrix, framework, profile)
    if base_image is None:
        base_image = substituted_base(entry)
    lock_path = matrix_mod.lock_path(framework, profile)
    if not lock_path.exists():
        raise UserError(f"no lock file {lock_path}; run `invoke pin "
                        f"--framework {framework} --profile {profile}`")
    name = base_image or entry["base_image"]
    base, pin = base_reference(entry, base_image, locked=locked,
                               base_lock=base_lock,
                               where=f" of {framework}/{profile}")
    client = client or engine()
    image = local_image(client, base)
    base_id = image.id if image is not None else None
    if pin and pin.get("id") and base_id != pin["id"]:
        raise UserError(f"base image {name} is {base_id or 'not present'}, but "
                        f"{Path(base_lock).name} pins {pin['id']}; rebuild or "
                        f"load the pinned one, or run `invoke lock --image {name}`")
    lock_bytes = lock_path.read_bytes()
    # The canonical (offline) Dockerfile as well as its inputs: a change in
    # how dlrepro.images.render fills the templates changes the image too. The
    # source of the packages (wheelhouse or index, CA) does not: the lock's
    # hashes fix the bytes either way.
    recipe_text = render.render(framework, profile, entry,
                                lock_bytes.decode(), base=base)
    recipe = {
        "format": RECIPE_FORMAT, "framework": framework, "profile": profile,
        "entry": entry, "lock_sha256": hashlib.sha256(lock_bytes).hexdigest(),
        "templates": {path.name: hashlib.sha256(path.read_bytes()).hexdigest()
                      for path in recipe_text.templates},
        "dockerfile_sha256": hashlib.sha256(
            recipe_text.dockerfile.encode()).hexdigest(),
        "base": base, "base_id": base_id,
    }
    digest = hashlib.sha256(json.dumps(recipe, sort_keys=True).encode()).hexdigest()
    tag = f"{image_repository(framework, name_prefix)}:{profile}-{digest[:12]}"
    return Plan(framework, profile, entry, base, base_id, digest, tag, lock_path)


# --- build ------------------------------------------------------------------------------

def build_labels(plan_):
    """Labels added at build time (the static ones are in the Dockerfile)."""
    labels = {
        LABEL_RECIPE: plan_.recipe_hash,
        render.LABEL_PREFIX + "base-image-id": plan_.base_id or "",
        "org.opencontainers.image.created": utc_now(),
        "org.opencontainers.image.revision": git_revision(),
    }
    if "@" in plan_.base:
        labels["org.opencontainers.image.base.digest"] = plan_.base.split("@", 1)[1]
    return labels


def _link_or_copy(source, target):
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(source, target)
    except OSError:
        shutil.copy2(source, target)


def prepare_context(plan_, folder, *, wheelhouse=True, ca_bundle=None,
                    wheelhouse_root=wheelhouse_mod.DEFAULT_ROOT):
    """Write the build context of `plan_` into `folder`; returns the Recipe."""
    recipe = render.render_profile(plan_.framework, plan_.profile,
                                   {plan_.framework: {plan_.profile: plan_.entry}},
                                   base=plan_.base, wheelhouse=wheelhouse,
                                   ca_bundle=bool(ca_bundle))
    folder.mkdir(parents=True)
    (folder / "Dockerfile").write_text(recipe.dockerfile)
    (folder / "requirements.txt").write_text(recipe.requirements)
    if recipe.bootstrap:
        (folder / "bootstrap.txt").write_text(recipe.bootstrap)
    house = wheelhouse_mod.folder(plan_.framework, plan_.profile,
                                  wheelhouse_root)
    files = wheelhouse_mod.files(
        plan_.framework, plan_.profile, plan_.entry, wheelhouse_root) \
        if (wheelhouse or plan_.entry["sources"]) else {}
    if files is None:
        raise UserError(f"no complete wheelhouse for {plan_.framework}/"
                        f"{plan_.profile}; run `invoke wheelhouse --framework "
                        f"{plan_.framework} --profile {plan_.profile}`")
    for rel in files:
        if wheelhouse or rel.startswith("sources/"):
            _link_or_copy(house / rel, folder / rel)
    if ca_bundle:
        ca_bundle = Path(ca_bundle)
        if not ca_bundle.is_file():
            raise UserError(f"CA bundle {ca_bundle} is not a readable file")
        shutil.copyfile(ca_bundle, folder / "ca-bundle.pem")
    return recipe


def needs_network(entry, wheelhouse):
    """Whether the build's RUN steps need the network (apt, or pip from the
    index). Offline builds run with the network off, which proves it."""
    return bool(entry["apt"] or entry["apt_repos"] or not wheelhouse)


def build(plan_, *, wheelhouse=True, ca_bundle=None, proxy=None, client=None,
          log=print, logs_dir=BUILD_DIR / "logs", wheelhouse_root=wheelhouse_mod.DEFAULT_ROOT,
          nocache=False):
    """Build `plan_` unless its tag exists; returns the image ID. `nocache`
    ignores the engine's layer cache (a cold build, for benchmarks)."""
    client = client or engine()
    existing = local_image(client, plan_.tag)
    if existing is not None:
        log(f"build: {plan_.tag} is up to date")
        return existing.id
    if plan_.base_id is None:
        raise UserError(f"base image {plan_.base} of {plan_.framework}/"
                        f"{plan_.profile} is not present; pull it, load it "
                        f"(`invoke load`), or give --base-image")
    logs_dir = Path(logs_dir)
    logs_dir.mkdir(parents=True, exist_ok=True)
    log_path = logs_dir / f"{plan_.framework}-{plan_.profile}-{plan_.recipe_hash[:12]}.log"
    contexts = BUILD_DIR / "contexts"
    contexts.mkdir(parents=True, exist_ok=True)
    folder = Path(tempfile.mkdtemp(dir=contexts, prefix=f"{plan_.framework}-"))
    shutil.rmtree(folder)
    try:
        prepare_context(plan_, folder, wheelhouse=wheelhouse,
                        ca_bundle=ca_bundle, wheelhouse_root=wheelhouse_root)
        buildargs = {}
        if not wheelhouse:
            for name in PROXY_VARIABLES:
                if os.environ.get(name):
                    buildargs[name] = os.environ[name]
            if proxy:
                buildargs.update(HTTP_PROXY=proxy, HTTPS_PROXY=proxy,
                                 http_proxy=proxy, https_proxy=proxy)
        network = "host" if needs_network(plan_.entry, wheelhouse) else "none"
        log(f"build: {plan_.tag} from {plan_.base} ({'wheelhouse' if wheelhouse else 'package index'}, "
            f"network {network}; log {show_path(log_path)})")
        image_id = _stream_build(client, folder, plan_, buildargs, network,
                                 log_path, nocache)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return image_id


def _stream_build(client, folder, plan_, buildargs, network, log_path,
                  nocache=False):
    import docker
    image_id = None
    error = None
    steps = []
    with open(log_path, "w") as log_file, transfer.progress(
            f"build {plan_.framework}/{plan_.profile}") as shown:
        try:
            stream = client.api.build(
                path=str(folder), tag=plan_.tag, labels=build_labels(plan_),
                buildargs=buildargs, network_mode=network, pull=False, rm=True,
                forcerm=True, nocache=nocache, decode=True)
            for chunk in stream:
                if "stream" in chunk:
                    log_file.write(chunk["stream"])
                    steps += STEP_IMAGE.findall(chunk["stream"])
                    transfer.follow(chunk, shown)  # the step begun
                if "error" in chunk:
                    error = chunk["error"].strip()
                    log_file.write(f"ERROR: {error}\n")
                if "aux" in chunk and "ID" in chunk["aux"]:
                    image_id = chunk["aux"]["ID"]
                log_file.flush()
        except docker.errors.APIError as exc:
            error = first_line(exc)
            log_file.write(f"ERROR: {error}\n")
    if error or image_id is None:
        drop_stage_images(client, None, steps)
        # The engine colours a RUN step's stderr with terminal escapes.
        text = re.sub(r"\x1b\[[0-9;]*m", "", log_path.read_text())
        tail = [line for line in text.strip().splitlines() if line.strip()][-8:]
        raise BuildFailed(
            f"build of {plan_.framework}/{plan_.profile} failed: "
            f"{error or 'no image produced'} (log: {show_path(log_path)})\n  "
            + "\n  ".join(tail))
    drop_stage_images(client, image_id, steps)
    return image_id


# The classic builder prints " ---> ID" for the image of every step.
STEP_IMAGE = re.compile(r"^ ---> ([0-9a-f]{12,64})\s*$", re.MULTILINE)


def drop_stage_images(client, image_id, steps):
    """Remove what the build's throwaway stages left as untagged images
    (the install stage holds the wheelhouse and the unpacked packages:
    ~10 GB for a GPU image), and what a failed build left (`image_id`
    None). The final image's own ancestry stays, so an
    unchanged rebuild is still a no-op by tag; a changed recipe reinstalls
    the packages instead of reusing the install stage's layers."""
    import docker
    kept = set()
    if image_id is not None:  # None: the build failed, nothing is kept
        kept = {entry["Id"].split(":")[-1]
                for entry in client.api.history(image_id)
                if entry.get("Id", "<missing>") != "<missing>"}
        kept.add(image_id.split(":")[-1])
    for step in reversed(steps):
        if any(full.startswith(step) for full in kept):
            continue
        try:
            if client.api.inspect_image(step).get("RepoTags"):
                continue  # a named image (a base): never ours to remove
            # Its untagged parents go with it, down to the first image
            # something else still uses (the shared `system` stage).
            client.api.remove_image(step)
        except docker.errors.APIError:
            pass  # already gone with a child, or still used elsewhere


def pull_base(client, ref, log=print):
    """Pull a missing base image; None on success, else the reason."""
    import docker
    log(f"build: pulling base image {ref}")
    try:
        client.api.pull(ref)
    except docker.errors.APIError as exc:
        return first_line(exc)
    return None


def build_command(framework, profile, entry, base_image=None):
    """The `invoke build` line that makes the image FROM `base_image` (None:
    the matrix's) under the current DLREPRO_BASE_OVERRIDES."""
    command = f"invoke build --framework {framework} --profile {profile}"
    if (base_image or None) != substituted_base(entry):
        command += f" --base-image {entry['base_image']}=" \
                   f"{base_image or entry['base_image']}"
    return command


def ensure(framework, profile, matrix, *, base_image=None, locked=False,
           build_missing=True, make_wheels=True, wheelhouse=True,
           ca_bundle=None, proxy=None, client=None, log=print,
           base_lock=BASE_LOCK_PATH, wheelhouse_root=wheelhouse_mod.DEFAULT_ROOT,
           name_prefix=None):
    """The tag of an up-to-date image for framework/profile, building it if
    needed: pulls a missing base, downloads a missing wheelhouse, builds
    (offline unless `wheelhouse` is False). UserError says exactly what to
    run when the image cannot be had here."""
    client = client or engine()
    entry = matrix_mod.entry(matrix, framework, profile)
    if base_image is None:
        base_image = substituted_base(entry)

    def current_plan():
        return plan(framework, profile, matrix, base_image=base_image or
                    entry["base_image"],
                    locked=locked, base_lock=base_lock, client=client,
                    name_prefix=name_prefix)

    plan_ = current_plan()
    if local_image(client, plan_.tag) is not None:
        log(f"build: {plan_.tag} is up to date")
        return plan_.tag
    command = build_command(framework, profile, entry, base_image)
    if not build_missing:
        raise UserError(f"image {plan_.tag} is missing; run `{command}`")
    if plan_.base_id is None:
        reason = pull_base(client, plan_.base, log)
        if reason:
            raise UserError(
                f"image {plan_.tag} is missing and its base {plan_.base} is "
                f"not present and cannot be pulled ({reason}): load it with "
                f"`invoke load`, or build FROM a local image in its place: "
                f"{BASE_OVERRIDES_ENV}=\"{entry['base_image']}=IMAGE\" "
                f"(build, bench, converge, save and render all read it; "
                f"--base-image {entry['base_image']}=IMAGE says the same for "
                f"one command)")
        # The base's image ID is part of the recipe: plan again.
        plan_ = current_plan()
        if local_image(client, plan_.tag) is not None:
            return plan_.tag
    if (wheelhouse or plan_.entry["sources"]) and wheelhouse_mod.files(
            framework, profile, plan_.entry, wheelhouse_root) is None:
        if not make_wheels:
            raise UserError(f"image {plan_.tag} is missing and has no "
                            f"wheelhouse; run `invoke wheelhouse --framework "
                            f"{framework} --profile {profile}` then `{command}`")
        try:
            wheelhouse_mod.make(framework, profile, plan_.entry, wheelhouse_root, log)
        except UserError as exc:
            raise UserError(f"{exc}; then run `{command}`")
    build(plan_, wheelhouse=wheelhouse, ca_bundle=ca_bundle, proxy=proxy,
          client=client, log=log, wheelhouse_root=wheelhouse_root)
    return plan_.tag


def describe(client, ref):
    """What a result records as environment.container for image `ref`."""
    from dlrepro.images import registrylock
    image = client.images.get(ref)
    digests = image.attrs.get("RepoDigests") or []
    return {
        "runtime": "docker",
        "image": ref,
        "image_id": image.id,
        "repo_digest": digests[0] if digests else None,
        # What `invoke push` recorded for this very image: anyone can pull it.
        "pullable": registrylock.pullable(image.id),
        "labels": dict(sorted((image.labels or {}).items())),
        "engine_version": client.version().get("Version"),
    }
