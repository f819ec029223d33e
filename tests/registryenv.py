"""What the registry tests share: the registry .ci/registry.sh serves (TLS
with its own CA, htpasswd), logins kept the clients' own way in folders of
the test's (Docker's config folder, Podman's auth file, ch-image's
variables), and a session's own path in the registry, so that concurrent
sessions never see each other's images.

Without the registry the tests skip, saying what to run; with
DLREPRO_REQUIRE_REGISTRY set (CI sets it) they fail instead.
"""
import os
import subprocess
import uuid
from pathlib import Path

import pytest

REGISTRY = os.environ.get("DLREPRO_TEST_REGISTRY",
                          "registry.dlrepro.test:5443")
USER = os.environ.get("DLREPRO_TEST_REGISTRY_USER", "dlrepro")
# The test registry's password (.ci/registry.sh prints it): not a secret.
PASSWORD = os.environ.get("DLREPRO_TEST_REGISTRY_PASSWORD",
                          "opensesame-43")
# Where .ci/registry.sh keeps its CA, certificate and configuration.
STATE = Path(os.environ.get("DLREPRO_TEST_REGISTRY_STATE",
                            "/var/lib/dlrepro-registry"))


def unavailable(reason):
    if os.environ.get("DLREPRO_REQUIRE_REGISTRY"):
        pytest.fail(f"DLREPRO_REQUIRE_REGISTRY is set but {reason}")
    pytest.skip(reason)


def answers(registry=REGISTRY):
    """Whether the registry's API root answers over verified TLS, asking
    for authentication (401)."""
    proc = subprocess.run(
        ["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "--cacert",
         str(STATE / "ca.crt"), f"https://{registry}/v2/"],
        capture_output=True, text=True, timeout=60)
    return proc.stdout.strip() == "401"


def login(folder, password=PASSWORD):
    """Log docker and podman in, each into its own file under `folder`;
    the variables that name those files and ch-image's credentials."""
    folder = Path(folder)
    docker_config = folder / "docker"
    docker_config.mkdir(parents=True, exist_ok=True)
    auth_file = folder / "podman-auth.json"
    env = dict(DOCKER_CONFIG=str(docker_config),
               REGISTRY_AUTH_FILE=str(auth_file),
               CH_IMAGE_USERNAME=USER, CH_IMAGE_PASSWORD=password)
    for argv in (["docker", "login"], ["podman", "login"]):
        proc = subprocess.run(argv + ["--username", USER, "--password-stdin",
                                      REGISTRY], input=password, text=True,
                              capture_output=True, env=dict(os.environ, **env),
                              timeout=120)
        assert proc.returncode == 0, proc.stderr
    return env


def session_path():
    """This session's own path in the registry."""
    return f"{REGISTRY}/test-{uuid.uuid4().hex[:10]}"
