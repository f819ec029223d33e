"""Dockerfiles rendered from the matrix: every profile, byte-identical on
every render, clean under hadolint (including those that cannot be built
here: CNTK and the GPU profiles), offline installs from the wheelhouse, and
a CA bundle that never reaches the final stage."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

from dlrepro import matrix
from dlrepro.images import build as images
from dlrepro.images import render
from dlrepro.errors import UserError
from scripted import one_line_error

HADOLINT = Path(sys.executable).parent / "hadolint"


def all_profiles():
    loaded = matrix.load()
    return [(f, p) for f in sorted(loaded) for p in sorted(loaded[f])]


def final_stage(dockerfile):
    return dockerfile.rsplit("\nFROM system\n", 1)[1]


def hadolint(text, tmp_path, name):
    path = tmp_path / f"{name}.Dockerfile"
    path.write_text(text)
    proc = subprocess.run([str(HADOLINT), "--no-color", str(path)],
                          capture_output=True, text=True)
    return proc.returncode, proc.stdout + proc.stderr


@pytest.mark.parametrize("framework,profile", all_profiles(), ids=str)
@pytest.mark.parametrize("mode", ["wheelhouse", "index-with-ca"])
def test_every_profile_renders_deterministically_and_lints_clean(
        framework, profile, mode, tmp_path):
    options = ({"wheelhouse": True} if mode == "wheelhouse"
               else {"wheelhouse": False, "ca_bundle": True})
    first = render.render_profile(framework, profile, **options)
    second = render.render_profile(framework, profile, **options)
    assert first.dockerfile == second.dockerfile
    assert first.dockerfile.endswith("\n") and not first.dockerfile.endswith("\n\n")
    code, output = hadolint(first.dockerfile, tmp_path, f"{framework}-{profile}")
    assert code == 0, output


@pytest.mark.parametrize("framework,profile", all_profiles(), ids=str)
def test_installs_are_hash_checked_and_offline_from_a_wheelhouse(
        framework, profile):
    recipe = render.render_profile(framework, profile)
    text = recipe.dockerfile
    assert "--require-hashes" in text and "--no-deps" in text
    assert "--no-index --find-links /tmp/dlrepro/wheels" in text
    assert "ca-bundle" not in text
    final = final_stage(text)
    # The wheelhouse stays in the throwaway install stage.
    assert "COPY wheels" not in final and "COPY --from=install /opt/venv" in final
    entry = matrix.load()[framework][profile]
    assert f"org.dlrepro.framework-version=\"{entry['framework_version']}\"" in final
    assert f"org.dlrepro.cuda=\"{entry['cuda']}\"" in final
    assert f"FROM {entry['base_image']} AS system" in text


def test_a_ca_bundle_stays_in_the_install_stage():
    text = render.render_profile("mxnet", "cpu", wheelhouse=False,
                                 ca_bundle=True).dockerfile
    install = text.split("FROM system AS install\n", 1)[1].split(
        "\nFROM system\n", 1)[0]
    assert "COPY ca-bundle.pem" in install and "--cert /tmp/dlrepro/ca-bundle.pem" in install
    assert "--no-index" not in text
    assert "ca-bundle" not in final_stage(text)


def test_base_override_and_digest_reach_the_from_line():
    text = render.render_profile("pytorch", "cpu",
                                 base="example/base:1@sha256:" + "a" * 64).dockerfile
    assert f"FROM example/base:1@sha256:{'a' * 64} AS system" in text
    assert "python:3.11" not in text


def test_old_distributions_install_the_locked_pip_first():
    recipe = render.render_profile("cntk", "cpu")
    assert recipe.bootstrap.startswith("pip==21.3.1 \\\n    --hash=sha256:")
    assert "-r /tmp/dlrepro/bootstrap.txt" in recipe.dockerfile
    assert render.render_profile("pytorch", "cpu").bootstrap == ""


@pytest.mark.parametrize("profile", ["cpu", "gpu"])
def test_cntk_installs_openmpi_110_from_checked_ubuntu_packages(profile):
    text = render.render_profile("cntk", profile).dockerfile
    debs = matrix.load()["cntk"][profile]["sources"]
    assert sorted(deb["name"].split("_")[0] for deb in debs) == [
        "libopenmpi1.10", "openmpi-bin", "openmpi-common"]
    final = final_stage(text)
    for deb in debs:
        assert f"      {deb['sha256']} {deb['name']} \\\n" in final
        assert f"      ./{deb['name']} \\\n" in final
    assert "sha256sum -c --strict SHA256SUMS" in final
    # Their dependencies are pinned in the system stage: the step installing
    # them fetches nothing, so nothing unpinned can come in with them.
    assert "apt-get update" not in final
    assert "rm -rf /var/lib/apt/lists/* /tmp/dlrepro" in final


def test_tf1_trusts_nvidia_keys_by_fingerprint_only_in_a_throwaway_stage():
    text = render.render_profile("tensorflow", "tf1").dockerfile
    assert "FROM ubuntu:18.04 AS keys" in text
    assert "^fpr:::::::::EB693B3035CD5710E231E123A4B469963BF863CC:$" in text
    assert "cuda-cudart-10-0=10.0.130-1" in text
    assert "gnupg" not in final_stage(text) and "curl" not in final_stage(text)


def test_ngc_profiles_reuse_the_images_framework():
    text = render.render_profile("mxnet", "ngc").dockerfile
    assert "--system-site-packages --without-pip /opt/venv" in text
    assert "pip check" not in text  # NGC's own packages are NVIDIA's business


def test_a_missing_template_variable_is_an_error(tmp_path):
    (tmp_path / "base.Dockerfile.j2").write_text("FROM {{ nowhere }}\n")
    (tmp_path / "demo.Dockerfile.j2").write_text('{% extends "base.Dockerfile.j2" %}\n')
    entry = matrix.load()["pytorch"]["cpu"]
    with pytest.raises(UserError, match="nowhere"):
        render.render("demo", "cpu", entry, "", templates_dir=tmp_path)


def test_render_task_prints_the_dockerfile_and_rejects_bad_names(root):
    invoke = Path(sys.executable).parent / "invoke"
    env = dict(os.environ)
    env.pop(images.BASE_OVERRIDES_ENV, None)
    proc = subprocess.run([str(invoke), "render", "--framework", "tensorflow",
                           "--profile", "cuda"], cwd=root, capture_output=True,
                          text=True, env=env)
    assert proc.returncode == 0, proc.stderr
    entry = matrix.load()["tensorflow"]["cuda"]
    base, _pin = images.base_reference(entry)  # with the lock's digest, if any
    assert proc.stdout == render.render_profile("tensorflow", "cuda",
                                                base=base).dockerfile
    proc = subprocess.run([str(invoke), "render", "--framework", "theano"],
                          cwd=root, capture_output=True, text=True)
    assert one_line_error(proc) == (
        "error: unknown framework 'theano'; valid frameworks: caffe, cntk, "
        "jax, mxnet, pytorch, tensorflow\n")


def test_render_task_reads_the_base_substitution_as_build_does(root):
    """DLREPRO_BASE_OVERRIDES, and --base-image as FROM=TO or REF: the FROM
    line of the image `invoke build` would make under the same setting."""
    invoke = str(Path(sys.executable).parent / "invoke")
    env = dict(os.environ, **{images.BASE_OVERRIDES_ENV:
                              "ubuntu:18.04=stand-in/bionic:1"})
    for extra, base in (([], "stand-in/bionic:1"),
                        (["--base-image", "ubuntu:18.04=other/bionic:2"],
                         "other/bionic:2"),
                        (["--base-image", "plain/bionic:3"], "plain/bionic:3")):
        proc = subprocess.run([invoke, "render", "--framework", "cntk", *extra],
                              cwd=root, env=env, capture_output=True,
                              text=True)
        assert proc.returncode == 0, proc.stderr
        assert f"\nFROM {base} AS system\n" in proc.stdout, proc.stdout
        entry = matrix.load()["cntk"]["cpu"]
        assert proc.stdout == render.render_profile(
            "cntk", "cpu", base=images.base_reference(entry, base)[0]
        ).dockerfile
