"""Fetch an image the registry lock records (dlrepro.images.registry), by
its digest, into the store a runtime runs from, and check it before use:
the recipe label (and, where the store knows it, the image ID) must be the
lock's, else the image is refused in one line and removed again.

  docker        the engine pulls REF@DIGEST, then tags it as `invoke build`
                would, so that bench finds it under the same tag
  podman        `podman pull REF@DIGEST`, tagged alike
  charliecloud  `ch-image pull REF@DIGEST` (with --auth when
                CH_IMAGE_USERNAME is set: ch-image keeps no login file),
                then ch-convert into the shared images folder, the
                reference kept in dlrepro's record of the conversion
"""
import hashlib
import json
import os
import subprocess
import time
from pathlib import Path

from dlrepro import matrix as matrix_mod, show_path
from dlrepro.errors import UserError
from dlrepro.images import build as images, registry, transfer

RUNTIMES = ("docker", "podman", "charliecloud")
PULL_TIMEOUT_S = 3600


def lock_sha256(framework, profile):
    path = matrix_mod.lock_path(framework, profile)
    return hashlib.sha256(path.read_bytes()).hexdigest() \
        if path.exists() else None


def entry_for(framework, profile, matrix, *, client=None, base_image=None,
              registry_name=None, path=None):
    """The lock entry to pull for framework/profile: the one of this
    machine's recipe when its base is here (the recipe hash needs the
    base's ID), else the newest built from this lock file."""
    entries = registry.read_lock(path)
    recipe = None
    if client is not None:
        entry = matrix_mod.entry(matrix, framework, profile)
        plan_ = images.plan(framework, profile, matrix, client=client,
                            base_image=base_image or images.substituted_base(
                                entry) or entry["base_image"])
        recipe = plan_.recipe_hash if plan_.base_id else None
    found = registry.candidates(
        entries, framework, profile, recipe=recipe,
        lock_sha256=lock_sha256(framework, profile), registry=registry_name)
    if not found:
        where = f" in {registry_name}" if registry_name else ""
        what = f"recipe {recipe[:12]}" if recipe else "this lock file"
        raise UserError(f"{show_path(registry.lock_path(path))} "
                        f"records no image of {framework}/{profile} from "
                        f"{what}{where}; run `invoke push --framework "
                        f"{framework} --profile {profile} --registry ...` "
                        f"where it was built")
    return found[0]


def _refuse_unless_locked(entry, labels, image_id=None, where=None):
    """UserError when an image already here (its labels and id) is not the
    one the lock file's entry records: a pull never overwrites it."""
    why = registry.refusal(entry, labels, image_id, where=where)
    if why:
        raise UserError(why)


def _split(ref):
    repository, _, version = ref.rpartition(":")
    return repository, version


# --- docker ------------------------------------------------------------------

def docker_pull(client, entry, log=print):
    """The entry's image in the Docker engine under its tag; returns the
    tag."""
    import docker
    present = images.local_image(client, entry["tag"])
    if present is not None:
        _refuse_unless_locked(entry, present.labels, present.id,
                              where=f"the local image {entry['tag']}")
        return entry["tag"]
    reference = entry["reference"]
    log(f"pull: {reference}")
    error = None
    try:
        with transfer.progress(f"pull {entry['framework']}/"
                               f"{entry['profile']}") as shown:
            repository, _, digest = reference.partition("@")
            for chunk in client.api.pull(repository, tag=digest, stream=True,
                                         decode=True):
                error = transfer.follow(chunk, shown) or error
    except docker.errors.APIError as exc:
        error = images.first_line(exc)
    except Exception as exc:  # the connection broke mid-stream
        error = f"{type(exc).__name__}: {exc}"
    pulled = None if error else images.local_image(client, reference)
    if pulled is None:
        raise UserError(f"pull of {reference} failed: "
                        f"{registry.push_hint(error, reference)}")
    why = registry.refusal(entry, pulled.labels, pulled.id)
    if why:
        try:  # the name only: the bytes may be another image's too
            client.api.remove_image(reference)
        except docker.errors.APIError:
            pass
        raise UserError(why)
    pulled.tag(*_split(entry["tag"]))
    return entry["tag"]


# --- podman ------------------------------------------------------------------

def podman_pull(store, entry, log=print):
    """The entry's image in Podman's store under its tag; returns the tag."""
    from dlrepro.images import podman as podman_images
    present = store.inspect(entry["tag"])
    if present is not None:
        _refuse_unless_locked(entry, present.get("Labels"),
                              podman_images.Image(present).id,
                              where=f"the local image {entry['tag']}")
        return entry["tag"]
    reference = entry["reference"]
    log(f"podman: pulling {reference}")
    proc = podman_images.run(store.podman_bin, "pull", reference,
                             timeout=PULL_TIMEOUT_S)
    if proc.returncode != 0:
        raise UserError(f"podman pull of {reference} failed: "
                        f"{_last_line(proc.stderr)}")
    attrs = store.inspect(reference)
    why = registry.refusal(entry, attrs.get("Labels"),
                           podman_images.Image(attrs).id)
    if why:
        # The name only where the bytes have other names too (podman rmi
        # of one name of several untags it).
        podman_images.run(store.podman_bin, "rmi", reference)
        raise UserError(why)
    podman_images.run(store.podman_bin, "tag", reference, entry["tag"])
    return entry["tag"]


# --- charliecloud --------------------------------------------------------------

def _last_line(text):
    lines = [line for line in (text or "").splitlines() if line.strip()]
    return lines[-1].strip()[:300] if lines else "no output"


def ch_env():
    from dlrepro.images import charliecloud as ch_images
    env = dict(os.environ, USER=os.environ.get("USER") or ch_images._user())
    env["PATH"] = ch_images.SYSTEM_PATH + ":" + env.get("PATH", "")
    return env


def ch_image_labels(name, env):
    """The labels ch-image stored with its image `name`."""
    proc = subprocess.run(["ch-image", "storage-path"], capture_output=True,
                          text=True, env=env, timeout=60)
    storage = Path(proc.stdout.strip() or "/var/tmp/{}.ch".format(env["USER"]))
    try:
        metadata = json.loads((storage / "img" / name.replace("/", "%")
                               .replace(":", "+") / "ch" / "metadata.json")
                              .read_text())
    except (OSError, ValueError):
        return None
    return metadata.get("labels") or {}


def charliecloud_pull(entry, folder=None, log=print):
    """The entry's image converted for ch-run (pulled with ch-image first
    unless a conversion of it is there); returns dlrepro's record."""
    from dlrepro.images import charliecloud as ch_images
    from harness.blocks import utc_stamp
    from harness.resultfile import write_atomic
    record = ch_images.converted(entry["tag"], folder)
    if record is not None and record.get("reference") == entry["reference"]:
        _refuse_unless_locked(entry, record.get("labels"),
                              where="the converted image")
        return record
    env = ch_env()
    argv = ["ch-image", "pull", entry["reference"], entry["tag"]]
    if env.get("CH_IMAGE_USERNAME"):
        argv[1:1] = ["--auth"]
    log(f"ch-image: pulling {entry['reference']}")
    started = time.time()
    proc = subprocess.run(argv, capture_output=True, text=True, env=env,
                          stdin=subprocess.DEVNULL, timeout=PULL_TIMEOUT_S)
    if proc.returncode != 0:
        raise UserError(f"ch-image pull of {entry['reference']} failed: "
                        f"{_last_line(proc.stderr + proc.stdout)}")
    labels = ch_image_labels(entry["tag"], env)
    why = registry.refusal(entry, labels)
    if why:
        subprocess.run(["ch-image", "delete", entry["tag"]], env=env,
                       capture_output=True, timeout=600)
        raise UserError(why)
    try:
        record = ch_images.convert(entry["tag"], entry["image_id"],
                                   dict(sorted(labels.items())), "ch-image",
                                   folder, log)
    finally:
        # The conversion is what runs: ch-image's own copy (as large again)
        # goes; its download cache stays for the next pull.
        subprocess.run(["ch-image", "delete", entry["tag"]], env=env,
                       capture_output=True, timeout=600)
    record.update(reference=entry["reference"],
                  converted_at=utc_stamp(started))
    write_atomic(str(ch_images.record_path(entry["tag"], folder)), record)
    return record


# --- invoke pull ---------------------------------------------------------------

def pull(pairs, matrix, runtime="docker", *, registry_name=None, path=None,
         folder=None, log=print):
    """`invoke pull`: each target's locked image into `runtime`'s store;
    yields (framework, profile, what the runtime runs: a tag or a path)."""
    if runtime not in RUNTIMES:
        raise UserError(f"--runtime must be one of {', '.join(RUNTIMES)}, "
                        f"got {runtime!r}")
    if registry_name:
        registry_name = registry.registry_name(registry_name)
    from dlrepro.images import podman as podman_images
    client = images.engine() if runtime == "docker" else None
    store = podman_images.Store() if runtime == "podman" else None
    for framework, profile in pairs:
        entry = entry_for(framework, profile, matrix,
                          client=_base_reader(client, store), path=path,
                          registry_name=registry_name)
        if runtime == "docker":
            yield framework, profile, docker_pull(client, entry, log)
        elif runtime == "podman":
            yield framework, profile, podman_pull(store, entry, log)
        else:
            yield framework, profile, charliecloud_pull(entry, folder,
                                                        log)["path"]


def _base_reader(client, store):
    """What can tell the base's image ID here (for the recipe), or None:
    a node with neither picks by the lock file alone."""
    if client is not None or store is not None:
        return client or store
    from dlrepro.images import podman as podman_images
    return podman_images.docker_engine()


def ensure(runtime, framework, profile, matrix, registry_name, *,
           source=None, base_image=None, folder=None, log=print):
    """What a runtime runs for framework/profile under --registry: the
    locked image, pulled when missing (a tag for docker and podman, the
    conversion's record for charliecloud). `source`: the Docker client or
    Podman store that reads the base's ID, if any."""
    registry_name = registry.registry_name(registry_name)
    entry = entry_for(framework, profile, matrix,
                      client=source if source is not None
                      else _base_reader(None, None),
                      base_image=base_image, registry_name=registry_name)
    if runtime == "docker":
        return docker_pull(source, entry, log)
    if runtime == "podman":
        return podman_pull(source, entry, log)
    return charliecloud_pull(entry, folder, log)
