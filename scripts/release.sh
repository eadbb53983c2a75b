#!/usr/bin/env bash
# Builds the release artifacts into dist/:
#   kubelet-rehash-<version>-linux-amd64.tar.gz, kubelet-rehash-<version>-linux-arm64.tar.gz,
#   SHA256SUMS
# Each tarball holds one directory kubelet-rehash-<version>-linux-<arch>/ with the binary,
# README.md, LICENSE, completions/ (bash, zsh, fish) and man/man1/*.1.
#
# The binaries are fully static musl executables (no libc, no loader: they run on any Linux
# kernel the Rust musl targets support, 3.2 and newer), built with the [profile.dist] of the
# workspace Cargo.toml and linked by the toolchain's own rust-lld against the self-contained
# musl crt objects and libc.a that rustup's musl rust-std ships: no C cross toolchain is
# needed, for arm64 either; the one C dependency, ring (TLS to the API server), is compiled by
# clang for both targets. Everything is set here, for this build only (no ~/.cargo/config).
# Their allocator is musl's malloc behind alloccache/'s per-thread cache (cli/src/main.rs says why).
#
# The completions and man pages come from the clap definitions through the amd64 binary
# (the same definitions as arm64's). Tarballs are reproducible for a commit: file order,
# owners and mtimes are fixed (SOURCE_DATE_EPOCH = the commit time) and gzip stores no name
# or time.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

start=$(date +%s)
targets=(x86_64-unknown-linux-musl aarch64-unknown-linux-musl)
declare -A arch_of=([x86_64-unknown-linux-musl]=amd64 [aarch64-unknown-linux-musl]=arm64)

command -v rustup >/dev/null || { echo "release.sh: needs rustup (to add the musl targets)" >&2; exit 1; }
rustup target add "${targets[@]}"

version=$(cargo pkgid -p kubelet-rehash)
version=${version##*[@#]}
target_dir=${CARGO_TARGET_DIR:-target}
dist=dist
rm -rf "$dist"
mkdir -p "$dist"

# RUSTFLAGS in the caller's environment would silently replace the per-target flags below.
unset RUSTFLAGS CARGO_ENCODED_RUSTFLAGS
# Build-machine paths stay out of the binaries' panic locations.
remap="--remap-path-prefix=$PWD=. --remap-path-prefix=${CARGO_HOME:-$HOME/.cargo}=/cargo"
# The TLS of the API client (rustls with ring, nodeapi/) has C and assembly parts: clang
# compiles them for either target (no cross gcc, no musl headers: ring is freestanding), and
# llvm-ar archives them. Debian's clang and llvm are installed when missing.
if ! command -v clang >/dev/null || ! command -v llvm-ar >/dev/null; then
    # shellcheck source=apt-install.sh
    . "$(dirname "${BASH_SOURCE[0]}")/apt-install.sh"
    apt_install_quietly clang llvm
fi
for t in "${targets[@]}"; do
    T=$(echo "$t" | tr 'a-z-' 'A-Z_')
    export "CC_${t//-/_}=clang" "AR_${t//-/_}=llvm-ar"
    export "CARGO_TARGET_${T}_LINKER=rust-lld"
    export "CARGO_TARGET_${T}_RUSTFLAGS=-C linker-flavor=ld.lld -C target-feature=+crt-static $remap"
done

for t in "${targets[@]}"; do
    t0=$(date +%s)
    cargo build --locked --profile dist -p kubelet-rehash --target "$t"
    echo "release.sh: built $t in $(( $(date +%s) - t0 )) s"
done

host_bin="$target_dir/x86_64-unknown-linux-musl/dist/kubelet-rehash"
gen=$(mktemp -d)
trap 'rm -rf "$gen"' EXIT
mkdir -p "$gen/completions" "$gen/man/man1"
"$host_bin" completions bash > "$gen/completions/kubelet-rehash.bash"
"$host_bin" completions zsh > "$gen/completions/_kubelet-rehash"
"$host_bin" completions fish > "$gen/completions/kubelet-rehash.fish"
"$host_bin" man "$gen/man/man1"

epoch=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || date +%s)}
for t in "${targets[@]}"; do
    name="kubelet-rehash-$version-linux-${arch_of[$t]}"
    stage="$gen/$name"
    mkdir -p "$stage"
    install -m 0755 "$target_dir/$t/dist/kubelet-rehash" "$stage/kubelet-rehash"
    install -m 0644 README.md LICENSE "$stage/"
    cp -r "$gen/completions" "$gen/man" "$stage/"
    chmod -R u=rwX,go=rX "$stage"
    tar --sort=name --owner=0 --group=0 --numeric-owner --mtime="@$epoch" \
        -C "$gen" -cf - "$name" | gzip -9 -n > "$dist/$name.tar.gz"
done
(cd "$dist" && sha256sum -- *.tar.gz > SHA256SUMS)

for t in "${targets[@]}"; do
    b="$target_dir/$t/dist/kubelet-rehash"
    echo "release.sh: ${arch_of[$t]} binary $(stat -c %s "$b") bytes: $(file -b "$b")"
done
ls -l "$dist"
cat "$dist/SHA256SUMS"
echo "release.sh: kubelet-rehash $version built in $(( $(date +%s) - start )) s"
