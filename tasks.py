"""Invoke tasks: the user's entry points. Each task reads its flags, calls
the dlrepro package, and prints; UserError becomes a one-line message and
exit status 2."""
import functools
import sys

from invoke import Exit, task

from dlrepro.errors import UserError


def user_errors(fn):
    """Turn dlrepro's UserError into invoke's Exit (message, status 2)."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except UserError as exc:
            raise Exit(f"error: {exc}", code=2)
    return wrapper


@task(help={"framework": "framework whose native environment to make",
            "profile": "matrix profile (default: cpu)"})
@user_errors
def env(c, framework, profile="cpu"):
    """Create or refresh a framework's native virtual environment."""
    from dlrepro import envs, matrix
    m = matrix.load()
    entry = matrix.entry(m, framework, profile)
    reason = envs.unavailable_reason(entry, framework, profile)
    if reason:
        raise UserError(reason)
    print(envs.ensure(framework, profile, entry))


@task(help={"k": "only tests matching this pytest expression",
            "x": "stop at the first failure"})
def test(c, k="", x=False):
    """Run the test suite (pytest)."""
    args = [sys.executable, "-m", "pytest", "tests"]
    if k:
        args += ["-k", k]
    if x:
        args.append("-x")
    c.run(" ".join(args), pty=False)


# --- images (issue 3): dlrepro.render, dlrepro.images, dlrepro.pylock -------------
# Targets: --framework NAME (its cpu profile unless --profile), or --all
# (every framework and profile, narrowed by --framework/--profile).

_TARGETS_HELP = {
    "framework": "framework (repeatable)",
    "profile": "matrix profile (default: cpu; with --all: every profile)",
    "all": "every framework and profile (narrowed by --framework/--profile)",
}


@task(help={"framework": "framework whose Dockerfile to print",
            "profile": "matrix profile (default: cpu)",
            "base_image": "FROM this image instead of the matrix's base",
            "index": "install from the package index (network) instead of "
                     "the wheelhouse",
            "ca_bundle": "render for a build given a CA bundle (--index)"})
@user_errors
def render(c, framework, profile="cpu", base_image="", index=False,
           ca_bundle=False):
    """Print the Dockerfile of a framework image (same inputs, same bytes)."""
    from dlrepro import images, matrix, render as render_mod
    m = matrix.load()
    entry = matrix.entry(m, framework, profile)
    base, _pin = images.base_reference(entry, base_image or None)
    recipe = render_mod.render_profile(framework, profile, m, base=base,
                                       wheelhouse=not index,
                                       ca_bundle=ca_bundle)
    print(recipe.dockerfile, end="")


@task(iterable=["framework", "base_image"],
      help=dict(_TARGETS_HELP,
                base_image="FROM this image instead: REF (every target) or "
                           "MATRIX_BASE=REF (repeatable)",
                locked="refuse a base image that `invoke lock` has not pinned",
                index="install from the package index (network) instead of "
                      "a wheelhouse",
                ca_bundle="CA bundle for pip during --index builds (not kept "
                          "in the image)",
                proxy="HTTP(S) proxy for --index builds (default: the "
                      "HTTP_PROXY/HTTPS_PROXY variables)"))
@user_errors
def build(c, framework=None, profile="", all=False, base_image=None,
          locked=False, index=False, ca_bundle="", proxy=""):
    """Build framework images (a no-op when the image is up to date).

    The tag derives from the recipe's hash, so an unchanged image is not
    rebuilt; the wheelhouse is downloaded first when missing."""
    from dlrepro import images, matrix
    m = matrix.load()
    pairs = images.targets(m, framework, profile or None, all)
    overrides = base_image or []
    images.check_overrides(m, pairs, overrides)
    client = images.engine()
    failures = []
    for fw, prof in pairs:
        try:
            plan = images.plan(fw, prof, m, locked=locked, client=client,
                               base_image=images.base_for(m[fw][prof], overrides))
            if not index and images.wheelhouse_files(fw, prof, plan.entry) is None:
                images.make_wheelhouse(fw, prof, plan.entry)
            images.build(plan, wheelhouse=not index, ca_bundle=ca_bundle or None,
                         proxy=proxy or None, client=client)
            print(plan.tag)
        except UserError as exc:
            if len(pairs) == 1:
                raise
            failures.append(f"{fw}/{prof}: {exc}")
    if failures:
        raise UserError(f"{len(failures)} of {len(pairs)} builds failed:\n"
                        + "\n".join(failures))


@task(iterable=["framework"], help=_TARGETS_HELP)
@user_errors
def wheelhouse(c, framework=None, profile="", all=False):
    """Download the locked wheels into wheelhouse/ for offline builds.

    Exactly the files of the lock (and the matrix's `sources`), every
    sha256 checked."""
    from dlrepro import images, matrix
    m = matrix.load()
    for fw, prof in images.targets(m, framework, profile or None, all):
        print(images.make_wheelhouse(fw, prof, m[fw][prof]))


@task(iterable=["image"],
      help={"image": "lock this image (repeatable; default: every base "
                     "image of the matrix)"})
@user_errors
def lock(c, image=None):
    """Pin base images in dockerfiles/base-images.lock.

    Resolves each to its registry digest (or, for a local-only image, its
    image ID); builds use the pins and --locked requires them."""
    from dlrepro import images, matrix
    names = image or images.matrix_bases(matrix.load())
    failures = images.lock_bases(names)
    if failures:
        raise UserError(f"{len(failures)} of {len(names)} base images not "
                        f"locked: {', '.join(sorted(failures))}")


@task(iterable=["framework", "image", "base_image"],
      help=dict(_TARGETS_HELP, image="also save this image (repeatable)",
                with_base="also save each target's base image",
                base_image="as for build: which base the targets were built from",
                out="folder for the archives (default: images/)"))
@user_errors
def save(c, framework=None, profile="", all=False, image=None,
         with_base=False, base_image=None, out="images"):
    """Archive built images with their checksums (docker save).

    Writes one tar per image, SHA256SUMS and images.json: upstream base
    tags get deleted, an archive keeps the exact image."""
    from dlrepro import images, matrix
    m = matrix.load()
    refs = list(image or [])
    if framework or all:
        client = images.engine()
        for fw, prof in images.targets(m, framework, profile or None, all):
            plan = images.plan(fw, prof, m, client=client,
                               base_image=images.base_for(m[fw][prof],
                                                          base_image or []))
            refs.append(plan.tag)
            if with_base:
                refs.append(plan.base)
    if not refs:
        raise UserError("nothing to save: give --framework, --all or --image")
    images.save(list(dict.fromkeys(refs)), out)


@task(iterable=["image"],
      help={"dir": "folder written by `invoke save` (default: images/)",
            "image": "load only this reference (repeatable)"})
@user_errors
def load(c, dir="images", image=None):
    """Load archived images after checking their SHA256SUMS and IDs."""
    from dlrepro import images
    images.load(dir, image or None)


@task(iterable=["framework"],
      help=dict(_TARGETS_HELP, host="regenerate requirements/host.txt from "
                                     "requirements/host.in instead"))
@user_errors
def pin(c, framework=None, profile="", all=False, host=False):
    """Regenerate hash-pinned lock files with pip.

    dockerfiles/requirements/<framework>-<profile>.txt from the matrix's
    `pip`, or with --host requirements/host.txt from requirements/host.in."""
    from dlrepro import ROOT, images, matrix, pylock
    if host:
        text = pylock.host_lock_text(ROOT / "requirements" / "host.in")
        (ROOT / "requirements" / "host.txt").write_text(text)
        print("requirements/host.txt")
        return
    m = matrix.load()
    for fw, prof in images.targets(m, framework, profile or None, all):
        path = matrix.lock_path(fw, prof)
        path.write_text(pylock.lock_profile_text(fw, prof, m[fw][prof]))
        print(path.relative_to(ROOT))
