#!/usr/bin/env bash
# Idempotent setup for storepatch's Docker integration test (tests/docker_live.rs):
# Debian 12's docker.io (dockerd 20.10.x, with its containerd and runc) and busybox-static
# (the only program inside the test image). Installs nothing when both are present.
# The package install never starts the system dockerd: when /usr/sbin/policy-rc.d is absent
# we put one (exit 101) in place for the duration of the install and remove it afterwards.
set -euo pipefail

installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q 'install ok installed'; }
need=()
command -v dockerd >/dev/null 2>&1 || installed docker.io || need+=(docker.io)
# a dynamically linked busybox cannot run inside a one-layer image: the static one is required
installed busybox-static || need+=(busybox-static)

if [ ${#need[@]} -eq 0 ]; then
    echo "setup-docker: dockerd $(dockerd --version 2>/dev/null | head -1) and busybox-static present"
    exit 0
fi

. "$(dirname "${BASH_SOURCE[0]}")/apt-install.sh"
apt_install_quietly "${need[@]}"
echo "setup-docker: installed ${need[*]}; dockerd: $(dockerd --version | head -1)"
