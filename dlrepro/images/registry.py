"""Images through a registry: `invoke push` records each pushed image's
pullable reference (REGISTRY/PATH/framework@sha256:...) beside the recipe
hash it was built from in dockerfiles/registry.lock.json; `invoke pull` and
bench's --registry fetch by that digest (dlrepro.images.pulls) and check the
recipe label against the lock before use.

Credentials are the clients' own: the Docker engine's login file
(`docker login`, ~/.docker/config.json or $DOCKER_CONFIG), Podman's auth
file (`podman login`, REGISTRY_AUTH_FILE), ch-image's CH_IMAGE_USERNAME and
CH_IMAGE_PASSWORD. dlrepro never takes, prints or records a password.

The lock is written whole (temp file + rename) after each image's push has
finished with a digest: a failed or interrupted push records nothing.
"""
import re

from harness.blocks import utc_now

from dlrepro import show_path
from dlrepro.errors import UserError
from dlrepro.images import build as images, transfer
# The lock itself is a module of its own (describe() reads it, and build
# must not import this module); re-exported here.
from dlrepro.images.registrylock import (  # noqa: F401
    DEFAULT_LOCK, LOCK_ENV, lock_path, pullable, read_lock, write_lock)

# Where bench and converge pull missing images from (as --registry does).
REGISTRY_ENV = "DLREPRO_REGISTRY"
LABEL_LOCK = "org.dlrepro.lock-sha256"
REGISTRY_NAME = re.compile(
    r"^(?P<host>[A-Za-z0-9.-]+(:[0-9]+)?)(?P<path>(/[a-z0-9._-]+)*)$")


def registry_name(text):
    """HOST[:PORT][/PATH] as given (no scheme, no tag), or UserError."""
    text = (text or "").strip().rstrip("/")
    for scheme in ("https://", "http://", "docker://"):
        if text.startswith(scheme):
            text = text[len(scheme):]
    found = REGISTRY_NAME.match(text)
    if not found or not ("." in found["host"] or ":" in found["host"]
                         or found["host"] == "localhost"):
        raise UserError(f"--registry {text!r} is not HOST[:PORT][/PATH] "
                        f"(a host with a dot or a port, e.g. "
                        f"registry.example.org:5000/team)")
    return text


def host_of(registry):
    return registry.split("/", 1)[0]


def remote_tag(registry, tag):
    """Where the local tag PREFIX/framework:profile-hash goes in `registry`."""
    repository, _, version = tag.rpartition(":")
    return f"{registry}/{repository.rsplit('/', 1)[-1]}:{version}"


def in_registry(entry, registry):
    return registry is None or entry["reference"].startswith(registry + "/")


def candidates(entries, framework, profile, *, recipe=None, lock_sha256=None,
               registry=None):
    """Entries for framework/profile, newest first: those of `recipe` when
    it is known here (the base is present), else those built from this
    lock file (a node without the base cannot compute the recipe)."""
    found = [e for e in entries
             if e["framework"] == framework and e["profile"] == profile
             and in_registry(e, registry)
             and (e["recipe"] == recipe if recipe
                  else e.get("lock_sha256") == lock_sha256)]
    return sorted(found, key=lambda e: e["pushed_at"], reverse=True)


def refusal(entry, labels, image_id=None, where=None):
    """Why an image must not stand for `entry` (its recipe label or its ID
    differs from the lock's), or None. `where`: which image (default: the
    one pulled by the entry's reference)."""
    where = where or f"the pulled image {entry['reference']}"
    recipe = (labels or {}).get(images.LABEL_RECIPE)
    if recipe != entry["recipe"]:
        return (f"{where} carries recipe {(recipe or 'none')[:12]}, the "
                f"lock says {entry['recipe'][:12]}: refused")
    if image_id and image_id != entry["image_id"]:
        return (f"{where} is {image_id[:19]}, the lock says "
                f"{entry['image_id'][:19]}: refused")
    return None


# --- push --------------------------------------------------------------------

def push_hint(error, registry):
    """The one line a failed push ends with: the engine's reason and what
    to do about it."""
    host = host_of(registry)
    text = error.splitlines()[0] if error else "no digest returned"
    if re.search(r"unauthorized|authentication required|denied|no basic auth",
                 text, re.I):
        return f"{text} (log in with `docker login {host}`)"
    if re.search(r"no such host|server misbehaving|lookup", text, re.I):
        return f"{text} (no registry {host} is known here)"
    return text


def push_one(client, plan_, registry, base_image=None, log=print):
    """Push one built image (FROM `base_image`, None: the matrix's); its
    lock entry (not yet written)."""
    import docker
    image = images.local_image(client, plan_.tag)
    if image is None:
        command = images.build_command(plan_.framework, plan_.profile,
                                       plan_.entry, base_image)
        raise UserError(f"image {plan_.tag} is not built; run `{command}`"
                        f" first")
    target = remote_tag(registry, plan_.tag)
    repository, _, version = target.rpartition(":")
    image.tag(repository, version)
    digest, error = None, None
    log(f"push: {plan_.tag} -> {target}")
    try:
        with transfer.progress(f"push {plan_.framework}/{plan_.profile}") \
                as shown:
            for chunk in client.api.push(repository, tag=version, stream=True,
                                         decode=True):
                error = transfer.follow(chunk, shown) or error
                digest = (chunk.get("aux") or {}).get("Digest") or digest
    except docker.errors.APIError as exc:
        error = images.first_line(exc)
    except Exception as exc:  # the engine's connection broke mid-stream
        error = f"{type(exc).__name__}: {exc}"
    if error or not digest:
        try:  # the name this push gave: nothing of it stays
            client.api.remove_image(target)
        except docker.errors.APIError:
            pass
        raise UserError(f"push of {plan_.tag} to {registry} failed: "
                        f"{push_hint(error, registry)}; nothing recorded")
    return {"framework": plan_.framework, "profile": plan_.profile,
            "recipe": plan_.recipe_hash, "tag": plan_.tag,
            "reference": f"{repository}@{digest}", "image_id": image.id,
            "lock_sha256": (image.labels or {}).get(LABEL_LOCK),
            "base": plan_.base, "pushed_at": utc_now()}


def push(pairs, matrix, registry, *, subst=None, path=None, client=None,
         log=print):
    """Push each target's built image to `registry` and record it; returns
    the entries written. Stops at the first failure (what was pushed
    before it is recorded)."""
    registry = registry_name(registry)
    client = client or images.engine()
    written = []
    for framework, profile in pairs:
        entry = matrix[framework][profile]
        base = images.substituted_base(entry, subst) or entry["base_image"]
        plan_ = images.plan(framework, profile, matrix, client=client,
                            base_image=base)
        record = push_one(client, plan_, registry, base, log)
        entries = [e for e in read_lock(path)
                   if not (e["recipe"] == record["recipe"]
                           and e["reference"].rpartition("@")[0]
                           == record["reference"].rpartition("@")[0])]
        write_lock(entries + [record], path)
        log(f"push: {record['reference']} (recipe {record['recipe'][:12]})"
            f" recorded in {show_path(lock_path(path))}")
        written.append(record)
    return written
