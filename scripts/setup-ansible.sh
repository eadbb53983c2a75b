#!/usr/bin/env bash
# Idempotent setup for cli/tests/ansible_live.rs: Debian 12's ansible-core and the Python
# libraries it imports, fetched through the PRIVATE apt configuration (scripts/apt-private.sh)
# with `apt-get download` and unpacked with `dpkg-deb -x` into .cache/ansible/root. Nothing is
# installed system-wide: the test runs .cache/ansible/bin/ansible-playbook, a wrapper that puts
# the unpacked dist-packages first on Debian's own /usr/bin/python3 (the packages' compiled
# modules are built for it).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dest="$here/.cache/ansible"
# ansible-core's Depends that it imports on a controller driving local hosts; openssh-client,
# paramiko and the network libraries are for remote connections and stay out
pkgs=(ansible-core python3-jinja2 python3-markupsafe python3-yaml python3-packaging
      python3-resolvelib python3-cryptography python3-cffi-backend)
log() { echo "setup-ansible: $*"; }

[ -x /usr/bin/python3 ] || { echo "setup-ansible: Debian's /usr/bin/python3 is missing" >&2; exit 1; }

works() {
    [ -x "$dest/bin/ansible-playbook" ] && [ "$(cat "$dest/packages" 2>/dev/null)" = "${pkgs[*]}" ] \
        && "$dest/bin/ansible-playbook" --version >/dev/null 2>&1
}

if ! works; then
    . "$here/scripts/apt-private.sh"
    apt_private_init bookworm
    debs="$here/.cache/apt-private/debs/ansible"
    rm -rf "$debs" "$dest.tmp"
    mkdir -p "$debs" "$dest.tmp/root" "$dest.tmp/bin"
    # /bookworm: the private list also carries newer suites, whose builds are for another Python
    (cd "$debs" && apt-get "${APT_PRIVATE[@]}" download "${pkgs[@]/%//bookworm}" 2>&1 | grep -v "unsandboxed as root" || true)
    for p in "${pkgs[@]}"; do
        deb=$(ls "$debs/${p}_"*.deb 2>/dev/null | head -1)
        [ -n "$deb" ] || { echo "setup-ansible: $p was not downloaded into $debs" >&2; exit 1; }
        dpkg-deb -x "$deb" "$dest.tmp/root"
        log "unpacked $(basename "$deb")"
    done
    for tool in ansible ansible-playbook ansible-inventory; do
        cat > "$dest.tmp/bin/$tool" <<WRAPPER
#!/bin/sh
# $tool of Debian's ansible-core unpacked under .cache/ansible/root (scripts/setup-ansible.sh)
root="\$(cd "\$(dirname "\$0")/../root" && pwd)"
PYTHONPATH="\$root/usr/lib/python3/dist-packages\${PYTHONPATH:+:\$PYTHONPATH}" exec /usr/bin/python3 "\$root/usr/bin/$tool" "\$@"
WRAPPER
        chmod 0755 "$dest.tmp/bin/$tool"
    done
    echo "${pkgs[*]}" > "$dest.tmp/packages"
    rm -rf "$dest"
    mv "$dest.tmp" "$dest"
    works || { echo "setup-ansible: $dest/bin/ansible-playbook does not run:" >&2; "$dest/bin/ansible-playbook" --version >&2; exit 1; }
fi
v=$("$dest/bin/ansible-playbook" --version)
log "${v%%$'\n'*}"
