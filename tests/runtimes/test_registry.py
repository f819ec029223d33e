"""Images through a registry (docs/images.md, "Sharing images"): against
the real registry .ci/registry.sh serves (TLS, htpasswd), `invoke push`
records the Docker tests' MXNet image by digest; the image is removed from
each store and `invoke bench --registry` pulls it by that digest with
docker, podman and Charliecloud's ch-image, runs a cell, and the result and
`invoke report` carry the pullable reference. An image that is not the
locked one (same name, other bytes) is refused in one line; a wrong
password, an unknown registry and a registry gone mid-push each end in one
line with nothing recorded; `invoke lock`'s resolution pins a base pushed to
the registry and a build FROM that digest works.

Push and pull times are printed (pytest -s shows them)."""
import base64
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

import registryenv
import waits
from dlrepro import matrix
from dlrepro.images import build as images, registry as registry_mod
from dlrepro.run import store
from dockerenv import BASE_IMAGE, BASE_OVERRIDES, PREFIX as DOCKER_PREFIX
from dockerenv import engine_or_skip
from runtimeenv import FRAMEWORK, binary_or_skip, docker_image
from cli import invoke

PREFIX = "dlrepro-registry-test"
INVOKE = [sys.executable, "-m", "invoke"]
CELL = ["--framework", FRAMEWORK, "--network", "fcn-r", "--batch-size", "16",
        "--iterations", "3", "--warmup", "1", "--threads", "1"]


def one_line_error(proc):
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.strip().count("\n") == 0, proc.stderr
    return proc.stderr


def run(*argv, env=None, check=True):
    proc = subprocess.run(list(argv), capture_output=True, text=True,
                          env=env, timeout=900)
    if check:
        assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc


@pytest.fixture(scope="module")
def pushed(tmp_path_factory):
    """The MXNet test image (the same image ID) under this module's name,
    pushed once to this session's path; its lock entry and the push's
    seconds."""
    for binary in ("podman", "ch-image", "ch-run", "ch-convert"):
        binary_or_skip(binary)
    if not registryenv.answers():
        registryenv.unavailable(f"no registry answers on "
                                f"{registryenv.REGISTRY} (run "
                                f".ci/registry.sh)")
    folder = tmp_path_factory.mktemp("registry")
    env = dict(os.environ, **registryenv.login(folder),
               DLREPRO_IMAGE_PREFIX=PREFIX,
               DLREPRO_BASE_OVERRIDES=BASE_OVERRIDES,
               DLREPRO_REGISTRY_LOCK=str(folder / "registry.lock.json"),
               DLREPRO_CH_IMAGES=str(folder / "charliecloud"))
    client = engine_or_skip()
    tag = PREFIX + docker_image()[len(DOCKER_PREFIX):]
    _tag_again(client, tag)
    path = registryenv.session_path()
    started = time.monotonic()
    proc = invoke("push", "--framework", FRAMEWORK, "--registry", path,
                  env=env)
    seconds = time.monotonic() - started
    assert proc.returncode == 0, proc.stdout + proc.stderr
    [entry] = registry_mod.read_lock(env["DLREPRO_REGISTRY_LOCK"])
    print(f"\npush of {tag} ({client.images.get(tag).attrs['Size'] / 1e9:.2f}"
          f" GB): {seconds:.1f} s")
    remote = registry_mod.remote_tag(path, tag)
    yield SimpleNamespace(env=env, folder=folder, path=path, entry=entry,
                          tag=tag, remote=remote, client=client,
                          push_s=seconds, push_out=proc.stdout)
    for ref in (tag, entry["reference"], remote):
        run("docker", "rmi", ref, check=False)
        run("podman", "rmi", ref, check=False)
    run("ch-image", "delete", tag, env=_ch_env(env), check=False)


def _tag_again(client, tag):
    """Give the Docker tests' image this module's name (again: a test
    may have removed it)."""
    client.images.get(DOCKER_PREFIX + tag[len(PREFIX):]).tag(
        *tag.rsplit(":", 1))


def _ch_env(env):
    from dlrepro.images import pulls
    return dict(env, PATH=pulls.ch_env()["PATH"])


def test_push_records_the_pullable_reference_beside_the_recipe(pushed):
    entry, image = pushed.entry, pushed.client.images.get(pushed.tag)
    assert entry["reference"].startswith(f"{pushed.path}/{FRAMEWORK}@sha256:")
    assert entry["recipe"] == image.labels[images.LABEL_RECIPE]
    assert entry["image_id"] == image.id and entry["tag"] == pushed.tag
    assert entry["reference"] in image.attrs["RepoDigests"]
    # Progress in a log: one line per layer, each layer once, no chunks.
    layers = [line for line in pushed.push_out.splitlines()
              if line.startswith(f"push {FRAMEWORK}/cpu: layer ")]
    assert len(layers) == len(set(image.attrs["RootFS"]["Layers"]))
    assert len({line.split()[3] for line in layers}) == len(layers)
    # The credentials stay in the clients' own files.
    lock_text = Path(pushed.env["DLREPRO_REGISTRY_LOCK"]).read_text()
    assert registryenv.PASSWORD not in lock_text


def _forget(pushed, runtime):
    """Remove the pushed image's names from `runtime`'s store."""
    if runtime == "docker":
        for ref in (pushed.tag, pushed.entry["reference"], pushed.remote):
            run("docker", "rmi", ref, check=False)
        assert images.local_image(pushed.client, pushed.tag) is None
    elif runtime == "podman":
        for ref in (pushed.tag, pushed.entry["reference"]):
            run("podman", "rmi", ref, check=False)
        assert run("podman", "image", "exists", pushed.tag,
                   check=False).returncode != 0
    else:
        run("ch-image", "delete", pushed.tag, env=_ch_env(pushed.env),
            check=False)


@pytest.mark.parametrize("runtime", ["docker", "podman", "charliecloud"])
def test_bench_pulls_by_digest_and_the_result_carries_the_reference(
        pushed, runtime, tmp_path):
    _forget(pushed, runtime)
    out = tmp_path / "out"
    started = time.monotonic()
    proc = invoke("bench", *CELL, "--runtime", runtime, "--registry",
                  pushed.path, "--out", str(out), env=pushed.env)
    seconds = time.monotonic() - started
    assert proc.returncode == 0, proc.stdout + proc.stderr
    print(f"\nbench --runtime {runtime} --registry (pull and one cell): "
          f"{seconds:.1f} s")
    [(_folder, _record, pairs)] = store.runs(out, ["latest"])
    [(entry, result)] = pairs
    assert entry["status"] == "ok", entry.get("message")
    container = result["environment"]["container"]
    assert container["pullable"] == pushed.entry["reference"]
    assert container["labels"][images.LABEL_RECIPE] == pushed.entry["recipe"]
    report = invoke("report", "--out", str(out), env=pushed.env)
    assert report.returncode == 0, report.stderr
    assert f"({runtime}): {pushed.entry['reference']}" in report.stdout


def _tampered_lock(pushed, folder):
    """A lock whose entry names the pushed image's repository at another
    image's digest: the registry's name, other bytes (a one-file image
    pushed under the same name)."""
    remote = f"{pushed.path}/{FRAMEWORK}:tampered"
    (folder / "rootfs").mkdir()
    (folder / "rootfs" / "other-bytes").write_text("not the locked image\n")
    tar = subprocess.run(["tar", "-C", str(folder / "rootfs"), "-c", "."],
                         capture_output=True, check=True).stdout
    subprocess.run(["docker", "import", "-", remote], input=tar,
                   capture_output=True, check=True)
    run("docker", "push", remote, env=pushed.env)
    digests = pushed.client.images.get(remote).attrs["RepoDigests"]
    run("docker", "rmi", remote)
    other = next(d for d in digests if d.startswith(f"{pushed.path}/"))
    assert other != pushed.entry["reference"]
    lock = folder / "tampered.lock.json"
    registry_mod.write_lock([dict(pushed.entry, reference=other)], lock)
    return dict(pushed.env, DLREPRO_REGISTRY_LOCK=str(lock)), other


def test_same_name_other_bytes_is_refused_by_every_store(pushed, tmp_path):
    env, other = _tampered_lock(pushed, tmp_path)
    for runtime in ("docker", "podman", "charliecloud"):
        _forget(pushed, runtime)
        proc = invoke("pull", "--framework", FRAMEWORK, "--runtime", runtime,
                      env=env)
        line = one_line_error(proc)
        assert f"the pulled image {other} carries recipe none" in line
        assert line.rstrip().endswith("refused")
    # The refused bytes are not left under the name they came by.
    assert images.local_image(pushed.client, other) is None
    assert run("podman", "image", "exists", other,
               check=False).returncode != 0
    # Nothing of the refused image stands under the locked tag.
    assert images.local_image(pushed.client, pushed.tag) is None
    from dlrepro.images import charliecloud as ch_images
    record = ch_images.converted(pushed.tag, env["DLREPRO_CH_IMAGES"])
    assert record is None or record["reference"] == pushed.entry["reference"]


def test_a_local_tag_with_other_bytes_is_refused(pushed):
    _forget(pushed, "docker")
    run("docker", "tag", BASE_IMAGE, pushed.tag)
    try:
        proc = invoke("pull", "--framework", FRAMEWORK, env=pushed.env)
        line = one_line_error(proc)
        assert f"the local image {pushed.tag} carries recipe none" in line
    finally:
        run("docker", "rmi", pushed.tag)


def _wrong_password_config(folder):
    folder.mkdir()
    auth = base64.b64encode(f"{registryenv.USER}:wrong".encode()).decode()
    (folder / "config.json").write_text(json.dumps(
        {"auths": {registryenv.REGISTRY: {"auth": auth}}}))
    return str(folder)


def test_push_failures_are_one_line_and_record_nothing(pushed, tmp_path):
    _tag_again(pushed.client, pushed.tag)
    lock = Path(pushed.env["DLREPRO_REGISTRY_LOCK"])
    before = lock.read_bytes()
    env = dict(pushed.env,
               DOCKER_CONFIG=_wrong_password_config(tmp_path / "wrong"))
    line = one_line_error(invoke("push", "--framework", FRAMEWORK,
                                 "--registry", pushed.path + "-wrong",
                                 env=env))
    assert f"docker login {registryenv.REGISTRY}" in line
    # The name the failed push gave is gone with it.
    assert images.local_image(pushed.client, registry_mod.remote_tag(
        pushed.path + "-wrong", pushed.tag)) is None
    line = one_line_error(invoke(
        "push", "--framework", FRAMEWORK, "--registry",
        "no-such-registry.dlrepro.test:5443/x", env=pushed.env))
    assert "no registry no-such-registry.dlrepro.test:5443 is known" in line
    assert lock.read_bytes() == before


def _free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_a_registry_gone_mid_push_is_one_line_and_records_nothing(
        pushed, tmp_path):
    """A registry of its own (the CI one's certificate, no password),
    killed once the push's first upload has begun."""
    port = _free_port()
    data = tmp_path / "data"
    config = tmp_path / "config.yml"
    config.write_text(
        f"version: 0.1\nlog:\n  level: warn\nstorage:\n  filesystem:\n"
        f"    rootdirectory: {data}\nhttp:\n  addr: 127.0.0.1:{port}\n"
        f"  tls:\n    certificate: {registryenv.STATE / 'server.crt'}\n"
        f"    key: {registryenv.STATE / 'server.key'}\n")
    server = subprocess.Popen(["docker-registry", "serve", str(config)],
                              stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    try:
        waits.wait_for(lambda: subprocess.run(
            ["curl", "-s", "-o", "/dev/null", "--cacert",
             str(registryenv.STATE / "ca.crt"),
             f"https://127.0.0.1:{port}/v2/"]).returncode == 0,
            what="the second registry")
        _tag_again(pushed.client, pushed.tag)
        lock = Path(pushed.env["DLREPRO_REGISTRY_LOCK"])
        before = lock.read_bytes()
        push = subprocess.Popen(
            INVOKE + ["push", "--framework", FRAMEWORK, "--registry",
                      f"127.0.0.1:{port}/gone"], env=pushed.env,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        waits.wait_for(lambda: list(data.glob(
            "docker/registry/v2/repositories/gone/*/_uploads/*")),
            seconds=300, what="the first upload")
        server.kill()
        out, err = push.communicate(timeout=600)
        line = one_line_error(SimpleNamespace(returncode=push.returncode,
                                              stdout=out, stderr=err))
        assert "nothing recorded" in line
        assert lock.read_bytes() == before
    finally:
        server.kill()
        server.wait()


def test_lock_pins_a_base_pushed_to_the_registry_and_builds_from_it(
        pushed, tmp_path, monkeypatch, capfd):
    """`invoke lock`'s resolution against the registry, then a build FROM
    the pinned digest, its base pulled by that digest (the base's local
    names removed first)."""
    import docker
    base = f"{pushed.path}/bookworm-python3:minbase"
    run("docker", "tag", BASE_IMAGE, base)
    run("docker", "push", base, env=pushed.env)
    # The SDK reads the login file DOCKER_CONFIG names when it starts.
    monkeypatch.setenv("DOCKER_CONFIG", pushed.env["DOCKER_CONFIG"])
    client = docker.from_env()
    base_lock = tmp_path / "base-images.lock"
    assert images.lock_bases([base], base_lock, client,
                             log=lambda _m: None) == {}
    pin = images.read_base_lock(base_lock)[base]
    assert pin["source"] == "registry"
    repo_digest = f"{base.rsplit(':', 1)[0]}@{pin['digest']}"
    assert repo_digest in client.images.get(base).attrs["RepoDigests"]
    run("docker", "rmi", base)  # its digest's name goes with it
    assert images.local_image(client, repo_digest) is None
    built = None
    try:
        built = images.ensure(FRAMEWORK, "cpu", matrix.load(),
                              base_image=base, locked=True,
                              base_lock=base_lock, client=client,
                              name_prefix=PREFIX + "-locked",
                              log=lambda _m: None)
        # The build's progress in a log: one line per step begun.
        steps = [line for line in capfd.readouterr().out.splitlines()
                 if line.startswith(f"build {FRAMEWORK}/cpu: step ")]
        assert steps and len(steps) == int(steps[0].split()[3].split(
            "/")[1].rstrip(":")), steps
        labels = client.images.get(built).labels
        assert labels["org.opencontainers.image.base.digest"] == pin["digest"]
        assert labels["org.dlrepro.base-image-id"] == \
            client.images.get(BASE_IMAGE).id
    finally:
        for ref in filter(None, (built, base, repo_digest)):
            run("docker", "rmi", ref, check=False)
