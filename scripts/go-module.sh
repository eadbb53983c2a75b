# Sourced by the setup-*-module.sh scripts, which build runtimes from the Go module proxy into a
# cache outside the clone keyed by version ($here: the repository).

# go_module_source MOD WORK: MOD's source as the proxy serves it (with a go.mod, or Docker's
# vendor.mod) copied to WORK/src, writable; fails when the proxy gives no source.
go_module_source() {
    local dir
    dir="$(cd "$2" && GOTOOLCHAIN=auto go mod download -json "$1" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')"
    [ -n "$dir" ] && { [ -f "$dir/go.mod" ] || [ -f "$dir/vendor.mod" ]; } || return 1
    cp -r "$dir" "$2/src" && chmod -R u+w "$2/src"
}

# link_runtime OUT NAME: .cache/runtimes/NAME -> OUT, where the tests and the lab look.
link_runtime() {
    mkdir -p "$here/.cache/runtimes"
    ln -sfn "$1" "$here/.cache/runtimes/$2"
}
