"""Image archives: `invoke save` / `invoke load`.

Upstream base tags get deleted; an archive keeps the exact image. `save`
writes one `docker save` tar per image with SHA256SUMS and images.json
(reference, image ID, labels) beside them; `load` checks every archive
against its sum, loads it and checks the loaded image ID.
"""
import hashlib
import json
import os
import re
import tempfile
from pathlib import Path

from harness.resultfile import write_atomic

from dlrepro import show_path
from dlrepro.images import build as images
from dlrepro.errors import UserError
from dlrepro.images.wheelhouse import sha256_file

SUMS_NAME = "SHA256SUMS"
MANIFEST_NAME = "images.json"


def _archive_name(ref):
    return re.sub(r"[^A-Za-z0-9._-]+", "_", ref) + ".tar"


def save(refs, folder, client=None, log=print):
    """`docker save` each image into folder/<name>.tar, with SHA256SUMS and
    images.json (reference, image ID, labels) beside them: upstream base
    tags get deleted, an archive keeps the exact image."""
    client = client or images.engine()
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    manifest = _read_manifest(folder)
    for ref in refs:
        image = images.local_image(client, ref)
        if image is None:
            raise UserError(f"image {ref} is not present; build it first")
        path = folder / _archive_name(ref)
        digest = hashlib.sha256()
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=".tmp-")
        with os.fdopen(fd, "wb") as out:
            # The archive must name `ref` itself: an image with several tags
            # would otherwise be saved under its first one.
            for chunk in image.save(named=ref if ref in image.tags else True):
                out.write(chunk)
                digest.update(chunk)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
        manifest[path.name] = {"ref": ref, "image_id": image.id,
                               "sha256": digest.hexdigest(),
                               "size": path.stat().st_size,
                               "labels": dict(sorted((image.labels or {}).items()))}
        log(f"save: {ref} -> {show_path(path)} ({path.stat().st_size / 1e9:.2f} GB)")
    write_atomic(str(folder / MANIFEST_NAME), manifest)
    sums = "".join(f"{info['sha256']}  {name}\n"
                   for name, info in sorted(manifest.items()))
    (folder / SUMS_NAME).write_text(sums)
    return folder


def _read_manifest(folder):
    path = Path(folder) / MANIFEST_NAME
    if not path.exists():
        return {}
    try:
        return json.loads(path.read_text())
    except ValueError as exc:
        raise UserError(f"{path}: not valid JSON ({exc})")


def saved_manifest(folder):
    """The manifest of an `invoke save` folder; a UserError without one."""
    manifest = _read_manifest(folder)
    if not manifest:
        raise UserError(f"{folder} holds no {MANIFEST_NAME}; it was not made "
                        f"by `invoke save`")
    return manifest


def checked_archive(folder, name, info):
    """The path of one saved image archive, after checking it against the
    sum `invoke save` recorded."""
    path = Path(folder) / name
    if not path.is_file():
        raise UserError(f"{path} is missing")
    got = sha256_file(path)
    if got != info["sha256"]:
        raise UserError(f"{path}: sha256 {got} does not match the "
                        f"recorded {info['sha256']}; the archive is damaged")
    return path


def load(folder, refs=None, client=None, log=print):
    """Check every archive against SHA256SUMS, then `docker load` it and
    check the loaded image ID. Returns the references loaded."""
    client = client or images.engine()
    folder = Path(folder)
    manifest = saved_manifest(folder)
    loaded = []
    for name, info in sorted(manifest.items()):
        if refs and info["ref"] not in refs:
            continue
        path = checked_archive(folder, name, info)
        with open(path, "rb") as handle:
            client.images.load(handle)
        image = images.local_image(client, info["ref"])
        if image is None or image.id != info["image_id"]:
            raise UserError(f"loading {path} did not give {info['ref']} with "
                            f"ID {info['image_id']}")
        log(f"load: {info['ref']} ({info['image_id'][:19]})")
        loaded.append(info["ref"])
    if refs and set(refs) - set(loaded):
        raise UserError(f"{folder} has no archive of "
                        f"{', '.join(sorted(set(refs) - set(loaded)))}")
    return loaded
