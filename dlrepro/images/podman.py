"""Framework images in Podman's store, under the tag `invoke build` gives
them (the recipe hash), so that a podman run uses exactly the image a
docker run would.

Where an image comes from, first found wins:
  1. Podman's store already holds the tag;
  2. a Docker engine answers: `images.ensure` there (building as `invoke
     build` would), then `docker save TAG | podman load`;
  3. an `invoke save` folder: every archive whose sha256 matches SHA256SUMS
     and whose reference Podman lacks is `podman load`ed (the base too,
     when it was saved --with-base), and the loaded ID checked;
  4. `podman build` of the rendered Dockerfile from the wheelhouse, offline
     unless the recipe needs apt.
Podman keeps an image's ID across `docker save | podman load` (both are
the config's sha256), so the recipe hash, which includes the base's ID,
comes out the same whichever store computes it.
"""
import json
import shutil
import subprocess
import tempfile
from pathlib import Path

from dlrepro import matrix as matrix_mod, show_path
from dlrepro.errors import UserError
from dlrepro.images import archive, build as images

TIMEOUT_S = 60
LOAD_TIMEOUT_S = 1800


class Image:
    """What images.plan reads of an image: its ID (and labels)."""

    def __init__(self, attrs):
        self.attrs = attrs
        self.id = "sha256:" + attrs["Id"] if not attrs["Id"].startswith(
            "sha256:") else attrs["Id"]
        self.labels = attrs.get("Labels") or {}


def run(podman_bin, *args, timeout=TIMEOUT_S, **kwargs):
    """`podman ARGS`, its output captured as text."""
    return subprocess.run([podman_bin, *args], capture_output=True,
                          text=True, timeout=timeout, **kwargs)


def inspected(podman_bin, what, name, timeout=TIMEOUT_S):
    """`podman WHAT inspect NAME`'s record (WHAT: image or container), or
    None when there is none."""
    proc = run(podman_bin, what, "inspect", name, timeout=timeout)
    if proc.returncode != 0:
        return None
    found = json.loads(proc.stdout or "[]")
    return found[0] if found else None


class Store:
    """Podman's image store through its command line, with the one call of
    the Docker SDK that images.plan makes (client.images.get), so that the
    recipe hash and the tag are computed exactly as for Docker."""

    def __init__(self, podman_bin="podman"):
        self.podman_bin = podman_bin
        self.images = self

    def _run(self, *args, timeout=TIMEOUT_S, **kwargs):
        return run(self.podman_bin, *args, timeout=timeout, **kwargs)

    def inspect(self, ref):
        """The image's `podman image inspect` record, or None."""
        return inspected(self.podman_bin, "image", ref)

    def get(self, ref):
        import docker  # images.local_image tells "missing" by this error
        attrs = self.inspect(ref)
        if attrs is None:
            raise docker.errors.ImageNotFound(f"{ref} is not in podman's store")
        return Image(attrs)

    def version(self):
        proc = self._run("version", "--format", "{{.Client.Version}}")
        return proc.stdout.strip() or None

    def load(self, source, log=print):
        """`podman load` an archive (a path) or a stream (a file object);
        returns podman's output."""
        if isinstance(source, (str, Path)):
            proc = self._run("load", "--input", str(source),
                             timeout=LOAD_TIMEOUT_S)
        else:
            proc = subprocess.run([self.podman_bin, "load"], stdin=source,
                                  capture_output=True, text=True,
                                  timeout=LOAD_TIMEOUT_S)
        if proc.returncode != 0:
            raise UserError(f"podman load failed: "
                            f"{images.first_line(proc.stderr or proc.stdout)}")
        return proc.stdout


def from_docker(store, client, tag, log=print):
    """`docker save TAG | podman load`, then check the ID podman gives it."""
    want = client.images.get(tag).id
    log(f"podman: loading {tag} from the Docker engine")
    saver = subprocess.Popen(["docker", "save", tag], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE)
    try:
        store.load(saver.stdout, log)
    finally:
        saver.stdout.close()
        _out, err = saver.communicate()
    if saver.returncode != 0:
        raise UserError(f"docker save {tag} failed: "
                        f"{images.first_line(err.decode(errors='replace'))}")
    _check_id(store, tag, want)


def _check_id(store, ref, want):
    attrs = store.inspect(ref)
    got = Image(attrs).id if attrs else None
    if got != want:
        raise UserError(f"podman holds {ref} as {got or 'nothing'}, not the "
                        f"expected {want}")


def from_archive(store, folder, log=print):
    """Load every image of an `invoke save` folder that podman lacks (the
    sums checked first); returns the references loaded."""
    folder = Path(folder)
    manifest = archive.saved_manifest(folder)
    loaded = []
    for name, info in sorted(manifest.items()):
        attrs = store.inspect(info["ref"])
        if attrs is not None and Image(attrs).id == info["image_id"]:
            continue
        path = archive.checked_archive(folder, name, info)
        log(f"podman: loading {info['ref']} from {show_path(path)}")
        store.load(path, log)
        _check_id(store, info["ref"], info["image_id"])
        loaded.append(info["ref"])
    return loaded


def build(store, plan_, log=print, logs_dir=images.BUILD_DIR / "logs"):
    """`podman build` of the rendered recipe from the wheelhouse (offline
    unless it needs apt); returns the image ID."""
    logs_dir = Path(logs_dir)
    logs_dir.mkdir(parents=True, exist_ok=True)
    log_path = logs_dir / (f"podman-{plan_.framework}-{plan_.profile}-"
                           f"{plan_.recipe_hash[:12]}.log")
    contexts = images.BUILD_DIR / "contexts"
    contexts.mkdir(parents=True, exist_ok=True)
    folder = Path(tempfile.mkdtemp(dir=contexts,
                                   prefix=f"podman-{plan_.framework}-"))
    shutil.rmtree(folder)
    network = "host" if images.needs_network(plan_.entry, True) else "none"
    argv = [store.podman_bin, "build", "--pull=never", "--network", network,
            "--tag", plan_.tag]
    for key, value in sorted(images.build_labels(plan_).items()):
        argv += ["--label", f"{key}={value}"]
    log(f"podman: building {plan_.tag} from {plan_.base} (network {network};"
        f" log {show_path(log_path)})")
    try:
        images.prepare_context(plan_, folder)
        with open(log_path, "w") as out:
            proc = subprocess.run(argv + [str(folder)], stdout=out,
                                  stderr=subprocess.STDOUT)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    if proc.returncode != 0:
        tail = [line for line in log_path.read_text().splitlines()
                if line.strip()][-8:]
        raise images.BuildFailed(
            f"podman build of {plan_.framework}/{plan_.profile} failed (log: "
            f"{show_path(log_path)})\n  " + "\n  ".join(tail))
    return store.get(plan_.tag).id


def docker_engine():
    """A Docker SDK client when an engine answers here, else None."""
    if shutil.which("docker") is None:
        return None
    try:
        return images.engine(timeout=60)
    except UserError:
        return None


def ensure(framework, profile, matrix, store, *, base_image=None,
           build_missing=True, archive_dir=None, client=None, log=print,
           name_prefix=None):
    """The tag of framework/profile's image in podman's store, loading or
    building it as the module docstring says. UserError says what to run
    when it cannot be had."""
    entry = matrix_mod.entry(matrix, framework, profile)
    if base_image is None:
        base_image = images.substituted_base(entry)
    base_image = base_image or entry["base_image"]
    if client is not None:
        # The Docker engine decides the tag and builds it if need be: the
        # image bench --runtime docker would run.
        tag = images.ensure(framework, profile, matrix, base_image=base_image,
                            build_missing=build_missing, client=client,
                            log=log, name_prefix=name_prefix)
        attrs = store.inspect(tag)
        if attrs is None or Image(attrs).id != client.images.get(tag).id:
            from_docker(store, client, tag, log)
        return tag
    if archive_dir:
        from_archive(store, archive_dir, log)

    def plan():
        return images.plan(framework, profile, matrix, base_image=base_image,
                           client=store, name_prefix=name_prefix)
    plan_ = plan()
    if store.inspect(plan_.tag) is not None:
        return plan_.tag
    command = images.build_command(framework, profile, entry, base_image)
    if plan_.base_id is None:
        raise UserError(
            f"image {plan_.tag} is missing from podman and so is its base "
            f"{plan_.base}: `invoke save --framework {framework} --profile "
            f"{profile} --with-base` where Docker runs, then give the folder "
            f"as DLREPRO_IMAGE_ARCHIVE (or `podman load` the base)")
    if not build_missing:
        raise UserError(f"image {plan_.tag} is missing from podman; `{command}`"
                        f" and `docker save | podman load` it, or give an "
                        f"`invoke save` folder as DLREPRO_IMAGE_ARCHIVE")
    build(store, plan_, log)
    return plan_.tag


def describe(store, ref):
    """What a result records as environment.container for `ref`."""
    from dlrepro.images import registrylock
    attrs = store.inspect(ref)
    digests = attrs.get("RepoDigests") or []
    return {
        "runtime": "podman",
        "image": ref,
        "image_id": Image(attrs).id,
        "repo_digest": digests[0] if digests else None,
        # What `invoke push` recorded for this very image: anyone can pull it.
        "pullable": registrylock.pullable(Image(attrs).id),
        "labels": dict(sorted((attrs.get("Labels") or {}).items())),
        "engine_version": store.version(),
    }
