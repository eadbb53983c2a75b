#!/usr/bin/env bash
# Idempotent setup for the release artifact tests (scripts/test-release.sh): Debian's
# qemu-user-static, whose qemu-aarch64-static runs the arm64 release binary on this amd64
# machine. The tests call it directly, so no binfmt_misc registration is needed (or changed).
set -euo pipefail

if command -v qemu-aarch64-static >/dev/null 2>&1; then
    echo "setup-qemu: $(qemu-aarch64-static --version | head -1)"
    exit 0
fi
. "$(dirname "${BASH_SOURCE[0]}")/apt-install.sh"
apt_install_quietly qemu-user-static
echo "setup-qemu: installed qemu-user-static: $(qemu-aarch64-static --version | head -1)"
