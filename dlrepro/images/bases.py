"""Base images: the lock that pins them (dockerfiles/base-images.lock) and
the one substitution every image command honours (DLREPRO_BASE_OVERRIDES,
or --base-image for one command), so that `invoke build` and `invoke bench`
always mean the same image."""
import json
import os
import tempfile
import tomllib
from pathlib import Path
from typing import NamedTuple, Optional

from harness.blocks import utc_now

from dlrepro import ROOT
from dlrepro.errors import UserError
from dlrepro.images.engine import engine, first_line, local_image

BASE_LOCK_PATH = ROOT / "dockerfiles" / "base-images.lock"


def read_base_lock(path=BASE_LOCK_PATH):
    """{image reference: {"digest"?, "id"?, "source", "resolved_at"}}."""
    path = Path(path)
    if not path.exists():
        return {}
    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise UserError(f"{path}: {exc}")
    for name, pin in data.items():
        if not isinstance(pin, dict) or not (pin.get("digest") or pin.get("id")):
            raise UserError(f"{path}: [{name!r}] needs a digest or an id")
    return data


def write_base_lock(pins, path=BASE_LOCK_PATH):
    lines = ["# Base images pinned by `invoke lock`: digest = the registry's",
             "# manifest digest (builds use name@digest); id = the local image ID",
             "# of an image no registry knows (imported or built here), which",
             "# builds check. Do not edit by hand."]
    for name in sorted(pins):
        lines.append("")
        lines.append(f"[{json.dumps(name)}]")
        for key in sorted(pins[name]):
            lines.append(f"{key} = {json.dumps(pins[name][key])}")
    text = "\n".join(lines) + "\n"
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
    with os.fdopen(fd, "w") as handle:
        handle.write(text)
    os.replace(tmp, path)


def resolve_base(client, name):
    """(pin, None) for `name`, or (None, reason). Asks the registry for the
    manifest digest without pulling; falls back to what the local engine
    knows (a RepoDigest, else the image ID of a local-only image)."""
    now = utc_now()
    import docker
    try:
        digest = client.api.inspect_distribution(name)["Descriptor"]["digest"]
        return {"digest": digest, "source": "registry", "resolved_at": now}, None
    except docker.errors.APIError as exc:
        registry_error = first_line(exc)
    image = local_image(client, name)
    if image is None:
        return None, f"registry: {registry_error}; not present locally either"
    repository = name.split("@")[0].rsplit(":", 1)[0]
    for repo_digest in image.attrs.get("RepoDigests") or []:
        if repo_digest.split("@")[0] in (repository, f"docker.io/{repository}",
                                         f"docker.io/library/{repository}"):
            return {"digest": repo_digest.split("@", 1)[1],
                    "source": "local RepoDigests", "resolved_at": now}, None
    return {"id": image.id, "source": "local image without a registry digest",
            "resolved_at": now}, None


def lock_bases(names, path=BASE_LOCK_PATH, client=None, log=print):
    """Resolve and record each base image; keeps entries for other names.
    Returns {name: reason} for those that could not be resolved."""
    if any(not name.strip() for name in names):
        # docker-py refuses an empty reference with a NullResource of its
        # own, before any registry is asked.
        raise UserError("--image must name an image, got an empty name")
    client = client or engine()
    pins = read_base_lock(path)
    failures = {}
    for name in sorted(set(names)):
        pin, reason = resolve_base(client, name)
        if pin is None:
            failures[name] = reason
            log(f"lock: {name}: not resolved ({reason})")
        else:
            pins[name] = pin
            log(f"lock: {name}: {pin.get('digest') or pin.get('id')} "
                f"({pin['source']})")
    if len(failures) < len(set(names)):
        # Nothing resolved leaves the file as it was, byte for byte.
        write_base_lock(pins, path)
    return failures


def matrix_bases(matrix):
    return sorted({entry["base_image"] for profiles in matrix.values()
                   for entry in profiles.values()})


# --- the recipe and its hash ------------------------------------------------------


BASE_OVERRIDES_ENV = "DLREPRO_BASE_OVERRIDES"


class Substitution(NamedTuple):
    """Which base replaces which: `given` (a command's FROM=TO) wins over
    `every` (a command's plain REF), which wins over `setting`
    (DLREPRO_BASE_OVERRIDES)."""
    setting: dict
    given: dict
    every: Optional[str] = None


def parse_overrides(text, where=BASE_OVERRIDES_ENV):
    """{"FROM": "TO"} from "FROM=TO[,FROM=TO]"."""
    overrides = {}
    for item in (text or "").split(","):
        item = item.strip()
        if not item:
            continue
        old, _, new = item.partition("=")
        if not old.strip() or not new.strip():
            raise UserError(f"{where}: {item!r} is not FROM=TO")
        overrides[old.strip()] = new.strip()
    return overrides


def substitution(given=(), mapping=None, environ=None):
    """The substitution in force for one command: DLREPRO_BASE_OVERRIDES
    (from `environ`, default os.environ), then `mapping` ({FROM: TO}, e.g. a
    runtime's option), then the command's --base-image values `given`
    (FROM=TO, or one plain REF). UserError for a malformed value."""
    environ = os.environ if environ is None else environ
    setting = parse_overrides(environ.get(BASE_OVERRIDES_ENV))
    explicit = dict(mapping or {})
    plain = []
    for item in ([given] if isinstance(given, str) else given or ()):
        if "=" in item:
            explicit.update(parse_overrides(item, "--base-image"))
        elif item.strip():
            plain.append(item.strip())
    if len(plain) > 1:
        raise UserError(f"--base-image given {len(plain)} plain references "
                        f"({', '.join(plain)}); write FROM=TO for each base")
    return Substitution(setting, explicit, plain[0] if plain else None)


def substituted_base(entry, subst=None):
    """The one answer to "which base does this matrix entry build FROM
    here": the replacement of entry's base_image, or None to keep it.
    `subst` defaults to DLREPRO_BASE_OVERRIDES alone."""
    subst = substitution() if subst is None else subst
    name = entry["base_image"]
    base = subst.given.get(name) or subst.every or subst.setting.get(name)
    return None if base in (None, name) else base


def setting_for(matrix, pairs, subst):
    """A DLREPRO_BASE_OVERRIDES value under which every other command
    substitutes the bases of `pairs` as `subst` does, or None when the
    setting already does (a plain --base-image or a FROM=TO only on the
    command line is not seen by a later `invoke bench`)."""
    wanted = dict(subst.setting)
    changed = False
    for fw, prof in pairs:
        entry = matrix[fw][prof]
        base = substituted_base(entry, subst)
        if base != substituted_base(entry, subst._replace(given={},
                                                          every=None)):
            wanted[entry["base_image"]] = base or entry["base_image"]
            changed = True
    if not changed:
        return None
    return ",".join(f"{old}={new}" for old, new in sorted(wanted.items())
                    if old != new)


def base_for(entry, overrides=()):
    """substituted_base for a command's --base-image values `overrides`,
    DLREPRO_BASE_OVERRIDES included."""
    return substituted_base(entry, substitution(overrides))


def check_overrides(matrix, pairs, overrides):
    """A plain --base-image must not replace different bases at once."""
    plain = [item for item in overrides if "=" not in item]
    if plain:
        bases = sorted({matrix[f][p]["base_image"] for f, p in pairs})
        if len(bases) > 1:
            raise UserError(f"--base-image {plain[0]} would replace "
                            f"different base images ({', '.join(bases)}); "
                            f"write FROM=TO")


def base_reference(entry, base_image=None, *, locked=False,
                   base_lock=BASE_LOCK_PATH, where=""):
    """(FROM reference, lock pin or None): `name@digest` when the lock has
    the base's digest. `locked` refuses a base the lock does not pin."""
    name = base_image or entry["base_image"]
    pin = read_base_lock(base_lock).get(name)
    if locked and pin is None:
        hint = "" if name == entry["base_image"] else f" --image {name}"
        raise UserError(f"--locked: base image {name}{where} is not in "
                        f"{Path(base_lock).name}; run `invoke lock{hint}`")
    if pin and pin.get("digest"):
        return f"{name.split('@')[0]}@{pin['digest']}", pin
    return name, pin
