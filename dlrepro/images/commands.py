"""What the image tasks do (render, build, save, pin), so that tasks.py
only reads flags and prints."""
import shlex

from dlrepro import ROOT, matrix as matrix_mod
from dlrepro.errors import UserError
from dlrepro.images import build as images, pylock, render as render_mod


def dockerfile(framework, profile, base_image, index, ca_bundle):
    """The Dockerfile text of one profile, FROM the substituted base."""
    m = matrix_mod.load()
    entry = matrix_mod.entry(m, framework, profile)
    base, _pin = images.base_reference(
        entry, images.substituted_base(entry, images.substitution(base_image)))
    return render_mod.render_profile(framework, profile, m, base=base,
                                     wheelhouse=not index,
                                     ca_bundle=ca_bundle).dockerfile


def build(framework, profile, every, base_image, locked, index, ca_bundle,
          proxy, log=print):
    """Build each target (a no-op when up to date), logging its tag.
    Returns a note for stderr when the base came from this command only;
    UserError listing the failures when any target failed."""
    m = matrix_mod.load()
    pairs = images.targets(m, framework, profile or None, every)
    images.check_overrides(m, pairs, base_image or [])
    subst = images.substitution(base_image or [])
    client = images.engine()
    failures = []
    for fw, prof in pairs:
        entry = m[fw][prof]
        try:
            log(images.ensure(fw, prof, m, locked=locked, client=client,
                              base_image=images.substituted_base(entry, subst)
                              or entry["base_image"],
                              wheelhouse=not index,
                              ca_bundle=ca_bundle or None, proxy=proxy or None))
        except UserError as exc:
            if len(pairs) == 1:
                raise
            failures.append(f"{fw}/{prof}: {exc}")
    if failures:
        raise UserError(f"{len(failures)} of {len(pairs)} builds failed:\n"
                        + "\n".join(failures))
    setting = images.setting_for(m, pairs, subst)
    if setting:
        # bench, converge and save look for the image FROM the base that
        # DLREPRO_BASE_OVERRIDES names: say how to make them find this one.
        return (f"note: --base-image is for this command only; for bench, "
                f"converge and save to use these images, set "
                f"{images.BASE_OVERRIDES_ENV}={shlex.quote(setting)}")
    return None


def refs_to_save(framework, profile, every, images_given, with_base,
                 base_image):
    """The image references `invoke save` archives."""
    m = matrix_mod.load()
    refs = list(images_given or [])
    if framework or every:
        client = images.engine()
        pairs = images.targets(m, framework, profile or None, every)
        images.check_overrides(m, pairs, base_image or [])
        subst = images.substitution(base_image or [])
        for fw, prof in pairs:
            entry = m[fw][prof]
            plan = images.plan(fw, prof, m, client=client,
                               base_image=images.substituted_base(entry, subst)
                               or entry["base_image"])
            refs.append(plan.tag)
            if with_base:
                refs.append(plan.base)
    if not refs:
        raise UserError("nothing to save: give --framework, --all or --image")
    return list(dict.fromkeys(refs))


def pin(framework, profile, every, host):
    """Regenerate lock files; yields each path written, repository-relative."""
    if host:
        text = pylock.host_lock_text(ROOT / "requirements" / "host.in")
        (ROOT / "requirements" / "host.txt").write_text(text)
        yield "requirements/host.txt"
        return
    m = matrix_mod.load()
    for fw, prof in images.targets(m, framework, profile or None, every):
        path = matrix_mod.lock_path(fw, prof)
        path.write_text(pylock.lock_profile_text(fw, prof, m[fw][prof]))
        yield str(path.relative_to(ROOT))


def check_images(framework, profile, build_missing=True, log=print):
    """Check GPU images (dlrepro.images.gpucheck): each GPU profile of
    `framework` (or of every framework), built first when missing. Writes
    build/image-checks/<framework>-<profile>.json; returns the reports,
    the lines to print and the targets not checked (missing with
    `build_missing` False, or not built)."""
    from dlrepro.images import gpucheck
    m = matrix_mod.load()
    pairs = gpucheck.gpu_targets(m, framework)
    if profile:
        pairs = [p for p in pairs if p[1] == profile]
        if not pairs:
            raise UserError(f"{framework or 'no framework'} has no GPU "
                            f"profile {profile!r}")
    client = images.engine()
    reports, lines, unchecked = [], [], []
    for fw, prof in pairs:
        try:
            tag = images.ensure(fw, prof, m, client=client,
                                build_missing=build_missing, log=log)
        except UserError as exc:
            lines.append(f"{fw}/{prof}: not checked: {exc}")
            unchecked.append(f"{fw}/{prof}")
            continue
        image = client.images.get(tag)
        report = gpucheck.check(fw, prof, tag, m[fw][prof], image.labels or {})
        report["image_size_bytes"] = image.attrs.get("Size")
        report["labels"] = dict(sorted((image.labels or {}).items()))
        report["checked_at"] = _now()
        gpucheck.write_report(
            ROOT / "build" / "image-checks" / f"{fw}-{prof}.json", report)
        reports.append(report)
        lines += gpucheck.summary_lines(report)
    return reports, lines, unchecked


def _now():
    from harness.blocks import utc_now
    return utc_now()
