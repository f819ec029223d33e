"""dockerfiles/registry.lock.json: what `invoke push` recorded (each
image's pullable reference beside its recipe hash), read by `invoke pull`,
bench --registry and every result's description of its image
(dlrepro.images.registry says how it is made and used)."""
import json
import os
import re
from pathlib import Path

from harness.resultfile import write_atomic

from dlrepro import ROOT, show_path
from dlrepro.errors import UserError

LOCK_ENV = "DLREPRO_REGISTRY_LOCK"
DEFAULT_LOCK = ROOT / "dockerfiles" / "registry.lock.json"
LOCK_FORMAT = 1
DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")


def lock_path(path=None):
    return Path(path or os.environ.get(LOCK_ENV) or DEFAULT_LOCK)


def read_lock(path=None):
    """The lock's entries, a list of {framework, profile, recipe, tag,
    reference, image_id, lock_sha256, base, pushed_at}."""
    path = lock_path(path)
    if not path.exists():
        return []
    try:
        data = json.loads(path.read_text())
        entries = data["images"]
        for entry in entries:
            if not DIGEST.match(entry["reference"].rpartition("@")[2]):
                raise ValueError(f"{entry['reference']} is not by digest")
    except (ValueError, KeyError, TypeError) as exc:
        raise UserError(f"{show_path(path)} is not a registry lock: {exc}")
    return entries


def write_lock(entries, path=None):
    entries = sorted(entries, key=lambda e: (e["framework"], e["profile"],
                                             e["reference"]))
    write_atomic(str(lock_path(path)), {
        "format": LOCK_FORMAT,
        "note": "written by `invoke push`; `invoke pull` and bench "
                "--registry pull these references and check each recipe",
        "images": entries})


def pullable(image_id=None, recipe=None, path=None):
    """The pullable reference the lock records for an image (by its ID, or
    by its recipe label where no ID is known), or None."""
    try:
        entries = read_lock(path)
    except UserError:
        return None
    for entry in sorted(entries, key=lambda e: e["pushed_at"], reverse=True):
        if (image_id and entry["image_id"] == image_id) or \
                (not image_id and recipe and entry["recipe"] == recipe):
            return entry["reference"]
    return None
