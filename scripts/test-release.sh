#!/usr/bin/env bash
# Tests of the release artifacts (called by scripts/test.sh after the workspace tests): runs
# scripts/release.sh, then for the amd64 and the arm64 tarball checks
#   - the sums, and the tarball's contents (binary, README.md, LICENSE, completions, man pages);
#   - that the binary is fully static (readelf: no NEEDED entry, no PT_INTERP; file(1)), for the
#     right machine, and carries no crash-injection code;
#   - that it reproduces fixtures/golden/hashes.jsonl byte for byte from specs.jsonl;
#   - the output tests that pin what operators read (cli/tests/snapshots.rs: the plan table and
#     report of every bundled node, the patch report, every --help; hash_cmd.rs; dist.rs),
#     run against the artifact instead of the test build;
#   - the container image of scripts/image.sh under a private real dockerd (cli/tests/image.rs).
# The arm64 binary runs under Debian's qemu-aarch64-static (user-mode emulation), called
# directly. Prints the emulated golden-set time.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

scripts/setup-qemu.sh
scripts/release.sh

version=$(cargo pkgid -p kubelet-rehash)
version=${version##*[@#]}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "test-release.sh: $*" >&2; exit 1; }

(cd dist && sha256sum --strict -c SHA256SUMS) || fail "dist/SHA256SUMS does not match the tarballs"

# `cargo test --workspace` as in test.sh, so features resolve as in the suite's own run and the
# test binaries it built are reused, not rebuilt.
# The output tests must really run the binary KUBELET_REHASH_BIN names: pointed at nothing,
# they fail.
if KUBELET_REHASH_BIN=/nonexistent/kubelet-rehash \
    cargo test --workspace --release --test dist >"$work/guard.log" 2>&1; then
    fail "the output tests passed without a binary: they do not run KUBELET_REHASH_BIN"
fi
grep -q 'kind: NotFound' "$work/guard.log" || { cat "$work/guard.log" >&2; fail "the output tests failed for another reason than the missing binary"; }

declare -A machine=([amd64]="Advanced Micro Devices X86-64" [arm64]="AArch64")
declare -A runner=([amd64]="" [arm64]="qemu-aarch64-static")
for arch in amd64 arm64; do
    name="kubelet-rehash-$version-linux-$arch"
    tar -xzf "dist/$name.tar.gz" -C "$work"
    d="$work/$name"
    b="$d/kubelet-rehash"
    for f in kubelet-rehash README.md LICENSE completions/kubelet-rehash.bash \
        completions/_kubelet-rehash completions/kubelet-rehash.fish man/man1/kubelet-rehash.1 \
        man/man1/kubelet-rehash-patch.1; do
        [ -s "$d/$f" ] || fail "$name.tar.gz has no $f"
    done
    cmp -s README.md "$d/README.md" && cmp -s LICENSE "$d/LICENSE" || fail "$name: README.md or LICENSE differ from the tree's"
    [ -x "$b" ] || fail "$name: the binary is not executable"

    # static: no shared library needed, no program interpreter (dynamic loader) requested
    if readelf -dW "$b" | grep '(NEEDED)' >/dev/null; then
        fail "$name: the binary needs shared libraries: $(readelf -dW "$b" | grep NEEDED)"
    fi
    if readelf -lW "$b" | grep 'INTERP' >/dev/null; then
        fail "$name: the binary asks for a program interpreter: $(readelf -lW "$b" | grep -A1 INTERP)"
    fi
    desc=$(file -b "$b")
    [[ $desc == *"static-pie linked"* || $desc == *"statically linked"* ]] || fail "$name: file(1) says: $desc"
    readelf -hW "$b" | grep "Machine: *${machine[$arch]}" >/dev/null || fail "$name: not a ${machine[$arch]} binary: $desc"
    if grep -q -a KUBELET_REHASH_CRASH_AT "$b"; then
        fail "$name: the release binary contains the crash-injection path"
    fi
    echo "test-release.sh: $arch: $(stat -c %s "$b") bytes, static ($desc)"

    run=(${runner[$arch]} "$b")
    first=$("${run[@]}" --version | head -1)
    [ "$first" = "kubelet-rehash $version" ] || fail "$name: --version says $first"

    t0=$(date +%s.%N)
    "${run[@]}" hash --kubelet-version all fixtures/golden/specs.jsonl > "$work/hashes-$arch.jsonl"
    t1=$(date +%s.%N)
    cmp fixtures/golden/hashes.jsonl "$work/hashes-$arch.jsonl" || fail "$name: the golden hashes differ"
    echo "test-release.sh: $arch${runner[$arch]:+ (under ${runner[$arch]})}: fixtures/golden/hashes.jsonl reproduced byte for byte ($(wc -l < fixtures/golden/hashes.jsonl) lines) in $(awk "BEGIN { printf \"%.2f\", $t1 - $t0 }") s"

    KUBELET_REHASH_BIN="$b" KUBELET_REHASH_RUNNER="${runner[$arch]}" \
        cargo test --workspace --release --test snapshots --test hash_cmd --test dist
done

# The FROM scratch image (scripts/image.sh) around the amd64 artifact, under a private real
# dockerd, plans a mounted copy of every bundled node exactly as the host binary does.
KUBELET_REHASH_BIN="$work/kubelet-rehash-$version-linux-amd64/kubelet-rehash" \
    cargo test --release -p kubelet-rehash --features release-artifacts --test image
echo "test-release.sh: both release binaries are static and give the reviewed output; so does the image"
