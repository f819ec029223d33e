#!/usr/bin/env bash
# Builds the base image the tests build every framework image FROM: Debian
# bookworm (minbase) with Python 3.11, venv, pip and CA certificates, made by
# debootstrap and imported into the Docker engine under a fixed tag. No image
# registry can be reached in CI, so python:3.11-slim cannot be pulled; this
# image stands in for it (same Debian, same Python minor version).
# Idempotent: does nothing when the tag is present.
#
#   DLREPRO_TEST_BASE_IMAGE   the tag (default below; the tests read the same)
set -euo pipefail
tag=${DLREPRO_TEST_BASE_IMAGE:-dlrepro-docker-test/bookworm-python3:minbase}
if docker image inspect "$tag" >/dev/null 2>&1; then
    echo "base-image.sh: $tag is present"
    exit 0
fi
sudo=""
if [ "$(id -u)" -ne 0 ]; then
    sudo="sudo"
fi
if ! command -v debootstrap >/dev/null; then
    $sudo apt-get update -qq
    $sudo apt-get install -y -qq debootstrap >/dev/null
fi
# The Debian mirror this machine's apt already uses (it may be a proxy).
mirror=$(apt-get indextargets --format '$(REPO_URI)' | grep -v -- '-security' \
    | grep -m1 '/debian/\?$' || true)
mirror=${mirror:-http://deb.debian.org/debian/}
rootfs=$(mktemp -d)
trap '$sudo rm -rf "$rootfs"' EXIT
echo "base-image.sh: debootstrap bookworm from $mirror (about a minute)"
$sudo debootstrap --variant=minbase \
    --include=python3,python3-venv,python3-pip,ca-certificates \
    bookworm "$rootfs" "$mirror" >"$rootfs.log" 2>&1 \
    || { tail -20 "$rootfs.log" >&2; exit 1; }
rm -f "$rootfs.log"
# Package caches and lists only make the image bigger.
$sudo rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
$sudo tar -C "$rootfs" -c . | docker import \
    --change 'ENV LANG=C.UTF-8' --change 'CMD ["/bin/bash"]' - "$tag" >/dev/null
echo "base-image.sh: imported $tag ($(docker run --rm --network none "$tag" python3 --version))"
