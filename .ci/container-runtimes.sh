#!/usr/bin/env bash
# Makes sure the container runtimes that clusters allow besides Docker are
# installed, at the exact Debian bookworm versions the tests were written
# against: podman (with catatonit for --init, uidmap and fuse-overlayfs for
# rootless use) and Charliecloud (ch-run from charliecloud-runtime,
# ch-convert from charliecloud-builders, squashfs-tools for SquashFS
# images). Idempotent: installs nothing when every package is at its pinned
# version. tests/runtimes/test_podman_runtime.py and tests/runtimes/test_charliecloud_runtime.py
# use them (.ci/run sets DLREPRO_REQUIRE_RUNTIMES=1 so they fail, not skip).
set -euo pipefail
# ch-run refuses to start without $USER (unset in some CI shells).
export USER="${USER:-$(id -un)}"
packages=(
    "podman=4.3.1+ds1-8+deb12u1+b3"
    "catatonit=0.1.7-1+b2"
    "uidmap=1:4.13+dfsg1-1+deb12u2"
    "fuse-overlayfs=1.10-1"
    "charliecloud-runtime=0.31-1"
    "charliecloud-builders=0.31-1"
    "squashfs-tools=1:4.5.1-1"
)
. "$(dirname "$0")/apt.sh"
mapfile -t missing < <(not_at_pinned_version "${packages[@]}")
if [ ${#missing[@]} -eq 0 ]; then
    echo "container-runtimes.sh: $(podman --version), ch-run $(ch-run --version 2>&1) present"
    exit 0
fi
started=$(date +%s)
# No recommended packages: buildah's and dbus's are not needed to run.
apt_install "${missing[@]}"
echo "container-runtimes.sh: installed $(podman --version), ch-run" \
     "$(ch-run --version 2>&1) in $(( $(date +%s) - started )) s"
