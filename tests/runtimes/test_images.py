"""Images through a real Docker engine: the CPU images of PyTorch, TensorFlow
and MXNet built FROM the debootstrap base out of wheelhouses, their labels
and hash-derived tags, no-op rebuilds, a network build with the host's CA
bundle that leaves no CA behind, build failures, the base-image lock, and
save/load with checksums.

A tiny `demo` framework (the `six` package) stands in where a whole
framework would only make a test slower; it uses the real templates and
code paths.

Why this is long: every test here needs the real engine and shares the
images built once per test session, so they stay in one module.
"""
import datetime
import json
import os
import shutil
import subprocess
import sys

import pytest

from dlrepro import matrix
from dlrepro.images import archive
from dlrepro.images import build as images
from dlrepro.images import render
from dlrepro.images import wheelhouse
from dlrepro.errors import UserError

from dockerenv import BASE_IMAGE, BIONIC_IMAGE, PREFIX

SIX_LOCK = ("# demo-cpu: test lock\n"
            "six==1.17.0 \\\n    --hash=sha256:"
            "4721f391ed90541fddacab5acf947aa0d3dc7d27b2e1e8eda2be8970586c3274\n")


def docker(*args, check=True):
    proc = subprocess.run(["docker", *args], capture_output=True, text=True)
    if check:
        assert proc.returncode == 0, proc.stderr
    return proc


# --- the CPU images ---------------------------------------------------------------

@pytest.mark.parametrize("framework", ["pytorch", "tensorflow", "mxnet",
                                       "jax"])
def test_cpu_image_labels_and_hash_tag(cpu_images, docker_client, test_base,
                                       framework):
    tag = cpu_images[framework]
    entry = matrix.load()[framework]["cpu"]
    plan = images.plan(framework, "cpu", matrix.load(), base_image=test_base,
                       client=docker_client, name_prefix=PREFIX)
    assert tag == plan.tag == f"{PREFIX}/{framework}:cpu-{plan.recipe_hash[:12]}"
    labels = docker_client.images.get(tag).labels
    assert labels["org.dlrepro.framework"] == framework
    assert labels["org.dlrepro.profile"] == "cpu"
    assert labels["org.dlrepro.framework-version"] == entry["framework_version"]
    assert labels["org.dlrepro.python"] == entry["python"]
    assert labels["org.dlrepro.cuda"] == "" and labels["org.dlrepro.device"] == "cpu"
    assert labels["org.dlrepro.recipe"] == plan.recipe_hash
    assert labels["org.dlrepro.base-image-id"] == docker_client.images.get(
        test_base).id
    assert labels["org.opencontainers.image.version"] == entry["framework_version"]
    assert labels["org.opencontainers.image.base.name"] == test_base
    datetime.datetime.strptime(labels["org.opencontainers.image.created"],
                               "%Y-%m-%dT%H:%M:%SZ")


@pytest.mark.parametrize("framework,module", [
    ("pytorch", "torch"), ("tensorflow", "tensorflow"), ("mxnet", "mxnet"),
    ("jax", "jax")])
def test_cpu_image_runs_the_locked_framework_offline(cpu_images, framework,
                                                     module):
    version = matrix.load()[framework]["cpu"]["framework_version"]
    proc = docker("run", "--rm", "--network", "none", cpu_images[framework],
                  "sh", "-c", f"test ! -e /tmp/dlrepro && /opt/venv/bin/python "
                  f"-c 'import {module}; print({module}.__version__)'")
    assert proc.stdout.strip().splitlines()[-1].startswith(version)


def test_pytorch_image_has_its_pinned_compiler_and_no_package_files(
        cpu_images):
    # g++ for torch.compile, at the matrix's versions; the stand-in base's
    # docker-clean left none of the downloaded .deb files in the layer.
    pins = dict(p.split("=", 1) for p in matrix.load()["pytorch"]["cpu"]["apt"])
    proc = docker("run", "--rm", "--network", "none", cpu_images["pytorch"],
                  "sh", "-c", "dpkg-query -W -f '${Package}=${Version}\\n' "
                  + " ".join(pins) + " && ls /var/cache/apt/archives")
    lines = proc.stdout.split()
    assert dict(line.split("=", 1) for line in lines[:len(pins)]) == pins
    assert not [name for name in lines[len(pins):] if name.endswith(".deb")]


def test_cntk_image_from_the_ubuntu_stand_in(cntk_image, docker_client):
    """CNTK's image, FROM the debootstrapped Ubuntu 18.04: its labels, and
    OpenMPI 1.10 from Ubuntu 16.04's packages, registered with dpkg at the
    pinned version, with no package file left behind."""
    entry = matrix.load()["cntk"]["cpu"]
    plan = images.plan("cntk", "cpu", matrix.load(), base_image=BIONIC_IMAGE,
                       client=docker_client, name_prefix=PREFIX)
    assert cntk_image == plan.tag
    labels = docker_client.images.get(cntk_image).labels
    assert labels["org.dlrepro.framework-version"] == entry["framework_version"]
    assert labels["org.dlrepro.python"] == "3.6"
    assert labels["org.opencontainers.image.base.name"] == BIONIC_IMAGE
    assert labels["org.dlrepro.base-image-id"] == docker_client.images.get(
        BIONIC_IMAGE).id
    versions = {source["name"].split("_")[0]: source["name"].split("_")[1]
                for source in entry["sources"]}
    proc = docker("run", "--rm", "--network", "none", cntk_image, "sh", "-c",
                  "test ! -e /tmp/dlrepro && dpkg-query -W "
                  + " ".join(sorted(versions)) + " && mpirun --version 2>&1 "
                  "| head -1 && /opt/venv/bin/python -W ignore -c "
                  "'import cntk; print(cntk.__version__)'")
    lines = proc.stdout.strip().splitlines()
    assert dict(line.split("\t") for line in lines[:3]) == versions
    assert lines[3] == "mpirun (Open MPI) 1.10.2"
    assert lines[4] == "2.7"


def test_unchanged_rebuild_is_a_no_op(cpu_images, docker_client, test_base):
    before = docker_client.images.get(cpu_images["mxnet"]).id
    plan = images.plan("mxnet", "cpu", matrix.load(), base_image=test_base,
                       client=docker_client, name_prefix=PREFIX)
    messages = []
    assert images.build(plan, client=docker_client, log=messages.append) == before
    assert messages == [f"build: {plan.tag} is up to date"]


# --- the recipe hash ------------------------------------------------------------------

@pytest.fixture
def demo(tmp_path, monkeypatch):
    """A `demo` framework: real templates plus a part that imports six, and a
    lock of six; returns its matrix."""
    templates = tmp_path / "templates"
    shutil.copytree(render.TEMPLATES_DIR, templates)
    (templates / "demo.Dockerfile.j2").write_text(
        '{% extends "base.Dockerfile.j2" %}\n{% block module %}six{% endblock %}\n')
    (templates / "broken.Dockerfile.j2").write_text(
        '{% extends "base.Dockerfile.j2" %}\n'
        '{% block module %}no_such_module_dlrepro{% endblock %}\n')
    locks = tmp_path / "locks"
    locks.mkdir()
    (locks / "demo-cpu.txt").write_text(SIX_LOCK)
    (locks / "broken-cpu.txt").write_text(SIX_LOCK)
    monkeypatch.setattr(render, "TEMPLATES_DIR", templates)
    monkeypatch.setattr(matrix, "LOCKS_DIR", locks)
    # No apt packages (PyTorch's g++): these images build in seconds, with
    # the network off.
    entry = dict(matrix.load()["pytorch"]["cpu"], pip=["six==1.17.0"],
                 pip_index=[], framework_version="1.17.0", apt=[])
    return {"demo": {"cpu": entry}, "broken": {"cpu": dict(entry)}}


def test_tag_follows_lock_templates_and_base(demo, docker_client, test_base,
                                            tmp_path):
    def tag():
        return images.plan("demo", "cpu", demo, base_image=test_base,
                           client=docker_client, name_prefix=PREFIX).tag
    first = tag()
    assert tag() == first
    lock = matrix.lock_path("demo", "cpu")
    lock.write_text(lock.read_text() + "# changed\n")
    second = tag()
    assert second != first
    part = render.TEMPLATES_DIR / "base.Dockerfile.j2"
    part.write_text(part.read_text() + "{# changed #}\n")
    third = tag()
    assert third not in (first, second)
    other = images.plan("demo", "cpu", demo, base_image="python:3.11.9-slim-bookworm",
                        client=docker_client, name_prefix=PREFIX)
    assert other.tag != third and other.base_id is None


def test_wheelhouse_build_then_network_build_with_host_ca(
        demo, docker_client, test_base, tmp_path):
    house = tmp_path / "wheelhouse"
    wheelhouse.make("demo", "cpu", demo["demo"]["cpu"], root=house,
                           log=lambda _m: None)
    files = wheelhouse.files("demo", "cpu", demo["demo"]["cpu"], house)
    assert list(files) == ["wheels/six-1.17.0-py2.py3-none-any.whl"]
    plan = images.plan("demo", "cpu", demo, base_image=test_base,
                       client=docker_client, name_prefix=PREFIX)
    _remove(docker_client, plan.tag)
    try:
        images.build(plan, client=docker_client, wheelhouse_root=house,
                     logs_dir=tmp_path / "logs", log=lambda _m: None)
        offline = docker_client.images.get(plan.tag)
        assert offline.labels["org.dlrepro.recipe"] == plan.recipe_hash
        _remove(docker_client, plan.tag)
        # The same recipe from the package index, through the host's CA
        # bundle (a TLS-intercepting proxy needs it), gives the same tag.
        ca = os.environ.get("PIP_CERT") or "/etc/ssl/certs/ca-certificates.crt"
        images.build(plan, wheelhouse=False, ca_bundle=ca, client=docker_client,
                     logs_dir=tmp_path / "logs", log=lambda _m: None)
        image = docker_client.images.get(plan.tag)
        assert docker("run", "--rm", "--network", "none", plan.tag,
                      "/opt/venv/bin/python", "-c",
                      "import six; print(six.__version__)").stdout.strip() == "1.17.0"
        assert docker("run", "--rm", "--network", "none", plan.tag, "sh", "-c",
                      "test ! -e /tmp/dlrepro", check=False).returncode == 0
        history = json.dumps(image.history())
        assert "ca-bundle" not in history and "wheels" not in history
    finally:
        _remove(docker_client, plan.tag)


def _dangling():
    return set(docker("images", "--filter", "dangling=true", "--quiet",
                      "--no-trunc").stdout.split())


def test_a_build_leaves_only_its_image_behind(demo, docker_client, test_base,
                                             tmp_path):
    """The install stage (wheelhouse, unpacked packages: ~10 GB for a GPU
    image) is thrown away, not left as a dangling image; the base stays."""
    house = tmp_path / "wheelhouse"
    wheelhouse.make("demo", "cpu", demo["demo"]["cpu"], root=house,
                    log=lambda _m: None)
    plan = images.plan("demo", "cpu", demo, base_image=test_base,
                       client=docker_client, name_prefix=PREFIX)
    _remove(docker_client, plan.tag)
    before = _dangling()
    try:
        # nocache: every stage is made by this build, none found in cache.
        images.build(plan, client=docker_client, wheelhouse_root=house,
                     logs_dir=tmp_path / "logs", log=lambda _m: None,
                     nocache=True)
        assert _dangling() - before == set()
        assert images.local_image(docker_client, test_base) is not None
        assert docker("run", "--rm", "--network", "none", plan.tag,
                      "/opt/venv/bin/python", "-c",
                      "import six").returncode == 0
    finally:
        _remove(docker_client, plan.tag)


def test_build_failure_names_the_log_and_shows_its_end(demo, docker_client,
                                                       test_base, tmp_path):
    house = tmp_path / "wheelhouse"
    wheelhouse.make("broken", "cpu", demo["broken"]["cpu"], root=house,
                           log=lambda _m: None)
    plan = images.plan("broken", "cpu", demo, base_image=test_base,
                       client=docker_client, name_prefix=PREFIX)
    before = _dangling()
    with pytest.raises(images.BuildFailed) as info:
        images.build(plan, client=docker_client, wheelhouse_root=house,
                     logs_dir=tmp_path / "logs", log=lambda _m: None)
    # What the failed build made is gone too.
    assert _dangling() - before == set()
    message = str(info.value)
    first = message.splitlines()[0]
    assert first.startswith("build of broken/cpu failed:")
    log = tmp_path / "logs" / f"broken-cpu-{plan.recipe_hash[:12]}.log"
    assert str(log) in first and log.exists()
    assert "No module named 'no_such_module_dlrepro'" in message
    assert images.local_image(docker_client, plan.tag) is None


def test_missing_base_says_what_to_run(docker_client):
    with pytest.raises(UserError) as info:
        images.ensure("mxnet", "cpu", matrix.load(), client=docker_client,
                      base_image=f"{PREFIX}/no-such-base:0", name_prefix=PREFIX)
    assert "is not present" in str(info.value)
    assert "invoke load" in str(info.value) and "--base-image" in str(info.value)


# --- base substitution ----------------------------------------------------------------
# One setting for every command (fault 11); the real build -> bench path is
# tests/runtimes/test_docker_runtime_cli.py::test_build_bench_and_render_read_one_base_substitution.

def test_one_base_substitution_for_every_command(monkeypatch):
    m = matrix.load()
    cntk, torch = m["cntk"]["cpu"], m["pytorch"]["cpu"]
    monkeypatch.delenv(images.BASE_OVERRIDES_ENV, raising=False)
    assert images.substituted_base(cntk) is None
    monkeypatch.setenv(images.BASE_OVERRIDES_ENV,
                       f" ubuntu:18.04 = {BIONIC_IMAGE} ,")
    assert images.substituted_base(cntk) == BIONIC_IMAGE
    assert images.substituted_base(torch) is None
    # What plan() builds FROM when not told: the setting.
    assert images.base_for(cntk) == BIONIC_IMAGE
    # A command's FROM=TO wins over the setting, a runtime's mapping sits
    # between, a plain --base-image replaces any base.
    assert images.substituted_base(cntk, images.substitution(
        ["ubuntu:18.04=given:1"], mapping={"ubuntu:18.04": "mapped:1"})) == \
        "given:1"
    assert images.substituted_base(cntk, images.substitution(
        mapping={"ubuntu:18.04": "mapped:1"})) == "mapped:1"
    plain = images.substitution(["plain:1"])
    assert images.substituted_base(cntk, plain) == "plain:1"
    assert images.substituted_base(torch, plain) == "plain:1"
    # The matrix's own base is no substitution.
    assert images.substituted_base(cntk, images.substitution(
        ["ubuntu:18.04=ubuntu:18.04"])) is None
    with pytest.raises(UserError, match="2 plain references"):
        images.substitution(["a:1", "b:1"])
    with pytest.raises(UserError, match="--base-image: 'ubuntu:18.04=' is "
                                        "not FROM=TO"):
        images.substitution(["ubuntu:18.04="])
    monkeypatch.setenv(images.BASE_OVERRIDES_ENV, "no-equals-sign")
    with pytest.raises(UserError, match="DLREPRO_BASE_OVERRIDES: "
                                        "'no-equals-sign' is not FROM=TO"):
        images.substituted_base(cntk)


def test_build_says_which_setting_makes_bench_find_its_images(monkeypatch):
    m = matrix.load()
    cntk = [("cntk", "cpu")]
    setting = f"ubuntu:18.04={BIONIC_IMAGE}"
    monkeypatch.setenv(images.BASE_OVERRIDES_ENV, setting)
    # Built under the setting: bench sees the same, nothing to say.
    assert images.setting_for(m, cntk, images.substitution()) is None
    assert images.setting_for(m, cntk, images.substitution(
        [BIONIC_IMAGE])) is None
    # A base bench would not use: the setting that makes it.
    monkeypatch.delenv(images.BASE_OVERRIDES_ENV)
    for given in ([BIONIC_IMAGE], [setting]):
        assert images.setting_for(m, cntk, images.substitution(given)) == \
            setting
    monkeypatch.setenv(images.BASE_OVERRIDES_ENV,
                       f"python:3.11.9-slim-bookworm={BASE_IMAGE}")
    assert images.setting_for(m, cntk, images.substitution([setting])) == \
        f"python:3.11.9-slim-bookworm={BASE_IMAGE},{setting}"
    # What an image that is missing says to run.
    assert images.build_command("cntk", "cpu", m["cntk"]["cpu"]) == \
        "invoke build --framework cntk --profile cpu"
    assert images.build_command("cntk", "cpu", m["cntk"]["cpu"],
                                "x:1") == ("invoke build --framework cntk "
                                           "--profile cpu --base-image "
                                           "ubuntu:18.04=x:1")


# --- base-image lock ---------------------------------------------------------------------

def test_lock_pins_a_local_only_base_by_id_and_locked_builds_check_it(
        docker_client, test_base, tmp_path):
    path = tmp_path / "base-images.lock"
    failures = images.lock_bases([test_base, f"{PREFIX}/no-such-base:0"],
                                 path, docker_client, log=lambda _m: None)
    assert list(failures) == [f"{PREFIX}/no-such-base:0"]
    written = path.stat().st_ino  # a rewrite replaces the file
    assert images.lock_bases([f"{PREFIX}/no-such-base:0"], path,
                             docker_client, log=lambda _m: None)
    assert path.stat().st_ino == written  # nothing resolved: untouched
    pin = images.read_base_lock(path)[test_base]
    assert pin["id"] == docker_client.images.get(test_base).id
    assert "digest" not in pin
    plan = images.plan("mxnet", "cpu", matrix.load(), base_image=test_base,
                       locked=True, base_lock=path, client=docker_client)
    assert plan.base == test_base
    with pytest.raises(UserError, match=r"--locked: base image python:3.11.9-slim-bookworm"
                                        r" of mxnet/cpu is not in base-images.lock; "
                                        r"run `invoke lock`"):
        images.plan("mxnet", "cpu", matrix.load(), locked=True, base_lock=path,
                    client=docker_client)
    pins = images.read_base_lock(path)
    pins[test_base]["id"] = "sha256:" + "0" * 64
    images.write_base_lock(pins, path)
    with pytest.raises(UserError, match="pins sha256:0000"):
        images.plan("mxnet", "cpu", matrix.load(), base_image=test_base,
                    base_lock=path, client=docker_client)


def test_a_locked_digest_becomes_the_from_reference(tmp_path):
    path = tmp_path / "base-images.lock"
    digest = "sha256:" + "b" * 64
    images.write_base_lock({"python:3.11.9-slim-bookworm": {
        "digest": digest, "source": "registry", "resolved_at": "x"}}, path)
    entry = matrix.load()["pytorch"]["cpu"]
    base, _pin = images.base_reference(entry, base_lock=path, locked=True)
    assert base == f"python:3.11.9-slim-bookworm@{digest}"


# --- save and load ---------------------------------------------------------------------------

def test_save_task_archives_the_image_bench_runs(cntk_image, monkeypatch):
    """`invoke save` under DLREPRO_BASE_OVERRIDES names the image build made
    and bench runs, and the stand-in as its base (archives not written:
    docker save of the image is what the next test checks)."""
    import signal
    from invoke import Context
    sigpipe = signal.getsignal(signal.SIGPIPE)
    import tasks  # the repository root is on sys.path (conftest)
    signal.signal(signal.SIGPIPE, sigpipe)  # tasks.py sets it for the CLI
    monkeypatch.setenv(images.BASE_OVERRIDES_ENV,
                       f"ubuntu:18.04={BIONIC_IMAGE}")
    monkeypatch.setenv(images.PREFIX_ENV, PREFIX)
    saved = []
    monkeypatch.setattr(archive, "save", lambda refs, out: saved.append(refs))
    tasks.save(Context(), framework=["cntk"], with_base=True)
    assert saved == [[cntk_image, BIONIC_IMAGE]]


def test_save_and_load_check_sums_and_ids(docker_client, test_base, tmp_path):
    tag = f"{PREFIX}/savetest:1"
    docker_client.images.get(test_base).tag(tag)
    folder = tmp_path / "archive"
    try:
        archive.save([tag], folder, docker_client, log=lambda _m: None)
        manifest = json.loads((folder / "images.json").read_text())
        (name, info), = manifest.items()
        assert info["ref"] == tag
        assert info["image_id"] == docker_client.images.get(tag).id
        sums = (folder / "SHA256SUMS").read_text()
        assert sums == f"{info['sha256']}  {name}\n"
        assert wheelhouse.sha256_file(folder / name) == info["sha256"]

        damaged = tmp_path / "damaged"
        shutil.copytree(folder, damaged)
        with open(damaged / name, "r+b") as handle:
            handle.seek(1000)
            byte = handle.read(1)
            handle.seek(1000)
            handle.write(bytes([byte[0] ^ 0xFF]))
        with pytest.raises(UserError, match="the archive is damaged"):
            archive.load(damaged, client=docker_client, log=lambda _m: None)

        docker_client.images.remove(tag)
        assert images.local_image(docker_client, tag) is None
        assert archive.load(folder, client=docker_client,
                           log=lambda _m: None) == [tag]
        assert docker_client.images.get(tag).id == info["image_id"]
    finally:
        _remove(docker_client, tag)


def _remove(client, tag):
    if images.local_image(client, tag) is not None:
        client.images.remove(tag, force=True)


def test_build_task_is_a_no_op_for_a_built_image_and_refuses_unlocked(
        cpu_images, root):
    env = dict(os.environ, DLREPRO_IMAGE_PREFIX=PREFIX)
    invoke = os.path.join(os.path.dirname(sys.executable), "invoke")
    proc = subprocess.run([invoke, "build", "--framework", "mxnet",
                           "--base-image", BASE_IMAGE], cwd=root, env=env,
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [f"build: {cpu_images['mxnet']} is up to date",
                                        cpu_images["mxnet"]]
    proc = subprocess.run([invoke, "build", "--framework", "mxnet", "--locked",
                           "--base-image", f"{PREFIX}/unlocked:0"], cwd=root,
                          env=env, capture_output=True, text=True)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        f"error: --locked: base image {PREFIX}/unlocked:0 of mxnet/cpu is not in "
        f"base-images.lock; run `invoke lock --image {PREFIX}/unlocked:0`"]


def test_a_wheelhouse_for_another_python_takes_the_locked_files(
        tmp_path, monkeypatch):
    """TensorFlow 1.15's closure (Python 3.7, glibc 2.27) pins gast 0.2.2,
    a source distribution: the wheelhouse fetches exactly the locked file.
    Needs the package index, not the engine."""
    lock = [line for line in matrix.lock_path("tensorflow", "tf1").read_text()
            .replace("\\\n", "").splitlines()
            if line.startswith(("gast==", "termcolor=="))]
    locks = tmp_path / "locks"
    locks.mkdir()
    (locks / "tensorflow-tf1.txt").write_text("\n".join(lock) + "\n")
    monkeypatch.setattr(matrix, "LOCKS_DIR", locks)
    entry = matrix.load()["tensorflow"]["tf1"]
    house = tmp_path / "wheelhouse"
    wheelhouse.make("tensorflow", "tf1", entry, root=house,
                           log=lambda _m: None)
    files = wheelhouse.files("tensorflow", "tf1", entry, house)
    assert sorted(files) == ["wheels/gast-0.2.2.tar.gz",
                             "wheels/termcolor-2.3.0-py3-none-any.whl"]
    # A file of an older lock is dropped; a changed lock makes it stale.
    (house / "tensorflow-tf1" / "wheels" / "stale-1.0-py3-none-any.whl").write_bytes(b"x")
    wheelhouse.make("tensorflow", "tf1", entry, root=house,
                           log=lambda _m: None)
    assert not (house / "tensorflow-tf1" / "wheels" / "stale-1.0-py3-none-any.whl").exists()
    (locks / "tensorflow-tf1.txt").write_text(lock[0] + "\n")
    assert wheelhouse.files("tensorflow", "tf1", entry, house) is None


def test_fetch_source_checks_the_sha256(tmp_path):
    payload = tmp_path / "src.tar.bz2"
    payload.write_bytes(b"openmpi, in a manner of speaking")
    good = {"name": "src.tar.bz2", "url": payload.as_uri(),
            "sha256": wheelhouse.sha256_file(payload)}
    path = wheelhouse.fetch_source(good, tmp_path / "out", log=lambda _m: None)
    assert path.read_bytes() == payload.read_bytes()
    bad = dict(good, name="other.tar.bz2", sha256="0" * 64)
    with pytest.raises(UserError, match="does not match the matrix's 0000"):
        wheelhouse.fetch_source(bad, tmp_path / "out", log=lambda _m: None)
    assert not (tmp_path / "out" / "other.tar.bz2").exists()
