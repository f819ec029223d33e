# Sourced by the .ci scripts that install Debian packages: $sudo (empty
# when root) and apt_install.
sudo=""
if [ "$(id -u)" -ne 0 ]; then
    sudo="sudo"
fi

# apt_install PACKAGE...: the packages (or NAME=VERSION pins) without
# recommended ones, quietly, after refreshing the package lists.
apt_install() {
    $sudo apt-get update -qq
    $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
        --no-install-recommends "$@" >/dev/null
}
