#!/usr/bin/env bash
# Builds the base images the tests build framework images FROM, with
# debootstrap, and imports them into the Docker engine under fixed tags. No
# image registry can be reached in CI, so these stand in for the matrix's
# bases:
#   - Debian bookworm (minbase) with Python 3.11, venv, pip, CA
#     certificates and Python's C headers, for python:3.11-slim (same Debian,
#     same Python minor version; python:3.11-slim ships Python.h, which
#     torch.compile's generated C++ includes): the PyTorch, TensorFlow and
#     MXNet CPU images;
#   - Ubuntu 18.04 bionic (minbase, nothing added), for ubuntu:18.04: the
#     CNTK image, which installs its own Python 3.6 with apt.
# Idempotent: an image whose tag is present (for bookworm: with Python.h and
# docker-clean) is left alone. About 40 s and 20 s the first time.
#
#   DLREPRO_TEST_BASE_IMAGE    the bookworm tag (default below; the tests read the same)
#   DLREPRO_TEST_BIONIC_IMAGE  the bionic tag (likewise)
#   DLREPRO_UBUNTU_MIRROR      the Ubuntu archive (default http://archive.ubuntu.com/ubuntu/)
set -euo pipefail
bookworm_tag=${DLREPRO_TEST_BASE_IMAGE:-dlrepro-docker-test/bookworm-python3:minbase}
bionic_tag=${DLREPRO_TEST_BIONIC_IMAGE:-dlrepro-docker-test/bionic:minbase}
ubuntu_mirror=${DLREPRO_UBUNTU_MIRROR:-http://archive.ubuntu.com/ubuntu/}

# Debian has no package of Ubuntu's archive keys, so bionic's Release file is
# checked with the keyring of Ubuntu's own ubuntu-keyring package, taken from
# the archive and trusted by this file's sha256 and by the fingerprints of
# the keys it must hold, and nothing else: the archive signing keys of 2012
# and 2018 and the CD image key of 2012.
keyring_deb=ubuntu-keyring_2018.09.18.1~18.04.2_all.deb
keyring_sha256=5d8609563fb3074026b254d7d5248f90d393c7dbafcac48916f333bf3c90fed9
archive_keys="790BC7277767219C42C86F933B4FE6ACC0B21F32 843938DF228D22F7B3742BC0D94AA3F0EFE21092 F6ECB3762474EDA9D21B7022871920D1991BC93C"

present() { docker image inspect "$1" >/dev/null 2>&1; }
# A bookworm stand-in made before it carried Python.h and docker-clean is
# made again (the import moves the tag).
with_headers() {
    present "$1" && docker run --rm --network none "$1" sh -c \
        'test -e /etc/apt/apt.conf.d/docker-clean && test -e "$(python3 -c "import sysconfig; print(sysconfig.get_path(\"include\"))")/Python.h"'
}
if with_headers "$bookworm_tag" && present "$bionic_tag"; then
    echo "base-image.sh: $bookworm_tag and $bionic_tag are present"
    exit 0
fi
sudo=""
if [ "$(id -u)" -ne 0 ]; then
    sudo="sudo"
fi
if ! command -v debootstrap >/dev/null || ! command -v gpg >/dev/null; then
    $sudo apt-get update -qq
    $sudo apt-get install -y -qq debootstrap gnupg >/dev/null
fi
work=$(mktemp -d)
trap '$sudo rm -rf "$work"' EXIT

# debootstrap SUITE MIRROR [OPTIONS...] into $work/rootfs, then import it as TAG.
make_image() {
    local tag=$1 suite=$2 mirror=$3
    shift 3
    local rootfs="$work/rootfs-$suite"
    mkdir -p "$rootfs"
    $sudo debootstrap --variant=minbase "$@" "$suite" "$rootfs" "$mirror" \
        >"$work/$suite.log" 2>&1 || { tail -20 "$work/$suite.log" >&2; exit 1; }
    grep -m1 'Valid Release signature' "$work/$suite.log" | sed "s/^I: /base-image.sh: $suite: /"
    if [ -n "${SOURCES_LIST:-}" ]; then
        printf '%s' "$SOURCES_LIST" | $sudo tee "$rootfs/etc/apt/sources.list" >/dev/null
    fi
    # Package caches and lists only make the image bigger. Later installs
    # (the framework images' apt layers) drop their .deb files as in
    # Debian's and Ubuntu's own images, whose docker-clean this copies:
    # without it a stand-in image would carry every downloaded package.
    $sudo rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
    printf '%s\n' \
        'DPkg::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };' \
        'APT::Update::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };' \
        'Dir::Cache::pkgcache "";' 'Dir::Cache::srcpkgcache "";' \
        | $sudo tee "$rootfs/etc/apt/apt.conf.d/docker-clean" >/dev/null
    $sudo tar -C "$rootfs" -c . | docker import "${IMPORT_CHANGES[@]}" - "$tag" >/dev/null
    $sudo rm -rf "$rootfs"
}

if with_headers "$bookworm_tag"; then
    echo "base-image.sh: $bookworm_tag is present"
else
    # The Debian mirror this machine's apt already uses (it may be a proxy).
    mirror=$(apt-get indextargets --format '$(REPO_URI)' | grep -v -- '-security' \
        | grep -m1 '/debian/\?$' || true)
    mirror=${mirror:-http://deb.debian.org/debian/}
    echo "base-image.sh: debootstrap bookworm from $mirror (about a minute)"
    IMPORT_CHANGES=(--change 'ENV LANG=C.UTF-8' --change 'CMD ["/bin/bash"]')
    SOURCES_LIST="" make_image "$bookworm_tag" bookworm "$mirror" \
        --include=python3,python3-venv,python3-pip,ca-certificates,libpython3.11-dev
    echo "base-image.sh: imported $bookworm_tag ($(docker run --rm --network none "$bookworm_tag" python3 --version))"
fi

if present "$bionic_tag"; then
    echo "base-image.sh: $bionic_tag is present"
else
    keyring_url="${ubuntu_mirror%/}/pool/main/u/ubuntu-keyring/$keyring_deb"
    echo "base-image.sh: Ubuntu's archive keys from $keyring_url"
    wget -q -T 120 -O "$work/$keyring_deb" "$keyring_url"
    echo "$keyring_sha256  $work/$keyring_deb" | sha256sum -c --quiet --strict
    dpkg-deb -x "$work/$keyring_deb" "$work/keyring"
    keyring="$work/keyring/usr/share/keyrings/ubuntu-archive-keyring.gpg"
    found=$(gpg --batch --show-keys --with-colons "$keyring" 2>/dev/null \
        | awk -F: '$1 == "fpr" {print $10}' | sort | xargs)
    if [ "$found" != "$(echo "$archive_keys" | tr ' ' '\n' | sort | xargs)" ]; then
        echo "base-image.sh: $keyring holds keys $found, expected $archive_keys" >&2
        exit 1
    fi
    echo "base-image.sh: debootstrap bionic from $ubuntu_mirror (about 20 s)"
    # The suites and components ubuntu:18.04 itself lists.
    IMPORT_CHANGES=(--change 'CMD ["/bin/bash"]')
    SOURCES_LIST=$(for suite in bionic bionic-updates bionic-security; do
        echo "deb $ubuntu_mirror $suite main restricted universe multiverse"; done)$'\n' \
        make_image "$bionic_tag" bionic "$ubuntu_mirror" --keyring="$keyring"
    echo "base-image.sh: imported $bionic_tag ($(docker run --rm --network none "$bionic_tag" sh -c '. /etc/os-release; echo $PRETTY_NAME'))"
fi
