#!/usr/bin/env bash
# Installs the given Debian packages (as root) without starting their services: a temporary
# policy-rc.d refuses every service start during the install. Sourced by the setup scripts:
#   apt_install_quietly PKG...
apt_install_quietly() {
    if [ "$(id -u)" != 0 ]; then
        echo "$(basename "$0"): need root to install $*" >&2
        exit 1
    fi
    local created_policy=0
    if [ ! -e /usr/sbin/policy-rc.d ]; then
        printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d
        chmod 0755 /usr/sbin/policy-rc.d
        created_policy=1
    fi
    local rc=0
    DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 update -qq \
        && DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends "$@" \
        || rc=$?
    if [ "$created_policy" = 1 ]; then rm -f /usr/sbin/policy-rc.d; fi
    return "$rc"
}
