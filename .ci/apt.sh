# Sourced by the .ci scripts that install Debian packages: $sudo (empty
# when root), apt_install and not_at_pinned_version.
sudo=""
if [ "$(id -u)" -ne 0 ]; then
    sudo="sudo"
fi

# apt_install PACKAGE...: the packages (or NAME=VERSION pins) without
# recommended ones, quietly, after refreshing the package lists. Waits up
# to 10 min for apt's lock: a machine's own apt runs may hold it.
apt_install() {
    $sudo apt-get -o DPkg::Lock::Timeout=600 update -qq
    $sudo env DEBIAN_FRONTEND=noninteractive apt-get \
        -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends \
        "$@" >/dev/null
}

# not_at_pinned_version NAME=VERSION...: the pins whose package is not
# installed at exactly that version, one a line.
not_at_pinned_version() {
    local pinned have
    for pinned in "$@"; do
        have=$(dpkg-query -W -f='${Status} ${Version}' "${pinned%%=*}" \
            2>/dev/null || true)
        if [ "$have" != "install ok installed ${pinned#*=}" ]; then
            echo "$pinned"
        fi
    done
}
