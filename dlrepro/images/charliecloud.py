"""Framework images as Charliecloud directory images: `ch-convert` of the
image that `invoke build` tags (from the Docker engine, or from Podman's
store, which an `invoke save` folder can fill), into a folder on the
shared filesystem that every node reads.

Layout under the images folder (DLREPRO_CH_IMAGES, default build/charliecloud
in the repository):
  <tag as a file name>/          the image's root filesystem, with the mount
                                 points the runtime binds (the harness,
                                 /results): ch-run cannot create them in an
                                 image it mounts read-only
  <tag as a file name>.json      dlrepro's record: tag, image ID, labels,
                                 where it came from, when, with which
                                 ch-convert
The record is written last (after a rename of the finished folder), so a
folder with a record is a complete conversion.
"""
import json
import os
import re
import shutil
import subprocess
import time
from pathlib import Path

from harness.blocks import utc_stamp
from harness.resultfile import write_atomic

from dlrepro import ROOT, matrix as matrix_mod, show_path
from dlrepro.errors import UserError
from dlrepro.images import build as images, podman as podman_images

IMAGES_ENV = "DLREPRO_CH_IMAGES"
DEFAULT_DIR = ROOT / "build" / "charliecloud"
# Where the runtime mounts the harness and the run folder (as in docker).
MOUNT_POINTS = ("opt/dlrepro/harness", "results")
SOURCES = ("docker", "podman")
# ch-image (a `ch-image pull` from a registry: dlrepro.images.pulls) is a
# Python program of the system's: its interpreter first, not pyenv's or a
# virtual environment's, which lack its modules.
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
CONVERT_TIMEOUT_S = 3600


def images_dir(folder=None):
    return Path(folder or os.environ.get(IMAGES_ENV) or DEFAULT_DIR)


def file_name(tag):
    return re.sub(r"[^A-Za-z0-9._-]+", "_", tag)


def image_path(tag, folder=None):
    return images_dir(folder) / file_name(tag)


def record_path(tag, folder=None):
    return images_dir(folder) / (file_name(tag) + ".json")


def read_record(path):
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None


def converted(tag, folder=None):
    """dlrepro's record of the converted image `tag`, or None when it has
    not been converted (completely) into `folder`."""
    record = read_record(record_path(tag, folder))
    if record is None or record.get("tag") != tag:
        return None
    if not image_path(tag, folder).is_dir():
        return None
    return record


def converted_for(framework, profile, lock_sha256, folder=None):
    """Records of converted images of framework/profile made from this lock
    (for a node with neither Docker nor Podman to compute the exact tag),
    newest first."""
    found = []
    for path in images_dir(folder).glob("*.json"):
        record = read_record(path)
        labels = (record or {}).get("labels") or {}
        if (labels.get("org.dlrepro.framework") == framework
                and labels.get("org.dlrepro.profile") == profile
                and labels.get("org.dlrepro.lock-sha256") == lock_sha256
                and converted(record["tag"], folder)):
            found.append(record)
    return sorted(found, key=lambda r: r["converted_at"], reverse=True)


def ch_version(binary="ch-run"):
    env = dict(os.environ, USER=os.environ.get("USER") or _user())
    try:
        proc = subprocess.run([binary, "--version"], capture_output=True,
                              text=True, timeout=60, env=env)
    except (OSError, subprocess.SubprocessError):
        return None
    return (proc.stdout or proc.stderr).strip() or None


def _user():
    import pwd
    try:
        return pwd.getpwuid(os.getuid()).pw_name
    except KeyError:
        return str(os.getuid())


def convert(tag, image_id, labels, source, folder=None, log=print):
    """ch-convert `tag` from `source` (docker or podman) into the images
    folder, with the runtime's mount points; returns the record."""
    if shutil.which("ch-convert") is None:
        raise UserError("ch-convert is not installed (Debian: "
                        "charliecloud-builders; see .ci/container-runtimes.sh)")
    target = image_path(tag, folder)
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(target.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    env = dict(os.environ, USER=os.environ.get("USER") or _user())
    env["PATH"] = SYSTEM_PATH + ":" + env.get("PATH", "")
    log(f"ch-convert: {tag} from {source} -> {show_path(target)}")
    started = time.time()
    proc = subprocess.run(["ch-convert", "--no-clobber", "-i", source, tag,
                           str(partial)], capture_output=True, text=True,
                          timeout=CONVERT_TIMEOUT_S, env=env)
    if proc.returncode != 0:
        shutil.rmtree(partial, ignore_errors=True)
        lines = [line for line in (proc.stderr + proc.stdout).splitlines()
                 if line.strip()]
        raise UserError(f"ch-convert -i {source} {tag} failed: "
                        f"{lines[-1] if lines else 'no output'}")
    for mount_point in MOUNT_POINTS:
        (partial / mount_point).mkdir(parents=True, exist_ok=True)
    # A conversion being replaced is removed only once the new one is whole.
    record_path(tag, folder).unlink(missing_ok=True)
    shutil.rmtree(target, ignore_errors=True)
    os.replace(partial, target)
    record = {"tag": tag, "image_id": image_id, "labels": labels,
              "source": source, "path": str(target),
              "converted_at": utc_stamp(started),
              "ch_convert": ch_version("ch-convert") or ch_version()}
    write_atomic(str(record_path(tag, folder)), record)
    return record


def convert_target(framework, profile, matrix, *, source="docker",
                   archive_dir=None, base_image=None, folder=None,
                   name_prefix=None, log=print):
    """`invoke ch-convert`: make framework/profile's image where `source`
    holds images (building or loading it as bench would), then convert it
    unless a conversion of the same image ID is there; returns the record."""
    if source not in SOURCES:
        raise UserError(f"--source must be one of {', '.join(SOURCES)}, "
                        f"got {source!r}")
    entry = matrix_mod.entry(matrix, framework, profile)
    if base_image is None:
        base_image = images.substituted_base(entry)
    base_image = base_image or entry["base_image"]
    if source == "docker" and not archive_dir:
        client = images.engine()
        tag = images.ensure(framework, profile, matrix, base_image=base_image,
                            client=client, log=log, name_prefix=name_prefix)
        image = client.images.get(tag)
        image_id, labels = image.id, dict(sorted(image.labels.items()))
    else:
        # An archive goes through Podman's store, which ch-convert reads.
        source = "podman"
        store = podman_images.Store()
        tag = podman_images.ensure(framework, profile, matrix, store,
                                   base_image=base_image,
                                   archive_dir=archive_dir, log=log,
                                   name_prefix=name_prefix)
        image = store.get(tag)
        image_id, labels = image.id, dict(sorted(image.labels.items()))
    record = converted(tag, folder)
    if record is not None and record["image_id"] == image_id:
        log(f"ch-convert: {tag} is converted already "
            f"({show_path(image_path(tag, folder))})")
        return record
    return convert(tag, image_id, labels, source, folder, log)


def convert_command(framework, profile, folder=None):
    command = f"invoke ch-convert --framework {framework} --profile {profile}"
    if folder:
        command = f"{IMAGES_ENV}={folder} " + command
    return command
